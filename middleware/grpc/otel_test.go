package grpc_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

const scope = "github.com/shedkit/shedkit/middleware/grpc"

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spansOf splits the recorded spans into the client's logical span and
// the CLIENT spans of its attempts (whatever their instrumentation).
func spansOf(t *testing.T, rec *tracetest.SpanRecorder) (logical sdktrace.ReadOnlySpan, attempts []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range rec.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindInternal && s.InstrumentationScope().Name == scope:
			if logical != nil {
				t.Fatal("two logical spans for one call")
			}
			logical = s
		case s.SpanKind() == trace.SpanKindClient:
			attempts = append(attempts, s)
		}
	}
	if logical == nil {
		t.Fatal("no logical span")
	}
	return logical, attempts
}

// TestClientSpans: one INTERNAL span per logical call and one CLIENT span
// per attempt, its child, with the resend count on retries; the trace
// context of each attempt reaches the server.
func TestClientSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
	f := &failing{n: 2, code: codes.Unavailable}
	var (
		mu      sync.Mutex
		parents []string // the span ids the server sees as its parents
	)
	svc := f.service()
	inner := svc.unary
	svc.unary = func(ctx context.Context, m string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": strings.Join(md.Get("traceparent"), "")}))
		mu.Lock()
		parents = append(parents, sc.SpanID().String())
		mu.Unlock()
		return inner(ctx, m, in)
	}
	cc := clientConn(t, svc, c)
	// grpc.StaticMethod, as a generated stub passes it: the method keeps
	// its name in the spans (see TestClientKnownMethods).
	if _, err := call(testCtx(t), cc, mBatch, "hi", grpc.StaticMethod()); err != nil {
		t.Fatal(err)
	}
	logical, attempts := spansOf(t, rec)
	if logical.Name() != "retry shedkit.test.Echo/Batch" {
		t.Errorf("logical span %q", logical.Name())
	}
	if v, _ := attrOf(logical, "shedkit.retry.attempts"); v.AsInt64() != 3 {
		t.Errorf("attempts attribute %v", v.String())
	}
	if v, _ := attrOf(logical, "rpc.response.status_code"); v.AsString() != "OK" {
		t.Errorf("logical status %v", v.String())
	}
	if len(attempts) != 3 {
		t.Fatalf("%d attempt spans, want 3", len(attempts))
	}
	for i, a := range attempts {
		if a.Parent().SpanID() != logical.SpanContext().SpanID() || a.Name() != "shedkit.test.Echo/Batch" {
			t.Errorf("attempt %d: %q, parent %v", i, a.Name(), a.Parent().SpanID())
		}
		rc, ok := attrOf(a, "shedkit.retry.resend_count")
		if (i == 0) == ok || ok && rc.AsInt64() != int64(i) {
			t.Errorf("attempt %d: resend count %v, %v", i, rc.String(), ok)
		}
		mu.Lock()
		parent := parents[i]
		mu.Unlock()
		if parent != a.SpanContext().SpanID().String() {
			t.Errorf("attempt %d: the server saw parent %s, want %s", i, parent, a.SpanContext().SpanID())
		}
		if v, _ := attrOf(a, "server.address"); v.AsString() != "127.0.0.1" {
			t.Errorf("attempt %d: server.address %v", i, v.String())
		}
	}
	if n := len(logical.Events()); n != 2 {
		t.Errorf("%d events on the logical span, want 2 backoffs", n)
	}
	checkCounters(t, reader, map[string]int64{"shedkit.retry.requests": 1, "shedkit.retry.attempts": 3, "shedkit.retry.budget.balance": 1})
}

func checkCounters(t *testing.T, reader sdkmetric.Reader, want map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += dp.Value
				}
			case metricdata.Gauge[int64]:
				got[m.Name] = int64(len(d.DataPoints)) // how many budgets it observes
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

// TestWithOtelgrpc: next to otelgrpc's stats handlers, the client makes
// the logical span and otelgrpc the CLIENT span of each attempt (its
// child); the server interceptor annotates otelgrpc's server span.
func TestWithOtelgrpc(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prop := otelgrpc.WithPropagators(propagation.TraceContext{})
	c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp, DisableAttemptSpans: true})
	lim := newLimiter(t, shed.Config{Limit: 10})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	f := &failing{n: 1, code: codes.Unavailable}
	sopts := append([]grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), prop))}, s.ServerOptions()...)
	cc := serve(t, f.service(), sopts,
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), prop)),
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
	if _, err := call(testCtx(t), cc, mBatch, "hi"); err != nil {
		t.Fatal(err)
	}
	logical, attempts := spansOf(t, rec)
	if len(attempts) != 2 {
		t.Fatalf("%d CLIENT spans, want otelgrpc's 2", len(attempts))
	}
	for i, a := range attempts {
		if a.InstrumentationScope().Name == scope || a.Parent().SpanID() != logical.SpanContext().SpanID() {
			t.Errorf("attempt %d: scope %s, parent %v: want otelgrpc's, under the logical span", i, a.InstrumentationScope().Name, a.Parent().SpanID())
		}
	}
	// The server ends its span after it sent the response.
	var servers []sdktrace.ReadOnlySpan
	waitFor(t, "the server spans", func() bool {
		servers = servers[:0]
		for _, s := range rec.Ended() {
			if s.SpanKind() == trace.SpanKindServer {
				servers = append(servers, s)
			}
		}
		return len(servers) == 2
	})
	seen := map[int64]bool{}
	for _, s := range servers {
		if v, _ := attrOf(s, shedhttp.AttrDecision); v.AsString() != shedhttp.DecisionAdmitted {
			t.Errorf("server span: decision %q", v.String())
		}
		// The attempt number and the deadline travel to the server span.
		n, _ := attrOf(s, shedhttp.AttrAttempt)
		seen[n.AsInt64()] = true
		if b, ok := attrOf(s, shedhttp.AttrDeadlineBudget); !ok || b.AsFloat64() <= 0 {
			t.Errorf("server span: deadline budget %v (set: %v), want the call's time left", b.String(), ok)
		}
		if s.Parent().TraceID() != logical.SpanContext().TraceID() {
			t.Errorf("server span in another trace")
		}
	}
	if !seen[1] || !seen[2] {
		t.Errorf("server spans carry attempts %v, want 1 and 2", seen)
	}
}
