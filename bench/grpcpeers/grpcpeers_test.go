package grpcpeers_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	gclgrpc "github.com/platinummonkey/go-concurrency-limits/grpc"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
	gcllimiter "github.com/platinummonkey/go-concurrency-limits/limiter"
	gclstrategy "github.com/platinummonkey/go-concurrency-limits/strategy"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shedkit/shedkit/limits"
	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The service is written by hand (a grpc.ServiceDesc over protobuf's
// well-known StringValue) so that the benchmarks need no code generation:
// one unary method that echoes its request.
const (
	svcName = "shedkit.bench.Echo"
	mEcho   = "/" + svcName + "/Echo"
)

var serviceDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if icp == nil {
				return benchHandler(ctx, in)
			}
			return icp(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: mEcho}, benchHandler)
		},
	}},
}

// serve starts a gRPC server with sopts on 127.0.0.1 and returns a client
// connection to it; both are closed when the benchmark ends.
func serve(tb testing.TB, sopts []grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&serviceDesc, struct{}{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cc.Close()
		srv.Stop()
		<-done
	})
	return cc
}

// variant is one server-side configuration measured against the bare
// server: its unary interceptor, nil for none.
type variant struct {
	name string
	icp  grpc.UnaryServerInterceptor
}

// variants returns the bare server, shedkit with a static and with an
// adaptive limit, and go-concurrency-limits v1.0.0's gRPC interceptor with
// its Gradient2 limit (the configuration of this module's hot-path peers).
// Limits are high enough that every call is admitted.
func variants(tb testing.TB) []variant {
	static, err := shed.New(shed.Config{Limit: shed.MaxLimit})
	if err != nil {
		tb.Fatal(err)
	}
	g, err := limits.NewGradient(limits.GradientConfig{InitialLimit: 1000, MaxLimit: 10000})
	if err != nil {
		tb.Fatal(err)
	}
	adaptive, err := shed.New(shed.Config{Source: g})
	if err != nil {
		tb.Fatal(err)
	}
	mk := func(l *shed.Limiter) grpc.UnaryServerInterceptor {
		s, err := shedgrpc.NewServer(shedgrpc.ServerConfig{Limiter: l})
		if err != nil {
			tb.Fatal(err)
		}
		return s.UnaryInterceptor()
	}
	g2 := gcllimit.NewDefaultGradient2Limit("bench", nil, nil)
	gl, err := gcllimiter.NewDefaultLimiter(g2, 1e9, 1e9, 1e5, 100, gclstrategy.NewSimpleStrategy(g2.EstimatedLimit()), nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return []variant{
		{"bare", nil},
		{"shedkit-static", mk(static)},
		{"shedkit-gradient", mk(adaptive)},
		{"gcl-gradient2", gclgrpc.UnaryServerInterceptor(gclgrpc.WithLimiter(gl))},
	}
}

var (
	benchInfo = &grpc.UnaryServerInfo{FullMethod: mEcho}
	benchReq  = wrapperspb.String("ping")
)

func benchHandler(_ context.Context, req any) (any, error) { return req, nil }

// BenchmarkUnaryInProcess calls each interceptor directly around a handler
// that returns at once: the interceptor's own cost, without gRPC's.
func BenchmarkUnaryInProcess(b *testing.B) {
	ctx := context.Background()
	for _, v := range variants(b) {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if v.icp == nil {
					_, err = benchHandler(ctx, benchReq)
				} else {
					_, err = v.icp(ctx, benchReq, benchInfo, benchHandler)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// loopbackConns serves every variant on 127.0.0.1 and returns a client
// connection to each, after one call through it.
func loopbackConns(tb testing.TB, vs []variant) []*grpc.ClientConn {
	ccs := make([]*grpc.ClientConn, len(vs))
	for i, v := range vs {
		var sopts []grpc.ServerOption
		if v.icp != nil {
			sopts = append(sopts, grpc.UnaryInterceptor(v.icp))
		}
		ccs[i] = serve(tb, sopts)
		out := new(wrapperspb.StringValue)
		if err := ccs[i].Invoke(context.Background(), mEcho, wrapperspb.String("warm"), out); err != nil {
			tb.Fatalf("%s: %v", v.name, err)
		}
		if out.GetValue() != "warm" {
			tb.Fatalf("%s: answered %q, want %q", v.name, out.GetValue(), "warm")
		}
	}
	return ccs
}

// BenchmarkUnaryLoopback is one unary call at a time through a real gRPC
// client and server on 127.0.0.1, per variant.
func BenchmarkUnaryLoopback(b *testing.B) {
	vs := variants(b)
	ccs := loopbackConns(b, vs)
	ctx := context.Background()
	for i, v := range vs {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			in, out := wrapperspb.String("ping"), new(wrapperspb.StringValue)
			for b.Loop() {
				if err := ccs[i].Invoke(ctx, mEcho, in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRatios measures every variant in the same run, interleaved in
// rounds so that the noise of a shared machine hits them alike, and
// reports each one's time per call as a ratio to the bare server's
// (in process and over loopback), the figures to quote.
func BenchmarkRatios(b *testing.B) {
	vs := variants(b)
	ccs := loopbackConns(b, vs)
	ctx := context.Background()
	in, out := wrapperspb.String("ping"), new(wrapperspb.StringValue)
	const rounds = 20
	inproc := make([]time.Duration, len(vs))
	loop := make([]time.Duration, len(vs))
	n := max(b.N/rounds, 1)
	b.ResetTimer()
	for range rounds {
		for i, v := range vs {
			start := time.Now()
			for range 50 * n {
				if v.icp == nil {
					_, _ = benchHandler(ctx, benchReq)
				} else {
					_, _ = v.icp(ctx, benchReq, benchInfo, benchHandler)
				}
			}
			inproc[i] += time.Since(start) / 50
			start = time.Now()
			for range n {
				if err := ccs[i].Invoke(ctx, mEcho, in, out); err != nil {
					b.Fatal(err)
				}
			}
			loop[i] += time.Since(start)
		}
	}
	calls := float64(n * rounds)
	for i, v := range vs {
		b.ReportMetric(float64(loop[i])/calls, v.name+"-loopback-ns/call")
		if i > 0 {
			b.ReportMetric(float64(inproc[i]-inproc[0])/calls, v.name+"-overhead-ns/call")
			b.ReportMetric(float64(loop[i])/float64(loop[0]), v.name+"/bare-loopback")
		}
	}
	for i := 2; i < len(vs); i++ {
		b.ReportMetric(float64(inproc[i]-inproc[0])/float64(inproc[1]-inproc[0]), fmt.Sprintf("%s/shedkit-static-overhead", vs[i].name))
	}
}

// TestVariants checks what the benchmarks take for granted: every variant
// admits calls below its limit, in process and over loopback.
func TestVariants(t *testing.T) {
	vs := variants(t)
	ccs := loopbackConns(t, vs)
	ctx := context.Background()
	for i, v := range vs {
		for range 100 {
			if v.icp != nil {
				if _, err := v.icp(ctx, benchReq, benchInfo, benchHandler); err != nil {
					t.Fatalf("%s in process: %v", v.name, err)
				}
			}
		}
		out := new(wrapperspb.StringValue)
		for range 10 {
			if err := ccs[i].Invoke(ctx, mEcho, wrapperspb.String("ping"), out); err != nil {
				t.Fatalf("%s over loopback: %v", v.name, err)
			}
		}
	}
}
