package grpc_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
)

// A later interceptor or codec that panics must not leave the attempt's
// CLIENT span open: an unended span is never exported, so the trace would
// lose the very attempt that failed.
func TestAttemptSpanEndsWhenInvokerPanics(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c, _ := newClient(t, shedgrpc.ClientConfig{TracerProvider: tp})
	cc, err := grpc.NewClient("passthrough:///upstream.test", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		panic("interceptor bug")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_ = c.UnaryInterceptor()(context.Background(), "/pkg.Svc/M", nil, nil, cc, invoker)
	}()
	if started, ended := len(rec.Started()), len(rec.Ended()); started != 2 || ended != started {
		t.Fatalf("%d spans started, %d ended: want the logical and the attempt span, both ended", started, ended)
	}
}
