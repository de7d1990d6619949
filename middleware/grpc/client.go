package grpc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shedkit/shedkit/retrybudget"
)

// Client defaults: those of retrybudget.Transport.
const (
	DefaultMaxAttempts = retrybudget.DefaultMaxAttempts
	DefaultBaseBackoff = retrybudget.DefaultBaseBackoff
	DefaultMaxBackoff  = retrybudget.DefaultMaxBackoff
	DefaultMaxPushback = retrybudget.DefaultMaxRetryAfter

	maxAttemptsLimit = 100
)

// ClientConfig configures the client interceptor. Zero fields mean the
// defaults.
type ClientConfig struct {
	// Name identifies the client in metrics (attribute
	// shedkit.retry.client). Keep it low-cardinality. Default "default".
	Name string
	// MaxAttempts bounds the attempts per logical call, the first
	// included. Default 3; at most 100; 1 disables retries.
	MaxAttempts int
	// Budget is asked before each retry. Default retrybudget.Default(),
	// the budget shared by the whole process, HTTP clients included.
	Budget *retrybudget.Budget
	// NoBudget retries without any budget: amplification is then bounded
	// by MaxAttempts alone. For comparisons and tests.
	NoBudget bool
	// Throttle, when set, applies SRE adaptive throttling to every
	// attempt: attempts it rejects are not sent.
	Throttle *retrybudget.Throttle
	// Breaker configures the circuit breaker of each target
	// (ClientConn.Target), on by default, with retrybudget's rules;
	// MaxHosts bounds the number of targets.
	Breaker retrybudget.BreakerConfig
	// BaseBackoff and MaxBackoff shape the exponential backoff with full
	// jitter: retry n waits a uniform random time in
	// [0, min(MaxBackoff, BaseBackoff x 2^(n-1))). Defaults 50ms and 1s.
	BaseBackoff, MaxBackoff time.Duration
	// MaxPushback is the longest server pushback the client honours: a
	// retry waits at least what the server asked, and is not made when
	// the server asks for more than this. Default 10s; at most 24h.
	MaxPushback time.Duration
	// MinAttemptTime is the least time an attempt is expected to take: no
	// attempt starts with less than this left before the call's deadline.
	// A retry also expects to take as long as the previous attempt did.
	MinAttemptTime time.Duration
	// Retryable reports whether a method may be sent again after an
	// attempt failed with Unavailable, which gRPC documents as transient
	// but which does not prove that the server did not run the call.
	// Default: every method (a shedding server rejects before running
	// anything; a connection that fails mid-call is the risk).
	Retryable func(fullMethod string) bool
	// KnownMethods are full method names ("/pkg.Service/Method") whose
	// calls keep their name in telemetry even when the caller does not
	// pass grpc.StaticMethod() (generated stubs do). The logical and
	// attempt spans of any other call are named after rpc.system.name
	// ("retry grpc", "grpc") with rpc.method "_OTHER" and the name sent in
	// rpc.method_original, as the OpenTelemetry RPC conventions ask: a
	// proxy (grpc.UnknownServiceHandler) forwards whatever names its own
	// clients send, and naming spans after them would let any client
	// multiply span names. rpc.method_original holds at most the name's
	// first 256 bytes, cut between characters, with each byte that is not
	// UTF-8 replaced by U+FFFD. List here the methods a hand-written
	// caller sends with cc.Invoke.
	KnownMethods []string
	// Inbound says whether to retry under an inbound call or request that
	// is itself retried (see retrybudget.InboundPolicy). Default
	// retrybudget.InboundIgnore.
	Inbound retrybudget.InboundPolicy
	// DisableAttemptSpans stops the client from starting a CLIENT span per
	// attempt, and from injecting the trace context: set it when the
	// ClientConn has otelgrpc's client stats handler, which starts one
	// per attempt already (as children of the logical span).
	DisableAttemptSpans bool

	// Sleep waits d or until ctx is done, returning ctx.Err() then.
	// Default: a timer. Tests inject a fake.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns uniform values in [0, 1) for the jitter and the
	// throttle. Default math/rand/v2's Float64.
	Rand func() float64

	// TracerProvider and MeterProvider default to the global providers.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Propagator injects the trace context of each attempt into its
	// metadata. Default otel.GetTextMapPropagator().
	Propagator propagation.TextMapPropagator
}

// Client holds the client interceptor's configuration and state: the
// breakers of its targets. It is safe for concurrent use; share one per
// process or per kind of upstream. Make one with NewClient: the zero
// Client is not usable.
type Client struct {
	maxAttempts  int
	budget       *retrybudget.Budget
	throttle     *retrybudget.Throttle
	targets      *targets
	baseBackoff  time.Duration
	maxBackoff   time.Duration
	maxPushback  time.Duration
	minAttempt   time.Duration
	retryable    func(string) bool
	known        map[string]struct{} // KnownMethods
	inbound      retrybudget.InboundPolicy
	attemptSpans bool
	sleep        func(context.Context, time.Duration) error
	rand         func() float64
	tracer       trace.Tracer
	propagator   propagation.TextMapPropagator
	inst         *instruments
}

// NewClient returns a Client configured by cfg, or an error naming the
// first invalid field (wrapping ErrInvalidConfig).
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	meter := cfg.MeterProvider.Meter(instrumentationName)
	inst, err := newInstruments(meter, cfg.Name)
	if err != nil {
		return nil, err
	}
	if cfg.Budget != nil {
		if err := observeBalance(meter, cfg.Budget); err != nil {
			return nil, err
		}
	}
	tg, err := newTargets(cfg.Breaker, inst.breakerChanged)
	if err != nil {
		return nil, err
	}
	c := &Client{
		maxAttempts: cfg.MaxAttempts, budget: cfg.Budget, throttle: cfg.Throttle, targets: tg,
		baseBackoff: cfg.BaseBackoff, maxBackoff: cfg.MaxBackoff, maxPushback: cfg.MaxPushback,
		minAttempt: cfg.MinAttemptTime, retryable: cfg.Retryable, inbound: cfg.Inbound,
		attemptSpans: !cfg.DisableAttemptSpans, sleep: cfg.Sleep, rand: cfg.Rand,
		tracer: cfg.TracerProvider.Tracer(instrumentationName), propagator: cfg.Propagator, inst: inst,
	}
	for _, m := range cfg.KnownMethods {
		if c.known == nil {
			c.known = make(map[string]struct{}, len(cfg.KnownMethods))
		}
		c.known[m] = struct{}{}
	}
	return c, nil
}

func (cfg *ClientConfig) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"BaseBackoff", cfg.BaseBackoff}, {"MaxBackoff", cfg.MaxBackoff},
		{"MaxPushback", cfg.MaxPushback}, {"MinAttemptTime", cfg.MinAttemptTime},
	} {
		if d.v < 0 {
			return configError(d.name, "must not be negative, got %v", d.v)
		}
	}
	for i, m := range cfg.KnownMethods {
		// Calls always name their method "/pkg.Service/Method": anything
		// else would never match, and the method would be "_OTHER".
		if !strings.HasPrefix(m, "/") {
			return configError(fmt.Sprintf("KnownMethods[%d]", i), "a full method name starts with \"/\", got %q", m)
		}
	}
	switch {
	case cfg.MaxAttempts < 0 || cfg.MaxAttempts > maxAttemptsLimit:
		return configError("MaxAttempts", "must be in [0, %d], got %d", maxAttemptsLimit, cfg.MaxAttempts)
	case cfg.MaxBackoff != 0 && cfg.MaxBackoff < max(cfg.BaseBackoff, 0):
		return configError("MaxBackoff", "must not be below BaseBackoff (%v), got %v", cfg.BaseBackoff, cfg.MaxBackoff)
	case cfg.MaxPushback > retrybudget.MaxParsedRetryAfter:
		return configError("MaxPushback", "must be at most %v, got %v", retrybudget.MaxParsedRetryAfter, cfg.MaxPushback)
	case cfg.Inbound > retrybudget.InboundNoRetry:
		return configError("Inbound", "must be one of the retrybudget.InboundPolicy constants, got %d", cfg.Inbound)
	case cfg.NoBudget && cfg.Budget != nil:
		return configError("NoBudget", "contradicts Budget")
	}
	return nil
}

func (cfg *ClientConfig) defaults() {
	cfg.Name = orDefault(cfg.Name, "default")
	cfg.MaxAttempts = orDefault(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.BaseBackoff = orDefault(cfg.BaseBackoff, DefaultBaseBackoff)
	cfg.MaxBackoff = orDefault(cfg.MaxBackoff, max(DefaultMaxBackoff, cfg.BaseBackoff))
	cfg.MaxPushback = orDefault(cfg.MaxPushback, DefaultMaxPushback)
	if !cfg.NoBudget && cfg.Budget == nil {
		cfg.Budget = retrybudget.Default()
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepContext
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
	}
}

// UnaryInterceptor returns the unary client interceptor. Install it with
// grpc.WithChainUnaryInterceptor; it sees each logical call once and
// calls the rest of the chain (and the wire) once per attempt.
func (c *Client) UnaryInterceptor() grpc.UnaryClientInterceptor { return c.unary }

// BreakerState returns the state of the breaker of target (as
// ClientConn.Target returns it), and false when there is none.
func (c *Client) BreakerState(target string) (gobreaker.State, bool) {
	return c.targets.state(target)
}

// pushbackKind classifies a response's grpc-retry-pushback-ms trailer as
// gRPC's own retry policy reads it.
type pushbackKind uint8

const (
	pushbackNone pushbackKind = iota // no trailer
	pushbackWait                     // one non-negative integer: wait that many ms
	pushbackStop                     // negative, malformed or repeated: do not retry
)

// parsePushback reads the pushback of a trailer.
func parsePushback(md metadata.MD) (pushbackKind, time.Duration) {
	v := md[PushbackKey]
	switch {
	case len(v) == 0:
		return pushbackNone, 0
	case len(v) > 1:
		return pushbackStop, 0
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms < 0 {
		return pushbackStop, 0
	}
	if ms > int64(retrybudget.MaxParsedRetryAfter/time.Millisecond) {
		ms = int64(retrybudget.MaxParsedRetryAfter / time.Millisecond)
	}
	return pushbackWait, time.Duration(ms) * time.Millisecond
}

// backoff returns the full-jitter wait before retry n (n >= 1).
func (c *Client) backoff(n int) time.Duration {
	ceil := c.maxBackoff
	if n-1 < 62 {
		if d := c.baseBackoff << (n - 1); d > 0 && d < ceil && d>>(n-1) == c.baseBackoff {
			ceil = d
		}
	}
	u := c.rand()
	if !(u >= 0 && u < 1) {
		u = 0
	}
	return time.Duration(u * float64(ceil))
}

// callError is the error of a logical call that was not retried for a
// reason of the client's (or not sent at all): its gRPC status is the last
// attempt's, or the client's own when nothing was sent, and it unwraps to
// a *retrybudget.RetryError that tells the reason (errors.Is matches
// retrybudget.ErrBudgetExhausted, ErrCircuitOpen...).
type callError struct {
	re *retrybudget.RetryError
	st *status.Status
}

func (e *callError) Error() string              { return e.re.Error() }
func (e *callError) GRPCStatus() *status.Status { return e.st }
func (e *callError) Unwrap() error              { return e.re }

// Statuses of calls the client did not send at all.
var (
	stBreakerOpen = status.New(codes.Unavailable, "shedkit: circuit breaker open for the target; nothing was sent")
	stThrottled   = status.New(codes.Unavailable, "shedkit: throttled locally, the target is rejecting calls; nothing was sent")
	stNoTime      = status.New(codes.DeadlineExceeded, "shedkit: too little time left before the deadline; nothing was sent")
)

// notSent returns the error of a call denied before its first attempt.
func notSent(reason retrybudget.Reason) error {
	st := stThrottled
	switch reason {
	case retrybudget.ReasonBreaker:
		st = stBreakerOpen
	case retrybudget.ReasonDeadline:
		st = stNoTime
	}
	return &callError{re: &retrybudget.RetryError{Reason: reason}, st: st}
}

// notRetried wraps the error of the last of n attempts, which the client
// did not retry for reason.
func notRetried(err error, reason retrybudget.Reason, n int) error {
	st, _ := status.FromError(err)
	return &callError{re: &retrybudget.RetryError{Reason: reason, Attempts: n, Err: err}, st: st}
}
