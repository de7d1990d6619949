package grpc_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
)

// forward is a proxy's grpc.UnknownServiceHandler: it forwards each call,
// one request and one response, to cc under the method name its client
// sent, whatever that name is.
func forward(cc *grpc.ClientConn) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		method, ok := grpc.MethodFromServerStream(ss)
		if !ok {
			return status.Error(codes.Internal, "no method")
		}
		in, out := new(wrapperspb.StringValue), new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		if err := cc.Invoke(ss.Context(), method, in, out); err != nil {
			return err
		}
		return ss.SendMsg(out)
	}
}

// spanNames returns the distinct names and rpc.method values of the
// spans rec holds, and the rpc.method_original value of each span name
// that has one.
func spanNames(rec *tracetest.SpanRecorder) (names, methods map[string]int, originals map[string]bool) {
	names, methods, originals = map[string]int{}, map[string]int{}, map[string]bool{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if v, ok := attrOf(s, "rpc.method"); ok {
			methods[v.AsString()]++
		}
		if v, ok := attrOf(s, "rpc.method_original"); ok {
			originals[v.AsString()] = true
		}
	}
	return names, methods, originals
}

// TestProxyMethodCardinality: a proxy forwards whatever method names its
// clients send through the Client. A hostile client, over loopback, sends
// hundreds of distinct names; the proxy's spans must keep a bounded set
// of names and rpc.method values (OpenTelemetry's "_OTHER" and a span
// named after rpc.system.name for methods the client does not
// recognise), with the name sent kept only in rpc.method_original.
func TestProxyMethodCardinality(t *testing.T) {
	const distinct = 300
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp, MaxAttempts: 1})
	backend := clientConn(t, &service{}, c)
	hostile := serve(t, &service{}, []grpc.ServerOption{grpc.UnknownServiceHandler(forward(backend))})
	ctx := testCtx(t)
	for i := range distinct {
		method := fmt.Sprintf("/attack%d.Svc/M%d", i, i)
		if _, err := call(ctx, hostile, method, "x"); status.Code(err) != codes.Unimplemented {
			t.Fatalf("%s through the proxy: %v, want Unimplemented from the backend", method, err)
		}
	}
	names, methods, originals := spanNames(rec)
	want := map[string]int{"retry grpc": distinct, "grpc": distinct}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("span names %d distinct, want %v: %v", len(names), want, firstKeys(names, 5))
	}
	if len(methods) != 1 || methods["_OTHER"] != 2*distinct {
		t.Errorf("rpc.method values %d distinct, want only _OTHER: %v", len(methods), firstKeys(methods, 5))
	}
	if len(originals) != distinct || !originals["attack7.Svc/M7"] {
		t.Errorf("rpc.method_original: %d distinct values, want the %d names sent", len(originals), distinct)
	}
}

// TestClientKnownMethods: the names a client recognises keep their span
// name and rpc.method: calls from generated stubs (grpc.StaticMethod, as
// protoc-gen-go-grpc adds it) and ClientConfig.KnownMethods; any other
// call is "_OTHER".
func TestClientKnownMethods(t *testing.T) {
	for _, tc := range []struct {
		name         string
		method       string
		opts         []grpc.CallOption
		span, rpcMet string
	}{
		{"generated stub", mBatch, []grpc.CallOption{grpc.StaticMethod()}, "shedkit.test.Echo/Batch", "shedkit.test.Echo/Batch"},
		{"configured", mInteract, nil, "shedkit.test.Echo/Interactive", "shedkit.test.Echo/Interactive"},
		{"neither", mHealth, nil, "grpc", "_OTHER"},
		{"unknown to the server too", "/no.Such/Method", nil, "grpc", "_OTHER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp, MaxAttempts: 1, KnownMethods: []string{mInteract}})
			cc := clientConn(t, &service{}, c)
			_, _ = call(testCtx(t), cc, tc.method, "x", tc.opts...)
			logical, attempts := spansOf(t, rec)
			if logical.Name() != "retry "+tc.span || len(attempts) != 1 || attempts[0].Name() != tc.span {
				t.Fatalf("spans %q and %d attempts, want %q and one %q", logical.Name(), len(attempts), "retry "+tc.span, tc.span)
			}
			for _, s := range []sdktrace.ReadOnlySpan{logical, attempts[0]} {
				v, _ := attrOf(s, "rpc.method")
				orig, ok := attrOf(s, "rpc.method_original")
				if v.AsString() != tc.rpcMet || ok != (tc.rpcMet == "_OTHER") || ok && orig.AsString() != tc.method[1:] {
					t.Errorf("%s: rpc.method %q, rpc.method_original %q (%v)", s.Name(), v.AsString(), orig.AsString(), ok)
				}
			}
		})
	}
}

// TestMethodOriginalBounded: the name a proxy forwards comes from the
// network, bounded only by gRPC's header limits, and may be any bytes.
// rpc.method_original keeps at most its first 256 bytes, cut between
// characters, and is valid UTF-8 (OpenTelemetry string attributes must
// be), each byte that is not UTF-8 replaced by U+FFFD.
func TestMethodOriginalBounded(t *testing.T) {
	const svc = "/hostile.Svc/"
	long := strings.Repeat("x", 16<<10)
	euros := strings.Repeat("€", 16<<10/3) // 3 bytes each: the 256th byte falls inside one
	for _, tc := range []struct {
		name, method, want string
	}{
		{"16 KB name", svc + long, (svc + long)[1:257]},
		{"16 KB of 3-byte characters", svc + euros, (svc + euros)[1:256]},
		{"invalid UTF-8", svc + "M\xff\xfex\xc3", "hostile.Svc/M\uFFFD\uFFFDx\uFFFD"},
		{"short and valid", svc + "Ménage", "hostile.Svc/Ménage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp, MaxAttempts: 1})
			_, _ = call(testCtx(t), clientConn(t, &service{}, c), tc.method, "x")
			logical, attempts := spansOf(t, rec)
			for _, s := range append(attempts, logical) {
				v, _ := attrOf(s, "rpc.method_original")
				got := v.AsString()
				if got != tc.want || !utf8.ValidString(got) {
					t.Errorf("%s: rpc.method_original of %d bytes (valid UTF-8: %v) %.40q..., want %d bytes %.40q...",
						s.Name(), len(got), utf8.ValidString(got), got, len(tc.want), tc.want)
				}
			}
		})
	}
}

func firstKeys(m map[string]int, n int) []string {
	var ks []string
	for k := range m {
		if len(ks) == n {
			break
		}
		ks = append(ks, k)
	}
	return ks
}
