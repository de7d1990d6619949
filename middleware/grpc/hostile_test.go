package grpc_test

// Paths a second hostile review found: a hostile client over loopback and
// a careless integrator.

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// TestClassifyDeadlineBoundsRetriedHandler: a Classify that shortens the
// call's deadline bounds the handler's context also when the call is a
// retry (it carries shedkit-attempt, as every call of this package's
// Client does): the attempt number must not replace the shortened context.
func TestClassifyDeadlineBoundsRetriedHandler(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 4})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Classify: func(ctx context.Context, _ shedgrpc.Call, def shedhttp.Classification) shedhttp.Classification {
		def.Deadline = time.Now().Add(100 * time.Millisecond)
		return def
	}})
	type seen struct {
		left    time.Duration
		attempt int
	}
	got := make(chan seen, 1)
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		left := time.Duration(-1)
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		got <- seen{left, retrybudget.InboundAttempt(ctx)}
		return in, nil
	}}, s.ServerOptions())
	ctx := metadata.AppendToOutgoingContext(testCtx(t), shedgrpc.AttemptMetadata, "2")
	if _, err := call(ctx, cc, mBatch, "x"); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.attempt != 2 {
		t.Errorf("handler sees inbound attempt %d, want 2", g.attempt)
	}
	if g.left < 0 || g.left > 100*time.Millisecond {
		t.Fatalf("handler's deadline is %v away; Classify set 100ms", g.left)
	}
}

// TestInterceptorsMountedTwice: the interceptors chained twice on one
// server for one limiter (ServerOptions of two Servers, or of one Server
// given twice, a careless integrator's mistake) must not take two permits
// for one call: at a limit of 1 the inner would wait for the permit the
// call itself holds, and an idle server would refuse every call.
func TestInterceptorsMountedTwice(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 1, MaxWait: 200 * time.Millisecond}}})
	a := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	b := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	opts := append(a.ServerOptions(), b.ServerOptions()...)
	opts = append(opts, a.ServerOptions()...)
	cc := serve(t, &service{}, opts)
	ctx := testCtx(t)
	if _, err := call(ctx, cc, mBatch, "x"); err != nil {
		t.Errorf("unary call on an idle server: %v", err)
	}
	waitFor(t, "the release", func() bool { return lim.InFlight() == 0 })
	cs, err := cc.NewStream(ctx, chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("1")); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Errorf("stream on an idle server: %v", err)
	}
	_ = cs.CloseSend()
	for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
	}
	waitFor(t, "the release", func() bool { return lim.InFlight() == 0 })
	var admitted uint64
	for _, c := range lim.Snapshot().Classes {
		admitted += c.Admitted
	}
	if admitted != 2 {
		t.Errorf("%d permits admitted for one call and one stream of one message, want 2", admitted)
	}
}

// TestStopDuringCalls: Stop and GracefulStop while one call runs and two
// wait in the admission queue. Stop ends them all (the queued ones with a
// status, never OK); GracefulStop lets them all finish. Either way every
// permit is released once, nothing stays queued, and the Recorder counts
// each call once.
func TestStopDuringCalls(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(map[bool]string{false: "Stop", true: "GracefulStop"}[graceful], func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			lim := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 4, MaxWait: 10 * time.Second}}})
			s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Recorder: rec})
			release := make(chan struct{})
			svc := &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				select {
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				case <-release:
					return in, nil
				}
			}}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(s.ServerOptions()...)
			srv.RegisterService(&serviceDesc, svc)
			served := make(chan struct{})
			go func() { defer close(served); _ = srv.Serve(lis) }()
			defer func() { srv.Stop(); <-served }()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			const n = 3
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() { defer wg.Done(); _, err := call(testCtx(t), cc, mBatch, "x"); errs <- err }()
			}
			waitFor(t, "one call running and two queued", func() bool {
				c := lim.Snapshot().Classes[0]
				return c.InFlight == 1 && c.Queued == n-1
			})
			if graceful {
				stopped := make(chan struct{})
				go func() { defer close(stopped); srv.GracefulStop() }()
				close(release)
				<-stopped
			} else {
				srv.Stop()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if graceful && err != nil {
					t.Errorf("GracefulStop: a call failed: %v", err)
				}
				if !graceful && status.Code(err) == codes.OK {
					t.Errorf("Stop: a call that never finished read OK")
				}
			}
			waitFor(t, "every permit back", func() bool { return lim.InFlight() == 0 })
			c := lim.Snapshot().Classes[0]
			released := c.Released[shed.Success] + c.Released[shed.Dropped] + c.Released[shed.Ignored]
			if c.Queued != 0 || released != c.Admitted || c.Leaked != 0 {
				t.Errorf("queued %d, admitted %d, released %d, leaked %d", c.Queued, c.Admitted, released, c.Leaked)
			}
			waitFor(t, "the records", func() bool { return rec.Pending() >= n })
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, reqs, _ := rectest.ReadRecording(t, buf.Bytes()); len(reqs) != n {
				t.Errorf("%d records for %d calls:\n%s", len(reqs), n, buf.Bytes())
			}
		})
	}
}

// TestHostileMetadata: a client that sends huge or repeated values for
// the trusted class and key metadata and the attempt number (gRPC's own
// client refuses non-printable ones) gets neither a class nor a key from them (repeated
// values are refused, unknown classes ignored), is rate limited by its
// address, and no status message it reads echoes what it sent.
func TestHostileMetadata(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, ClassMetadata: "x-class", KeyMetadata: "x-tenant",
		RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 1}}})
	classes := make(chan string, 8)
	cc := serve(t, &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		classes <- lim.ClassName(shedgrpc.Permit(ctx).Class())
		return in, nil
	}}, s.ServerOptions())
	huge := strings.Repeat("x", 8<<10)
	for i, md := range []metadata.MD{
		metadata.Pairs("x-class", "interactive", "x-class", "interactive", "x-tenant", "a", "x-tenant", "b"),
		metadata.Pairs("x-class", huge, "x-tenant", "b", "x-tenant", "c", shedgrpc.AttemptMetadata, huge),
	} {
		ctx := metadata.NewOutgoingContext(testCtx(t), md)
		_, err := call(ctx, cc, mBatch, "x")
		if i == 0 {
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			if c := <-classes; c != "batch" {
				t.Errorf("repeated class metadata gave class %q, want batch", c)
			}
			continue
		}
		// Repeated x-tenant, twice: keyed by the address, whose one
		// token the first call took.
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("second call from the same address: %v, want ResourceExhausted", err)
		}
		if msg := status.Convert(err).Message(); msg != shedgrpc.MsgRateLimited {
			t.Errorf("status message %q, want %q", msg, shedgrpc.MsgRateLimited)
		}
	}
	waitFor(t, "every permit back", func() bool { return lim.InFlight() == 0 })
}

// TestUnknownServiceHandler: calls a proxy serves through
// grpc.UnknownServiceHandler reach the stream interceptor under the
// method name the client chose: Methods classifies them by prefix, a
// name nothing matches gets DefaultClass, SkipMethods cannot be had by a
// near miss, and each call releases its one permit.
func TestUnknownServiceHandler(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Methods: map[string]string{"/proxied.Cart/": "interactive"}, SkipMethods: []string{"/grpc.health.v1.Health/Check"}})
	classes := make(chan string, 4)
	proxy := func(_ any, ss grpc.ServerStream) error {
		class := "none"
		if p := shedgrpc.Permit(ss.Context()); p != nil {
			class = lim.ClassName(p.Class())
		}
		classes <- class
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		return ss.SendMsg(in)
	}
	cc := serve(t, &service{}, append(s.ServerOptions(), grpc.UnknownServiceHandler(proxy)))
	for _, tc := range []struct{ method, class string }{
		{"/proxied.Cart/Add", "interactive"},
		{"/x.Y/" + strings.Repeat("z", 4<<10), "batch"},
		{"/grpc.health.v1.Health/Check/", "batch"},
		{"/grpc.health.v1.Health/Check", "none"},
	} {
		if _, err := call(testCtx(t), cc, tc.method, "hi"); err != nil {
			t.Fatalf("%.40s: %v", tc.method, err)
		}
		if c := <-classes; c != tc.class {
			t.Errorf("%.40s: class %q, want %q", tc.method, c, tc.class)
		}
	}
	waitFor(t, "every permit back", func() bool { return lim.InFlight() == 0 })
	var admitted, released uint64
	for _, c := range lim.Snapshot().Classes {
		admitted += c.Admitted
		released += c.Released[shed.Success] + c.Released[shed.Dropped] + c.Released[shed.Ignored]
	}
	if admitted != 3 || released != 3 {
		t.Errorf("admitted %d, released %d, want 3 and 3", admitted, released)
	}
}

// TestPerMessageCancelledIsNotSuccess: a stream admitted per message whose
// client cancels while the handler works on a message. The handler stops
// that work and asks for the next message (which fails); the message's
// permit is released as Ignored, as any call whose client went away, not
// as a Success whose short latency would pull the limit up.
func TestPerMessageCancelledIsNotSuccess(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 4})
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, PerMessageStreams: []string{mChat}})
	working := make(chan struct{})
	cc := serve(t, &service{stream: func(_ string, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		close(working)
		<-ss.Context().Done() // the work gives up when its client goes
		_ = ss.RecvMsg(new(wrapperspb.StringValue))
		return nil
	}}, s.ServerOptions())
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	cs, err := cc.NewStream(ctx, chatDesc, mChat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("job")); err != nil {
		t.Fatal(err)
	}
	<-working
	cancel()
	waitFor(t, "the message's permit", func() bool {
		c := lim.Snapshot().Classes[0]
		return lim.InFlight() == 0 && c.Admitted == 1 && c.Released[shed.Success]+c.Released[shed.Ignored]+c.Released[shed.Dropped] == 1
	})
	if got := lim.Snapshot().Classes[0].Released; got[shed.Ignored] != 1 {
		t.Errorf("released %v, want one Ignored: the client went away", got)
	}
}

// TestStreamReturnsBeforeReading: a stream handler that answers with an
// error before it reads anything, while its client keeps sending, per
// stream and per message: the client reads the handler's status, and
// every permit is back.
func TestStreamReturnsBeforeReading(t *testing.T) {
	for _, perMsg := range []bool{false, true} {
		lim := newLimiter(t, shed.Config{Limit: 1})
		cfg := shedgrpc.ServerConfig{Limiter: lim}
		if perMsg {
			cfg.PerMessageStreams = []string{mChat}
		}
		s := newServer(t, cfg)
		cc := serve(t, &service{stream: func(string, grpc.ServerStream) error {
			return status.Error(codes.FailedPrecondition, "not now")
		}}, s.ServerOptions())
		for range 3 {
			cs, err := cc.NewStream(testCtx(t), chatDesc, mChat)
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				if cs.SendMsg(wrapperspb.String(strings.Repeat("m", 1<<10))) != nil {
					break // the server ended the stream
				}
			}
			err = cs.RecvMsg(new(wrapperspb.StringValue))
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("per message %v: stream ended with %v, want the handler's FailedPrecondition", perMsg, err)
			}
		}
		waitFor(t, "every permit back", func() bool { return lim.InFlight() == 0 })
	}
}
