package grpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// sleeps records the backoff waits a Client asks for, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newClient returns a Client with its own budget (so that tests do not
// share the process's) and a recorded sleep.
func newClient(t testing.TB, cfg shedgrpc.ClientConfig) (*shedgrpc.Client, *sleeps) {
	t.Helper()
	sl := &sleeps{}
	if cfg.Sleep == nil {
		cfg.Sleep = sl.sleep
	}
	if cfg.Budget == nil && !cfg.NoBudget {
		b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Budget = b
	}
	c, err := shedgrpc.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, sl
}

func TestClientConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   shedgrpc.ClientConfig
		field string
	}{
		{shedgrpc.ClientConfig{MaxAttempts: 101}, "MaxAttempts"},
		{shedgrpc.ClientConfig{MaxAttempts: -1}, "MaxAttempts"},
		{shedgrpc.ClientConfig{BaseBackoff: -1}, "BaseBackoff"},
		{shedgrpc.ClientConfig{BaseBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
		{shedgrpc.ClientConfig{MaxPushback: 25 * time.Hour}, "MaxPushback"},
		{shedgrpc.ClientConfig{MinAttemptTime: -1}, "MinAttemptTime"},
		{shedgrpc.ClientConfig{Inbound: 9}, "Inbound"},
		{shedgrpc.ClientConfig{NoBudget: true, Budget: retrybudget.Default()}, "NoBudget"},
		{shedgrpc.ClientConfig{Breaker: retrybudget.BreakerConfig{OpenTimeout: -1}}, "Breaker.OpenTimeout"},
		{shedgrpc.ClientConfig{Breaker: retrybudget.BreakerConfig{MaxHosts: -1}}, "Breaker.MaxHosts"},
		{shedgrpc.ClientConfig{KnownMethods: []string{"/pkg.S/A", "pkg.S/B"}}, "KnownMethods[1]"},
		{shedgrpc.ClientConfig{KnownMethods: []string{""}}, "KnownMethods[0]"},
	} {
		_, err := shedgrpc.NewClient(tc.cfg)
		if !errors.Is(err, shedgrpc.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%+v: got %v, want an ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// failing answers the first n attempts with err (and trailer tr), then
// echoes; it records the attempt number each call carried.
type failing struct {
	n        int64
	code     codes.Code
	pushback string
	calls    atomic.Int64
	mu       sync.Mutex
	seen     []string
}

func (f *failing) service() *service {
	return &service{unary: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		f.mu.Lock()
		f.seen = append(f.seen, strings.Join(metadata.ValueFromIncomingContext(ctx, shedgrpc.AttemptMetadata), ","))
		f.mu.Unlock()
		if f.calls.Add(1) > f.n {
			return in, nil
		}
		if f.pushback != "" {
			grpc.SetTrailer(ctx, metadata.Pairs(shedgrpc.PushbackKey, f.pushback))
		}
		return nil, status.Error(f.code, "failing")
	}}
}

func clientConn(t testing.TB, svc *service, c *shedgrpc.Client, sopts ...grpc.ServerOption) *grpc.ClientConn {
	return serve(t, svc, sopts, grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
}

func retryReason(err error) (retrybudget.Reason, int) {
	var re *retrybudget.RetryError
	if errors.As(err, &re) {
		return re.Reason, re.Attempts
	}
	return retrybudget.ReasonNone, -1
}

func TestClientRetriesUnavailable(t *testing.T) {
	c, sl := newClient(t, shedgrpc.ClientConfig{})
	f := &failing{n: 2, code: codes.Unavailable}
	cc := clientConn(t, f.service(), c)
	got, err := call(testCtx(t), cc, mBatch, "hi")
	if err != nil || got != "hi" {
		t.Fatalf("got %q, %v", got, err)
	}
	if strings.Join(f.seen, " ") != "1 2 3" {
		t.Fatalf("attempt metadata %q, want 1 2 3", f.seen)
	}
	if w := sl.waits(); len(w) != 2 || w[0] >= 50*time.Millisecond || w[1] >= 100*time.Millisecond {
		t.Fatalf("backoff waits %v: want two full-jitter waits under 50ms and 100ms", w)
	}
}

func TestClientDoesNotRetryOtherCodes(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		pushback string
	}{{codes.Internal, ""}, {codes.InvalidArgument, ""}, {codes.ResourceExhausted, ""}, {codes.DeadlineExceeded, ""}} {
		c, _ := newClient(t, shedgrpc.ClientConfig{})
		f := &failing{n: 1, code: tc.code}
		cc := clientConn(t, f.service(), c)
		_, err := call(testCtx(t), cc, mBatch, "hi")
		if status.Code(err) != tc.code || f.calls.Load() != 1 {
			t.Errorf("%v: %v after %d attempts, want the status untouched after 1", tc.code, err, f.calls.Load())
		}
	}
}

// TestPushbackStopsRetries: a negative pushback stops the client's
// retries, a positive one makes the next attempt wait at least that long,
// and one above MaxPushback is not waited for.
func TestPushbackStopsRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     codes.Code
		pushback string
		attempts int64
		reason   retrybudget.Reason
		minWait  time.Duration
	}{
		{"negative", codes.Unavailable, "-1", 1, retrybudget.ReasonNoRetryHeader, 0},
		{"malformed", codes.Unavailable, "soon", 1, retrybudget.ReasonNoRetryHeader, 0},
		{"too long", codes.Unavailable, "60000", 1, retrybudget.ReasonRetryAfter, 0},
		{"wait", codes.Unavailable, "700", 2, retrybudget.ReasonNone, 700 * time.Millisecond},
		{"quota with pushback", codes.ResourceExhausted, "1500", 2, retrybudget.ReasonNone, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, sl := newClient(t, shedgrpc.ClientConfig{})
			f := &failing{n: 1, code: tc.code, pushback: tc.pushback}
			cc := clientConn(t, f.service(), c)
			_, err := call(testCtx(t), cc, mBatch, "hi")
			reason, _ := retryReason(err)
			if f.calls.Load() != tc.attempts || reason != tc.reason {
				t.Fatalf("%d attempts, reason %v (%v); want %d, %v", f.calls.Load(), reason, err, tc.attempts, tc.reason)
			}
			if tc.reason != retrybudget.ReasonNone && status.Code(err) != tc.code {
				t.Fatalf("code %v, want the last attempt's %v", status.Code(err), tc.code)
			}
			if w := sl.waits(); tc.minWait > 0 && (len(w) != 1 || w[0] < tc.minWait) {
				t.Fatalf("waits %v, want one of at least %v", w, tc.minWait)
			}
		})
	}
}

// TestPushbackFromShedServer: end to end with the server interceptor. A
// shedding server's hint makes the client wait; with NoRetryPushback it
// stops the client at one attempt.
func TestPushbackFromShedServer(t *testing.T) {
	for _, noRetry := range []bool{false, true} {
		lim := newLimiter(t, shed.Config{Limit: 1, RetryAfterMin: 400 * time.Millisecond})
		held, _ := lim.TryAcquire(shed.Request{})
		s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, NoRetryPushback: noRetry})
		var sl sleeps
		c, _ := newClient(t, shedgrpc.ClientConfig{Sleep: func(ctx context.Context, d time.Duration) error {
			held.Release(shed.Ignored) // capacity frees during the wait
			return sl.sleep(ctx, d)
		}})
		cc := clientConn(t, &service{}, c, s.ServerOptions()...)
		_, err := call(testCtx(t), cc, mBatch, "hi")
		w := sl.waits()
		switch {
		case noRetry && (status.Code(err) != codes.Unavailable || len(w) != 0):
			t.Fatalf("no-retry pushback: %v after waits %v, want Unavailable without a retry", err, w)
		case !noRetry && (err != nil || len(w) != 1 || w[0] < 400*time.Millisecond):
			t.Fatalf("pushback 400ms: %v after waits %v, want success after one wait >= 400ms", err, w)
		}
		held.Release(shed.Ignored)
	}
}

func TestClientRespectsDeadline(t *testing.T) {
	c, sl := newClient(t, shedgrpc.ClientConfig{})
	f := &failing{n: 1, code: codes.Unavailable, pushback: "500"}
	cc := clientConn(t, f.service(), c)
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err := call(ctx, cc, mBatch, "hi")
	if reason, n := retryReason(err); reason != retrybudget.ReasonDeadline || n != 1 || len(sl.waits()) != 0 {
		t.Fatalf("%v (reason %v after %d attempts), want no retry past the deadline", err, reason, n)
	}
	// MinAttemptTime: nothing is sent with less time than that left.
	c2, _ := newClient(t, shedgrpc.ClientConfig{MinAttemptTime: time.Second})
	cc2 := clientConn(t, f.service(), c2)
	before := f.calls.Load()
	_, err = call(ctx, cc2, mBatch, "hi")
	if reason, n := retryReason(err); reason != retrybudget.ReasonDeadline || n != 0 || status.Code(err) != codes.DeadlineExceeded || f.calls.Load() != before {
		t.Fatalf("%v: want DeadlineExceeded with nothing sent", err)
	}
}

func TestClientBudget(t *testing.T) {
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: -1}) // no retries at all
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, shedgrpc.ClientConfig{Budget: b})
	f := &failing{n: 1, code: codes.Unavailable}
	cc := clientConn(t, f.service(), c)
	_, err = call(testCtx(t), cc, mBatch, "hi")
	if !errors.Is(err, retrybudget.ErrBudgetExhausted) || status.Code(err) != codes.Unavailable || f.calls.Load() != 1 {
		t.Fatalf("%v after %d attempts: want the budget to deny the retry", err, f.calls.Load())
	}
	if b.Snapshot().Denials != 1 {
		t.Fatalf("budget denials %d", b.Snapshot().Denials)
	}
}

// TestBreakerTripsOnUnreachableTarget: a target that cannot be reached
// trips its breaker, which then fails calls fast without sending them.
func TestBreakerTripsOnUnreachableTarget(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // connection refused from now on
	c, _ := newClient(t, shedgrpc.ClientConfig{MaxAttempts: 1})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for i := range retrybudget.DefaultBreakerFailures {
		if _, err := call(testCtx(t), cc, mBatch, ""); status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if st, ok := c.BreakerState(cc.Target()); !ok || st != gobreaker.StateOpen {
		t.Fatalf("breaker %v, %v; want open", st, ok)
	}
	_, err = call(testCtx(t), cc, mBatch, "")
	if reason, n := retryReason(err); reason != retrybudget.ReasonBreaker || n != 0 || !errors.Is(err, retrybudget.ErrCircuitOpen) || status.Code(err) != codes.Unavailable {
		t.Fatalf("%v: want a fast Unavailable from the open breaker", err)
	}
}

// TestBreakerIgnoresApplicationErrors: errors the application returns,
// and shedding with a pushback, say the target is up.
func TestBreakerIgnoresApplicationErrors(t *testing.T) {
	for _, f := range []*failing{
		{n: 100, code: codes.Internal},
		{n: 100, code: codes.Unknown},
		{n: 100, code: codes.Unavailable, pushback: "-1"},
		{n: 100, code: codes.DeadlineExceeded},
	} {
		c, _ := newClient(t, shedgrpc.ClientConfig{MaxAttempts: 1})
		cc := clientConn(t, f.service(), c)
		for range 2 * retrybudget.DefaultBreakerFailures {
			_, _ = call(testCtx(t), cc, mBatch, "")
		}
		if st, _ := c.BreakerState(cc.Target()); st != gobreaker.StateClosed {
			t.Errorf("%v (pushback %q): breaker %v, want closed", f.code, f.pushback, st)
		}
	}
}

func TestClientRetryableMethods(t *testing.T) {
	c, _ := newClient(t, shedgrpc.ClientConfig{Retryable: func(m string) bool { return m == mInteract }})
	f := &failing{n: 1, code: codes.Unavailable}
	cc := clientConn(t, f.service(), c)
	if _, err := call(testCtx(t), cc, mBatch, ""); status.Code(err) != codes.Unavailable || f.calls.Load() != 1 {
		t.Fatalf("not retryable: %v after %d attempts", err, f.calls.Load())
	}
	f.calls.Store(0)
	if _, err := call(testCtx(t), cc, mInteract, ""); err != nil || f.calls.Load() != 2 {
		t.Fatalf("retryable: %v after %d attempts", err, f.calls.Load())
	}
}

// TestInboundPolicy: a Client used inside a handler whose call is itself a
// retry makes a single attempt under InboundNoRetryOnRetry.
func TestInboundPolicy(t *testing.T) {
	inner, _ := newClient(t, shedgrpc.ClientConfig{Inbound: retrybudget.InboundNoRetryOnRetry})
	f := &failing{n: 100, code: codes.Unavailable}
	down := clientConn(t, f.service(), inner)
	ctx := retrybudget.WithInboundAttempt(testCtx(t), 2)
	_, err := call(ctx, down, mBatch, "")
	if reason, _ := retryReason(err); reason != retrybudget.ReasonInbound || f.calls.Load() != 1 {
		t.Fatalf("%v after %d attempts, want one attempt (inbound retry)", err, f.calls.Load())
	}
}

func TestRateLimitedRetriedAfterPushback(t *testing.T) {
	lim := newLimiter(t, shed.Config{Limit: 10})
	var now atomic.Int64 // the server's clock, in ns; moved by the client's waits
	now.Store(time.Unix(1000, 0).UnixNano())
	s := newServer(t, shedgrpc.ServerConfig{Limiter: lim, Clock: func() time.Time { return time.Unix(0, now.Load()) },
		RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 2, Burst: 1}}})
	var sl sleeps
	c, _ := newClient(t, shedgrpc.ClientConfig{Sleep: func(ctx context.Context, d time.Duration) error {
		now.Add(int64(d))
		return sl.sleep(ctx, d)
	}})
	cc := clientConn(t, &service{}, c, s.ServerOptions()...)
	for i := range 2 {
		if _, err := call(testCtx(t), cc, mBatch, ""); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if w := sl.waits(); len(w) != 1 || w[0] < 500*time.Millisecond {
		t.Fatalf("waits %v, want one of at least the 500ms pushback", w)
	}
}
