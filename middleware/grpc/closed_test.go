package grpc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/shed"
)

// closedSource is a closed shed.Prober: Limit is 0, and Probe grants one
// call per every on the clock it is given, the first every after start.
type closedSource struct {
	every time.Duration
	mu    sync.Mutex
	next  time.Time
}

func (s *closedSource) Limit() int          { return 0 }
func (s *closedSource) Observe(shed.Sample) {}

func (s *closedSource) Probe(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(s.every)
	return true
}

// TestClosedLimitUnary: behind a closed limit a call is answered
// Unavailable with the sanitized message and the limiter's hint as its
// pushback, and counted as a limit rejection; the probe is served, once,
// and its permit released once.
func TestClosedLimitUnary(t *testing.T) {
	clk := mwtest.NewFakeClock()
	src := &closedSource{every: 5 * time.Second, next: clk.Now().Add(5 * time.Second)}
	lim := newLimiter(t, shed.Config{Source: src, Clock: clk.Now})
	var ran atomic.Int64
	svc := &service{unary: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		ran.Add(1)
		return in, nil
	}}
	cc := serve(t, svc, newServer(t, shedgrpc.ServerConfig{Limiter: lim}).ServerOptions())
	for i, st := range []struct {
		advance time.Duration
		code    codes.Code
	}{
		{0, codes.Unavailable},
		{5 * time.Second, codes.OK}, // the probe
		{0, codes.Unavailable},
		{time.Second, codes.Unavailable},
	} {
		clk.Advance(st.advance)
		var tr metadata.MD
		_, err := call(testCtx(t), cc, mBatch, "x", grpc.Trailer(&tr))
		if status.Code(err) != st.code {
			t.Fatalf("call %d: %v, want %v", i, err, st.code)
		}
		if st.code == codes.OK {
			continue
		}
		if msg := status.Convert(err).Message(); msg != shedgrpc.MsgOverloaded {
			t.Errorf("call %d: message %q, want %q", i, msg, shedgrpc.MsgOverloaded)
		}
		if pb := pushbackOf(tr); pb != "1000" {
			t.Errorf("call %d: pushback %s, want 1000 (the limiter's hint, RetryAfterMin)", i, pb)
		}
	}
	waitFor(t, "the probe's release", func() bool { return lim.InFlight() == 0 })
	c := lim.Snapshot().Classes[0]
	if ran.Load() != 1 || c.Admitted != 1 || c.Released != [3]uint64{1, 0, 0} || c.Rejected[shed.ReasonLimit] != 3 || lim.Limit() != 0 {
		t.Fatalf("handler ran %d, admitted %d, released %v, %d limit rejections, limit %d; want 1, 1, [1 0 0], 3, 0",
			ran.Load(), c.Admitted, c.Released, c.Rejected[shed.ReasonLimit], lim.Limit())
	}
}

// TestQueuedCallDeadlinePasses: a call queued behind a closed limit (it
// can only wait out its deadline, here one the server sets) ends with
// DeadlineExceeded and no pushback, as the package documents
// ("DeadlineExceeded when the call's deadline passes while it waits"), and
// the limiter counts a queue timeout, not a cancellation. Both depended
// on whether the limiter's timer or the context's fired first: the
// limiter's, usually, answered Unavailable with a pushback; the context's
// counted a cancellation.
func TestQueuedCallDeadlinePasses(t *testing.T) {
	lim := newLimiter(t, shed.Config{Source: &closedSource{every: time.Hour, next: time.Now().Add(time.Hour)},
		Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 8, MaxWait: time.Minute}}})
	// The server's own deadline for every call, shorter than the client's.
	timeout := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		return h(ctx, req)
	}
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim})
	cc := serve(t, &service{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(timeout, s.UnaryInterceptor())})
	const n = 5
	for i := range n {
		var tr metadata.MD
		_, err := call(testCtx(t), cc, mBatch, "x", grpc.Trailer(&tr))
		if status.Code(err) != codes.DeadlineExceeded || status.Convert(err).Message() != shedgrpc.MsgDeadline || len(tr.Get(shedgrpc.PushbackKey)) != 0 {
			t.Errorf("call %d: %v, pushback %s; want DeadlineExceeded (%q) without one", i, err, pushbackOf(tr), shedgrpc.MsgDeadline)
		}
	}
	if c := lim.Snapshot().Classes[0]; c.Rejected[shed.ReasonQueueTimeout] != n || c.Cancelled != 0 {
		t.Errorf("the limiter counted %d queue timeouts and %d cancellations, want %d and 0",
			c.Rejected[shed.ReasonQueueTimeout], c.Cancelled, n)
	}
}
