package grpc_test

import (
	"context"
	"testing"

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
// comparison with go-concurrency-limits' gRPC interceptor, over loopback
// too and interleaved for the ratios the documentation quotes, is in
// module bench/ (package grpcpeers), so that this module does not require
// it.
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
