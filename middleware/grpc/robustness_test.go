package grpc_test

// Paths a hostile review found: user code that panics, streams received
// on one goroutine and ended on another, forwarded metadata, draining
// backends and saturated waits.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// TestOutcomePanicReleasesPermit: a panicking ServerConfig.Outcome (user
// code, called after the handler returned) still releases the call's
// permit: with a recovery interceptor outside, the server lives on, and an
// idle server admits the next call.
func TestOutcomePanicReleasesPermit(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Outcome: func(c shedgrpc.Call, err error) shed.Outcome {
		if status.Code(err) == codes.NotFound {
			panic("outcome bug")
		}
		return shedgrpc.DefaultOutcome(c, err)
	}})
	svc := &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "missing" {
			return nil, status.Error(codes.NotFound, "no such thing")
		}
		return in, nil
	}}
	cc := serve(t, svc, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary, s.UnaryInterceptor()),
	})
	ctx := testCtx(t)
	if _, err := call(ctx, cc, mBatch, "missing"); status.Code(err) != codes.Internal {
		t.Fatalf("first call: %v", err)
	}
	if n := lim.InFlight(); n != 0 {
		t.Errorf("in flight after the call ended: %d, want 0 (permit leaked)", n)
	}
	if _, err := call(ctx, cc, mBatch, "ok"); err != nil {
		t.Fatalf("next call on an idle server: %v (the leaked permit holds the whole limit)", err)
	}
}

// TestBreakerRecoversFromPanickedProbe: a panic below the client
// interceptor (a later interceptor, a codec) during the half-open probe
// still reports the probe to the breaker (as excluded), so that a healthy
// target is called again: gobreaker counts an unreported probe in flight
// for ever, and half-open has no timeout.
func TestBreakerRecoversFromPanickedProbe(t *testing.T) {
	c, _ := newClient(t, shedgrpc.ClientConfig{MaxAttempts: 1,
		Breaker: retrybudget.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond}})
	cc, err := grpc.NewClient("passthrough:///hr-breaker", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ic := c.UnaryInterceptor()
	unavailable := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return status.Error(codes.Unavailable, "connection refused")
	}
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	boom := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		panic("codec bug")
	}
	ctx := testCtx(t)
	_ = ic(ctx, mBatch, nil, nil, cc, unavailable) // trips the breaker
	if st, _ := c.BreakerState(cc.Target()); st.String() != "open" {
		t.Fatalf("breaker %v, want open", st)
	}
	waitFor(t, "half-open", func() bool {
		st, _ := c.BreakerState(cc.Target())
		return st.String() == "half-open"
	})
	func() {
		defer func() { _ = recover() }()
		_ = ic(ctx, mBatch, nil, nil, cc, boom) // the probe panics
	}()
	// The target is healthy again: the next call is the probe.
	if err := ic(ctx, mBatch, nil, nil, cc, ok); err != nil {
		st, _ := c.BreakerState(cc.Target())
		t.Fatalf("healthy target refused after the panicked probe: breaker %v, err %v (circuit open: %v)",
			st, err, errors.Is(err, retrybudget.ErrCircuitOpen))
	}
}

// TestPerMessageReceiverGoroutine: the common bidirectional pattern under
// PerMessageStreams (a goroutine receives; the handler's goroutine sends
// and returns when it is done) leaves no permit in flight once every
// stream has ended, and races nothing (run with -race).
func TestPerMessageReceiverGoroutine(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 100})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	cc := serve(t, &service{stream: func(_ string, ss grpc.ServerStream) error {
		return ss.SendMsg(<-receiveAsync(ss, nil)) // one answer, then the handler is done
	}}, s.ServerOptions())
	ctx := testCtx(t)
	for i := range 30 {
		cs, err := cc.NewStream(ctx, chatDesc, mChat)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			_ = cs.SendMsg(wrapperspb.String("hi"))
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(i, err)
		}
		_ = cs.CloseSend()
		for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for lim.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := lim.InFlight(); n != 0 {
		t.Fatalf("all 30 streams ended, but %d permits are still in flight (leaked)", n)
	}
}

// TestAttemptMetadataReplacesForwarded: a service that forwards its
// inbound metadata (a proxy, header propagation) already carries its
// caller's attempt number in its outgoing context; the Client replaces it
// with its own, so that the upstream, which ignores a repeated key, sees
// this Client's attempts 1 and 2.
func TestAttemptMetadataReplacesForwarded(t *testing.T) {
	c, _ := newClient(t, shedgrpc.ClientConfig{})
	lim := newLimiter(t, shed.Config{Limit: 10})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	var mu sync.Mutex
	var seen []int
	var calls atomic.Int64
	svc := &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		seen = append(seen, retrybudget.InboundAttempt(ctx))
		mu.Unlock()
		if calls.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "transient")
		}
		return in, nil
	}}
	cc := serve(t, svc, s.ServerOptions(), grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
	// What a forwarding service's outgoing context looks like when its own
	// caller sent a first attempt.
	inbound := metadata.Pairs(shedgrpc.AttemptMetadata, "1", "x-request-id", "abc")
	ctx := metadata.NewOutgoingContext(testCtx(t), inbound)
	if _, err := call(ctx, cc, mBatch, "hi"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[1 2]" {
		t.Fatalf("upstream saw inbound attempts %v, want [1 2] (the Client's own attempt numbers)", seen)
	}
}

// TestPerMessageShedIsNotSuccess: a handler that ends its stream on any
// receive error with nil (as echoStream does) after its only message was
// shed: the client reads the rejection, not OK.
func TestPerMessageShedIsNotSuccess(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	cc := serve(t, &service{}, s.ServerOptions()) // echoStream
	held, err := lim.TryAcquire(shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(shed.Ignored)
	cs, err := cc.NewStream(testCtx(t), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("job 1")); err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	echoed := 0
	for {
		err = cs.RecvMsg(new(wrapperspb.StringValue))
		if err != nil {
			break
		}
		echoed++
	}
	if echoed == 0 && status.Code(err) == codes.OK || err == io.EOF && echoed == 0 {
		t.Fatalf("the only message was shed, not processed, yet the stream ended with OK (err %v, pushback %q)", err, cs.Trailer().Get(shedgrpc.PushbackKey))
	}
}

// TestPerMessageAfterHandlerReturn: a message received after the handler
// returned (an outer interceptor still works on the stream, and the
// handler's receiving goroutine asks for one more) is not left holding a
// permit.
func TestPerMessageAfterHandlerReturn(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	outer := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		time.Sleep(100 * time.Millisecond) // flush logs, export a span...
		return err
	}
	admitted := make(chan struct{}, 10)
	cc := serve(t, &service{stream: func(_ string, ss grpc.ServerStream) error {
		return ss.SendMsg(<-receiveAsync(ss, admitted))
	}}, []grpc.ServerOption{grpc.ChainStreamInterceptor(outer, s.StreamInterceptor())})
	cs, err := cc.NewStream(testCtx(t), chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("1")); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	_ = cs.SendMsg(wrapperspb.String("2")) // the handler has returned by now
	<-admitted
	select {
	case <-admitted:
	case <-time.After(time.Second):
		t.Skip("the second message was not received before the stream ended")
	}
	for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
	}
	waitFor(t, "every permit back after the stream ended", func() bool { return lim.InFlight() == 0 })
}

// TestDrainingBackendRetriedElsewhere: a rolling restart. The channel
// balances over two backends and one of them drains: its rejections carry
// no pushback, so the Client retries them at once, on the other backend,
// and no call fails.
func TestDrainingBackendRetriedElsewhere(t *testing.T) {
	var addrs []resolver.Address
	var draining *shed.Limiter
	var hits [2]atomic.Int64
	for i := range 2 {
		lim := newLimiter(t, shed.Config{Limit: 10})
		if i == 0 {
			draining = lim
		}
		s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(s.ServerOptions()...)
		srv.RegisterService(&serviceDesc, &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			hits[i].Add(1)
			return in, nil
		}})
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		t.Cleanup(func() { srv.Stop(); <-done })
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	r := manual.NewBuilderWithScheme("hrdrain")
	r.InitialState(resolver.State{Addresses: addrs})
	c, _ := newClient(t, shedgrpc.ClientConfig{})
	cc, err := grpc.NewClient(r.Scheme()+":///svc", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := testCtx(t)
	waitFor(t, "both backends to serve", func() bool { // connect both backends
		_, _ = call(ctx, cc, mBatch, "warm", grpc.WaitForReady(true))
		return hits[0].Load() > 0 && hits[1].Load() > 0
	})
	draining.DrainAt(time.Now())
	failed := 0
	var last error
	for range 10 {
		if _, err := call(ctx, cc, mBatch, "x"); err != nil {
			failed++
			last = err
		}
	}
	if failed > 0 {
		r, n := retryReason(last)
		t.Fatalf("%d of 10 calls failed while a healthy backend was there: %v (reason %v after %d attempts)", failed, last, r, n)
	}
}

// TestHugeRateLimitWaitPushback: a key whose bucket refills in centuries
// (a tiny Rate blocks it) is told to come back then, not in 1 ms: the
// rounding of a saturated wait must not overflow.
func TestHugeRateLimitWaitPushback(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	clock := func() time.Time { return time.Unix(1000, 0) }
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Clock: clock,
		RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e-12, Burst: 1}}})
	cc := serve(t, &service{}, s.ServerOptions())
	ctx := testCtx(t)
	if _, err := call(ctx, cc, mBatch, ""); err != nil { // the one token
		t.Fatal(err)
	}
	var tr metadata.MD
	_, err := call(ctx, cc, mBatch, "", grpc.Trailer(&tr))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v", err)
	}
	pb := tr.Get(shedgrpc.PushbackKey)
	if len(pb) != 1 || pb[0] == "1" {
		t.Fatalf("pushback %q for a bucket that refills in ~30,000 years: the client retries in 1 ms", pb)
	}
}

// TestClassifyDeadlineBoundsHandler: a Classify that shortens the call's
// deadline (a MaxDeadline of its own) bounds the handler's context, as
// shedhttp.Classification.Deadline promises and the HTTP middleware does.
func TestClassifyDeadlineBoundsHandler(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 4})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Classify: func(ctx context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		def.Deadline = time.Now().Add(100 * time.Millisecond)
		return def
	}})
	got := make(chan time.Duration, 1)
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if dl, ok := ctx.Deadline(); ok {
			got <- time.Until(dl)
		} else {
			got <- -1
		}
		return in, nil
	}}, s.ServerOptions())
	if _, err := call(testCtx(t), cc, mBatch, "x"); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d < 0 || d > 100*time.Millisecond {
		t.Fatalf("handler's deadline is %v away; Classify set 100ms", d)
	}
}

// receiveAsync receives ss's messages on a goroutine of its own, as a
// bidirectional handler that sends from its own goroutine does, signals
// each on received (when not nil), and hands them over until the stream
// ends.
func receiveAsync(ss grpc.ServerStream, received chan<- struct{}) <-chan *wrapperspb.StringValue {
	ctx := ss.Context()
	ch := make(chan *wrapperspb.StringValue)
	go func() {
		for {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return
			}
			if received != nil {
				received <- struct{}{}
			}
			select {
			case ch <- in:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
