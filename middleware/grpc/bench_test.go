package grpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shedkit/shedkit/limits"
	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/shed"
)

// variant is one server-side configuration measured against the bare
// server: its unary interceptor, nil for none.
type variant struct {
	name string
	icp  grpc.UnaryServerInterceptor
}

// variants returns the bare server and shedkit with a static and with an
// adaptive limit. Limits are high enough that every call is admitted. The
// comparison with go-concurrency-limits' gRPC interceptor is in module
// bench/ (package grpcpeers), so that this module does not require it.
func variants(b *testing.B) []variant {
	static, err := shed.New(shed.Config{Limit: shed.MaxLimit})
	if err != nil {
		b.Fatal(err)
	}
	g, err := limits.NewGradient(limits.GradientConfig{InitialLimit: 1000, MaxLimit: 10000})
	if err != nil {
		b.Fatal(err)
	}
	adaptive, err := shed.New(shed.Config{Source: g})
	if err != nil {
		b.Fatal(err)
	}
	mk := func(l *shed.Limiter) grpc.UnaryServerInterceptor {
		s, err := shedgrpc.NewServer(shedgrpc.ServerConfig{Limiter: l})
		if err != nil {
			b.Fatal(err)
		}
		return s.UnaryInterceptor()
	}
	return []variant{
		{"bare", nil},
		{"shedkit-static", mk(static)},
		{"shedkit-gradient", mk(adaptive)},
	}
}

var (
	benchInfo = &grpc.UnaryServerInfo{FullMethod: mBatch}
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

// nopStream stands for gRPC's server transport stream, which receives
// the pushback trailer (gRPC's own copies it into the call's trailer).
type nopStream struct{}

func (nopStream) Method() string                  { return mBatch }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkUnaryRejected is the in-process cost of shedding a call: the
// limiter is full.
func BenchmarkUnaryRejected(b *testing.B) {
	full, err := shed.New(shed.Config{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	held, _ := full.TryAcquire(shed.Request{})
	defer held.Release(shed.Ignored)
	s, err := shedgrpc.NewServer(shedgrpc.ServerConfig{Limiter: full})
	if err != nil {
		b.Fatal(err)
	}
	icp, ctx := s.UnaryInterceptor(), grpc.NewContextWithServerTransportStream(context.Background(), nopStream{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := icp(ctx, benchReq, benchInfo, benchHandler); err == nil {
			b.Fatal("admitted")
		}
	}
}

// loopbackConns serves every variant on 127.0.0.1 and returns a client
// connection to each.
func loopbackConns(b *testing.B, vs []variant) []*grpc.ClientConn {
	ccs := make([]*grpc.ClientConn, len(vs))
	for i, v := range vs {
		var sopts []grpc.ServerOption
		if v.icp != nil {
			sopts = append(sopts, grpc.UnaryInterceptor(v.icp))
		}
		ccs[i] = serve(b, &service{}, sopts)
		if _, err := call(context.Background(), ccs[i], mBatch, "warm"); err != nil {
			b.Fatal(err)
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
				if err := ccs[i].Invoke(ctx, mBatch, in, out); err != nil {
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
				if err := ccs[i].Invoke(ctx, mBatch, in, out); err != nil {
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
