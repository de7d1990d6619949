package grpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// A server that sheds load and a client that retries within the shared
// budget, over loopback, with gRPC's health service as the application.
func Example() {
	lim, err := shed.New(shed.Config{
		Limit: 1, // in production, an adaptive Source from package limits
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 50, MaxWait: 100 * time.Millisecond},
			{Name: "batch"},
		},
	})
	if err != nil {
		panic(err)
	}
	srv, err := shedgrpc.NewServer(shedgrpc.ServerConfig{
		Limiter:    lim,
		Methods:    map[string]string{"/grpc.health.v1.Health/": "batch"},
		RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 100, Burst: 20}},
	})
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer(srv.ServerOptions()...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()

	cli, err := shedgrpc.NewClient(shedgrpc.ClientConfig{Name: "health"})
	if err != nil {
		panic(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(cli.UnaryInterceptor()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)

	resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err)

	// Fill the limiter: the next call is shed with a pushback of 1 s (the
	// limiter's Retry-After hint), which does not fit the call's 300 ms
	// deadline, so the client does not retry.
	held, _ := lim.TryAcquire(shed.Request{Class: 1})
	defer held.Release(shed.Ignored)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var trailer metadata.MD
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	fmt.Println(status.Code(err), trailer.Get(shedgrpc.PushbackKey), errors.Is(err, retrybudget.ErrDeadline))
	// Output:
	// SERVING <nil>
	// Unavailable [1000] true
}
