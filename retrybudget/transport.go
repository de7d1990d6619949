package retrybudget

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/internal/httpname"
)

// Transport defaults.
const (
	DefaultMaxAttempts   = 3
	DefaultBaseBackoff   = 50 * time.Millisecond
	DefaultMaxBackoff    = time.Second
	DefaultMaxRetryAfter = 10 * time.Second
	DefaultMaxDrainBytes = 64 << 10
	DefaultMaxDrainTime  = 100 * time.Millisecond

	maxAttemptsLimit = 100
)

// InboundPolicy says whether a [Transport] used while serving a request
// retries when that inbound request is itself an attempt of a retrying
// client (see [Propagate] and [WithInboundAttempt]). Retrying at one
// layer only is what keeps 3 layers x 3 attempts from becoming 27.
type InboundPolicy uint8

const (
	// InboundIgnore retries regardless of the inbound request (default).
	InboundIgnore InboundPolicy = iota
	// InboundNoRetryOnRetry does not retry when the inbound request is
	// a retry (inbound attempt >= 2): the outer layer is already
	// retrying, so this layer makes a single attempt.
	InboundNoRetryOnRetry
	// InboundNoRetry does not retry when the inbound request comes from
	// a retrying shedkit client at all (inbound attempt >= 1): only the
	// outermost layer retries.
	InboundNoRetry
)

// TransportConfig configures a [Transport]. Zero fields mean the defaults.
type TransportConfig struct {
	// Base sends the attempts. Default http.DefaultTransport.
	Base http.RoundTripper
	// Name identifies the transport in metrics (attribute
	// shedkit.retry.client). Keep it low-cardinality. Default "default".
	Name string

	// MaxAttempts bounds the attempts per logical request, the first
	// included. Default 3; at most 100; 1 disables retries.
	MaxAttempts int

	// Budget is asked before each retry. Default: [Default], the budget
	// shared by the whole process.
	Budget *Budget
	// BudgetFor, when set, picks the budget of each request (per
	// destination, for instance [BudgetMap.ForHost]); a nil result falls
	// back to Budget.
	BudgetFor func(*http.Request) *Budget
	// NoBudget retries without any budget: amplification is then bounded
	// by MaxAttempts alone. For comparisons and tests.
	NoBudget bool

	// Throttle, when set, applies SRE adaptive throttling to every
	// attempt: attempts it rejects are not sent.
	Throttle *Throttle
	// ThrottleFor, when set, picks the throttle of each request; a nil
	// result falls back to Throttle.
	ThrottleFor func(*http.Request) *Throttle

	// Breaker configures the per-host circuit breakers (on by default).
	Breaker BreakerConfig

	// BaseBackoff and MaxBackoff shape the exponential backoff with full
	// jitter: retry n waits a uniform random time in
	// [0, min(MaxBackoff, BaseBackoff x 2^(n-1))). Defaults 50ms and 1s.
	BaseBackoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the transport honours: a
	// retry waits at least what the server asked, and is not made when
	// the server asks for more than this. Default 10s; at most 24h.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds each attempt until its response headers
	// arrive; an attempt that times out may be retried. The body of the
	// response returned to the caller is not bounded by it. 0: none.
	AttemptTimeout time.Duration
	// MinAttemptTime is the least time an attempt is expected to take:
	// no attempt starts with less than this left before the caller's
	// deadline. A retry also expects to take as long as the previous
	// attempt did, and must fit its backoff wait as well. 0: only the
	// wait and the previous attempt's duration count.
	MinAttemptTime time.Duration
	// Inbound says whether to retry under an inbound request that is
	// itself retried. Default InboundIgnore.
	Inbound InboundPolicy
	// DeadlineHeader, when set, names the request header that tells the
	// next hop how much time it has, so that it can refuse at once work
	// it cannot finish: on every attempt, the time left before the
	// request context's deadline when the attempt is sent (the time spent
	// on earlier attempts and backoff waits is gone), never more than
	// AttemptTimeout, rounded down (see [FormatDeadline]). Use
	// [EnvoyTimeoutHeader], [ConnectTimeoutHeader], [GRPCTimeoutHeader]
	// (gRPC's format) or a name of your own (whole milliseconds). An
	// attempt with neither a deadline nor an AttemptTimeout carries none.
	// The transport owns the header: a value of it in the caller's
	// request (one copied from an inbound request would be stale) is
	// replaced, or removed when the attempt has no deadline. Empty (the
	// default): the header is neither sent nor touched.
	DeadlineHeader string
	// MaxDrainBytes is how much of a discarded response body is read so
	// that its connection can be reused; larger bodies are closed
	// without reading (the connection is lost). Default 64 KiB; negative:
	// never drain.
	MaxDrainBytes int64
	// MaxDrainTime bounds the time spent draining a discarded body. A
	// body that does not end within it (a slow or endless one) is
	// closed, which closes its connection: a new connection costs less
	// than waiting on a body that may never end, and a retry never
	// waits longer than this for the previous response. It delays the
	// retry by at most this, on top of the backoff, and the deadline
	// rule counts it so (unless the body is known to be empty). Default
	// 100ms. The bodies of Base must allow Close while a Read is blocked
	// (those of net/http's transports do: the Read returns an error).
	MaxDrainTime time.Duration

	// Sleep waits d or until ctx is done, returning ctx.Err() then.
	// Default: a timer. Tests inject a fake.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns uniform values in [0, 1) for the jitter and the
	// throttle. Default math/rand/v2's Float64.
	Rand func() float64
	// Now reads the clock for the deadline arithmetic (the time an
	// attempt took, what is left to send to the next hop) and for the
	// budget, throttle and breaker tables. Default time.Now; tests and
	// simulations inject a fake with Sleep. The breakers' open timeout
	// runs on gobreaker's own clock, which cannot be injected.
	Now func() time.Time

	// TracerProvider and MeterProvider default to the global providers.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Propagator injects the trace context of each attempt into its
	// headers. Default otel.GetTextMapPropagator(), which does nothing
	// until the application installs one.
	Propagator propagation.TextMapPropagator
}

// Transport is an http.RoundTripper that retries what is safe and
// retryable, within a retry budget, behind per-host circuit breakers. See
// the package documentation for the rules. It is safe for concurrent use.
// Make one with NewTransport: the zero Transport panics when used.
type Transport struct {
	base           http.RoundTripper
	maxAttempts    int
	budget         *Budget
	budgetFor      func(*http.Request) *Budget
	throttle       *Throttle
	throttleFor    func(*http.Request) *Throttle
	breakers       *breakers
	baseBackoff    time.Duration
	maxBackoff     time.Duration
	maxRetryAfter  time.Duration
	attemptTimeout time.Duration
	minAttemptTime time.Duration
	inbound        InboundPolicy
	deadlineHeader string
	maxDrain       int64
	maxDrainTime   time.Duration
	sleep          func(context.Context, time.Duration) error
	rand           func() float64
	now            func() time.Time

	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	inst       *instruments
}

// NewTransport returns a transport configured by cfg, or an error naming
// the first invalid field.
func NewTransport(cfg TransportConfig) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	meter := cfg.MeterProvider.Meter(instrumentationName)
	inst, err := newInstruments(meter, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("retrybudget: creating instruments: %w", err)
	}
	if cfg.Budget != nil {
		if err := cfg.Budget.observeBalance(meter); err != nil {
			return nil, fmt.Errorf("retrybudget: registering the budget gauge: %w", err)
		}
	}
	brs, err := newBreakers(cfg.Breaker, inst.breakerChanged)
	if err != nil {
		return nil, err
	}
	if brs != nil {
		brs.now = cfg.Now
	}
	return &Transport{
		base:           cfg.Base,
		maxAttempts:    cfg.MaxAttempts,
		budget:         cfg.Budget,
		budgetFor:      cfg.BudgetFor,
		throttle:       cfg.Throttle,
		throttleFor:    cfg.ThrottleFor,
		breakers:       brs,
		baseBackoff:    cfg.BaseBackoff,
		maxBackoff:     cfg.MaxBackoff,
		maxRetryAfter:  cfg.MaxRetryAfter,
		attemptTimeout: cfg.AttemptTimeout,
		minAttemptTime: cfg.MinAttemptTime,
		inbound:        cfg.Inbound,
		deadlineHeader: http.CanonicalHeaderKey(cfg.DeadlineHeader),
		maxDrain:       cfg.MaxDrainBytes,
		maxDrainTime:   cfg.MaxDrainTime,
		sleep:          cfg.Sleep,
		rand:           cfg.Rand,
		now:            cfg.Now,
		tracer:         cfg.TracerProvider.Tracer(instrumentationName),
		propagator:     cfg.Propagator,
		inst:           inst,
	}, nil
}

// validate returns an error naming the first invalid field, so that a
// misconfigured transport fails at construction rather than on a request.
// It fills in the backoff defaults before comparing them: MaxBackoff is
// checked against the BaseBackoff in effect.
func (cfg *TransportConfig) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"BaseBackoff", cfg.BaseBackoff}, {"MaxBackoff", cfg.MaxBackoff},
		{"MaxRetryAfter", cfg.MaxRetryAfter}, {"AttemptTimeout", cfg.AttemptTimeout},
		{"MinAttemptTime", cfg.MinAttemptTime}, {"MaxDrainTime", cfg.MaxDrainTime},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: TransportConfig.%s must not be negative, got %v", ErrInvalidConfig, d.name, d.v)
		}
	}
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > maxAttemptsLimit {
		return fmt.Errorf("%w: TransportConfig.MaxAttempts must be in [0, %d], got %d", ErrInvalidConfig, maxAttemptsLimit, cfg.MaxAttempts)
	}
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff = DefaultBaseBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.BaseBackoff)
	}
	if cfg.MaxBackoff < cfg.BaseBackoff {
		return fmt.Errorf("%w: TransportConfig.MaxBackoff (%v) must not be below BaseBackoff (%v)", ErrInvalidConfig, cfg.MaxBackoff, cfg.BaseBackoff)
	}
	if cfg.MaxRetryAfter > MaxParsedRetryAfter {
		return fmt.Errorf("%w: TransportConfig.MaxRetryAfter must be at most %v, got %v", ErrInvalidConfig, MaxParsedRetryAfter, cfg.MaxRetryAfter)
	}
	if cfg.Inbound > InboundNoRetry {
		return fmt.Errorf("%w: TransportConfig.Inbound must be one of the InboundPolicy constants, got %d", ErrInvalidConfig, cfg.Inbound)
	}
	if cfg.DeadlineHeader != "" && !httpname.Valid(cfg.DeadlineHeader) {
		return fmt.Errorf("%w: TransportConfig.DeadlineHeader is not a valid header name: %q", ErrInvalidConfig, cfg.DeadlineHeader)
	}
	if cfg.NoBudget && (cfg.Budget != nil || cfg.BudgetFor != nil) {
		return fmt.Errorf("%w: TransportConfig.NoBudget contradicts Budget and BudgetFor", ErrInvalidConfig)
	}
	return nil
}

// setDefaults fills in the zero fields of a valid config, so that the
// transport never checks for a missing dependency on the request path.
func (cfg *TransportConfig) setDefaults() {
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.MaxDrainBytes == 0 {
		cfg.MaxDrainBytes = DefaultMaxDrainBytes
	}
	if cfg.MaxDrainTime == 0 {
		cfg.MaxDrainTime = DefaultMaxDrainTime
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if !cfg.NoBudget && cfg.Budget == nil {
		cfg.Budget = Default()
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepContext
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
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

func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// CloseIdleConnections closes the idle connections of the base transport
// when it has such a method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// BreakerState returns the state of host's circuit breaker (host as in
// URL.Host), and false when there is none.
func (t *Transport) BreakerState(host string) (gobreaker.State, bool) {
	if t.breakers == nil {
		return gobreaker.StateClosed, false
	}
	br, ok := t.breakers.k.get(host)
	if !ok {
		return gobreaker.StateClosed, false
	}
	return br.State(), true
}

// errNilResponse replaces the (nil, nil) of a base RoundTripper that breaks
// its contract, so that no one reads the missing response.
var errNilResponse = errors.New("retrybudget: base RoundTripper returned neither a response nor an error")

// ErrAttemptTimeout is matched (errors.Is) by the error of an attempt
// that exceeded TransportConfig.AttemptTimeout. That error also matches
// context.DeadlineExceeded and is a timeout (net.Error's Timeout, also
// through the *url.Error of http.Client), never context.Canceled.
var ErrAttemptTimeout = errors.New("retrybudget: attempt timed out")

type attemptTimeoutError struct{ err error }

func (e *attemptTimeoutError) Error() string   { return ErrAttemptTimeout.Error() + ": " + e.err.Error() }
func (e *attemptTimeoutError) Unwrap() []error { return []error{ErrAttemptTimeout, e.err} }
func (e *attemptTimeoutError) Timeout() bool   { return true }

var idempotent = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true,
	http.MethodTrace: true, http.MethodPut: true, http.MethodDelete: true,
}

// replayable reports whether req may be sent more than once: an
// idempotent method or an Idempotency-Key, and a body that can be
// produced again.
func replayable(req *http.Request, method string) bool {
	if !idempotent[method] {
		if k := req.Header["Idempotency-Key"]; len(k) == 0 || k[0] == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// roundTrip is the state of one logical request.
type roundTrip struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context // the caller's
	lctx     context.Context // with the logical span
	span     trace.Span
	rec      bool
	method   string
	attrs    []attribute.KeyValue // common attempt span attributes, when recording
	budget   *Budget
	throttle *Throttle
	br       *breaker
	done     func(error) // reports the outcome to br, once, when set
	outcome  error       // for done: the last attempt's, see breakerOutcome
	attempts int
	denied   Reason
	waited   time.Duration
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeRequestBody(req)
		return nil, errors.New("retrybudget: request has no URL")
	}
	ctx := req.Context()
	now := t.now()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	rt := roundTrip{t: t, req: req, ctx: ctx, method: method, budget: t.budget, throttle: t.throttle,
		outcome: errAttemptExcluded}
	if t.budgetFor != nil {
		if b := t.budgetFor(req); b != nil {
			rt.budget = b
		}
	}
	if t.throttleFor != nil {
		if th := t.throttleFor(req); th != nil {
			rt.throttle = th
		}
	}
	if t.breakers != nil {
		rt.br = t.breakers.get(requestHost(req))
	}
	t.inst.requests.Add(ctx, 1, t.inst.clientOpts...)
	if rt.budget != nil {
		rt.budget.DepositAt(now)
	}

	rt.lctx, rt.span = t.tracer.Start(ctx, logicalSpanName(method), internalOpts...)
	rt.rec = rt.span.IsRecording()
	if rt.rec {
		rt.attrs = append(methodAttrs(method), serverAttrs(req.URL)...)
		rt.span.SetAttributes(rt.attrs...)
		rt.attrs = append(rt.attrs, attrURLFull.String(redactedURL(req.URL)))
	}

	resp, err := rt.runGuarded(now)
	if rt.done != nil {
		rt.done(rt.outcome) // one logical request, one count
	}

	if rt.rec {
		rt.span.SetAttributes(attrAttempts.Int(rt.attempts))
		endSpan(rt.span, resp, err, false)
	} else {
		rt.span.End()
	}
	if r := reportFrom(ctx); r != nil {
		*r = Report{Attempts: rt.attempts, Denied: rt.denied, Waited: rt.waited}
	}
	return resp, err
}

// deny records that an attempt was not made, for reason.
func (rt *roundTrip) deny(reason Reason) {
	rt.denied = reason
	rt.t.inst.denied.Add(rt.ctx, 1, rt.t.inst.reasonOpts[reason]...)
	if rt.rec {
		rt.span.AddEvent(eventDenied, trace.WithAttributes(attrReason.String(reason.String())))
	}
}

// runGuarded is run, except that a panic below it (a later
// RoundTripper, or a Sleep, Rand or Retryable hook) still reports to the
// breaker, as excluded, and ends the logical span before it goes on:
// otherwise a half-open breaker would count its probe in flight for ever
// and refuse every later request to the host.
func (rt *roundTrip) runGuarded(now time.Time) (resp *http.Response, err error) {
	returned := false
	defer func() {
		if !returned {
			if rt.done != nil {
				rt.done(errAttemptExcluded)
			}
			rt.span.SetStatus(codes.Error, "panic")
			rt.span.End()
		}
	}()
	resp, err = rt.run(now)
	returned = true
	return resp, err
}

// run sends the attempts of the logical request until one is final.
func (rt *roundTrip) run(now time.Time) (*http.Response, error) {
	t, req := rt.t, rt.req
	if err := rt.ctx.Err(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if reason := rt.begin(now); reason != ReasonNone {
		closeRequestBody(req)
		return rt.giveUp(reason, 0, nil, nil)
	}
	canRetry := replayable(req, rt.method)
	body := req.Body // the body of the next attempt
	var (
		resp    *http.Response
		err     error
		lastErr error
		status  int
	)
	for n := 1; ; n++ {
		if n > 1 && rt.br != nil && rt.br.State() == gobreaker.StateOpen {
			// Opened by other requests during the backoff wait.
			closeBody(body)
			rt.deny(ReasonBreaker)
			return nil, &RetryError{Reason: ReasonBreaker, Attempts: n - 1, Status: status, Err: lastErr}
		}
		start := now
		resp, err = rt.attempt(n, body)
		body = nil
		status = 0
		if resp != nil {
			status = resp.StatusCode
		}
		noRetry, retryable, gone := rt.classify(resp, err, status)
		if rt.throttle == nil && (!retryable || !canRetry) {
			return resp, err // the common success path reads the clock once
		}
		end := t.now()
		if rt.throttle != nil {
			rt.report(end, err, status, noRetry, gone)
		}
		if !retryable || !canRetry {
			return resp, err
		}
		lastErr = err

		reason, wait := rt.decide(n, resp, noRetry, end, end.Sub(start))
		if reason == ReasonNone && req.Body != nil && req.Body != http.NoBody {
			var gerr error
			if body, gerr = req.GetBody(); gerr != nil {
				// Cannot replay after all: the last outcome is final.
				return rt.giveUp(ReasonBodyNotReplayable, n, resp, err)
			}
		}
		if reason == ReasonNone {
			reason = rt.admit(end)
		}
		if reason != ReasonNone {
			closeBody(body)
			return rt.giveUp(reason, n, resp, err)
		}
		if serr := rt.wait(n, resp, body, wait); serr != nil {
			return nil, serr
		}
		now = t.now()
	}
}

// begin lets the first attempt go if it fits before the caller's
// deadline, then through the breaker, which counts the logical request
// from then on, and the throttle.
func (rt *roundTrip) begin(now time.Time) Reason {
	if dl, ok := rt.ctx.Deadline(); ok && rt.t.minAttemptTime > 0 && dl.Sub(now) < rt.t.minAttemptTime {
		return ReasonDeadline
	}
	if rt.br != nil {
		done, err := rt.br.Allow()
		if err != nil {
			return ReasonBreaker
		}
		rt.done = done
	}
	if rt.throttle != nil && !rt.throttle.AllowAt(now, rt.t.rand()) {
		return ReasonThrottle // nothing sent: rt.outcome stays excluded
	}
	return ReasonNone
}

// classify reads an attempt's outcome: whether the server asked not to be
// retried, whether a retry could help at all, and whether the caller is
// gone. A retry cannot help a caller that is gone, whatever the attempt
// returned, nor a request body that failed to read (see
// classifyError), which would fail again. Only an attempt that failed or could be retried
// asks about the caller (gone is false otherwise), so that the common
// success path does not pay for it. It keeps the outcome for the breaker
// too, which hears only the last attempt's.
func (rt *roundTrip) classify(resp *http.Response, err error, status int) (noRetry, retryable, gone bool) {
	noRetry = resp != nil && hasValue(resp.Header, NoRetryHeader)
	if err != nil {
		retryable = classifyError(err) != errRequest
	} else {
		retryable = status == http.StatusTooManyRequests || status == http.StatusBadGateway ||
			status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
	}
	gone = (err != nil || retryable) && rt.ctx.Err() != nil
	if rt.done != nil {
		// A response that arrived still says the host answered.
		rt.outcome = breakerOutcome(resp, err, gone && err != nil)
	}
	return noRetry, retryable && !gone, gone
}

// report tells the throttle the backend's answer to an attempt it let
// through: accepted unless it signalled overload (429, 503,
// [NoRetryHeader]) or failed. An attempt whose caller left before an
// answer has no known outcome and is not counted.
func (rt *roundTrip) report(now time.Time, err error, status int, noRetry, gone bool) {
	switch {
	case err == nil && status != http.StatusTooManyRequests &&
		status != http.StatusServiceUnavailable && !noRetry:
		rt.throttle.AcceptAt(now)
	case err != nil && (gone || classifyError(err) == errRequest):
		// No answer, or one about the request and not the backend.
	default:
		rt.throttle.RejectAt(now)
	}
}

// giveUp ends the logical request after n attempts without retrying, for
// reason: the caller gets the last response as it is, so that it sees
// what the server said, or else a RetryError saying why there was no
// retry.
func (rt *roundTrip) giveUp(reason Reason, n int, resp *http.Response, err error) (*http.Response, error) {
	rt.deny(reason)
	if resp != nil {
		return resp, nil
	}
	return nil, &RetryError{Reason: reason, Attempts: n, Err: err}
}

// wait discards the response being retried, so that its connection can
// be reused, then waits before attempt n+1. The caller leaving ends the
// wait with its context's error, which ends the request.
func (rt *roundTrip) wait(n int, resp *http.Response, body io.ReadCloser, d time.Duration) error {
	if resp != nil {
		rt.t.discard(resp)
	}
	if rt.rec {
		rt.span.AddEvent(eventBackoff, trace.WithAttributes(
			attrAttempt.Int(n+1), attrDelay.Float64(d.Seconds())))
	}
	rt.waited += d
	if err := rt.t.sleep(rt.ctx, d); err != nil {
		closeBody(body)
		return err
	}
	return nil
}

// decide applies the rules that do not consume anything, and returns the
// wait before the next attempt.
func (rt *roundTrip) decide(n int, resp *http.Response, noRetry bool, now time.Time, took time.Duration) (Reason, time.Duration) {
	t := rt.t
	if noRetry {
		return ReasonNoRetryHeader, 0
	}
	if n >= t.maxAttempts {
		return ReasonMaxAttempts, 0
	}
	switch in := InboundAttempt(rt.ctx); {
	case t.inbound == InboundNoRetryOnRetry && in >= 2,
		t.inbound == InboundNoRetry && in >= 1:
		return ReasonInbound, 0
	}
	wait := t.backoff(n)
	if resp != nil {
		if v := resp.Header["Retry-After"]; len(v) > 0 {
			if ra, ok := ParseRetryAfter(v[0], now); ok {
				if ra > t.maxRetryAfter {
					return ReasonRetryAfter, 0
				}
				wait = max(wait, ra)
			}
		}
	}
	// The discarded body is drained before the wait: its time counts too,
	// at its bound, since the drain cannot be undone once it has begun.
	var drain time.Duration
	if resp != nil && resp.ContentLength != 0 && resp.Body != http.NoBody && t.drains(resp) {
		drain = t.maxDrainTime
	}
	if dl, ok := rt.ctx.Deadline(); ok && now.Add(drain+wait+max(t.minAttemptTime, took)).After(dl) {
		return ReasonDeadline, 0
	}
	if rt.br != nil && rt.br.State() == gobreaker.StateOpen {
		return ReasonBreaker, 0
	}
	return ReasonNone, wait
}

// admit asks the throttle, then the budget, for a retry. The budget,
// shared by every host, is asked last so that a retry the throttle
// rejects costs it nothing; a retry the throttle allows and the budget
// denies costs the throttle nothing either (it counts outcomes).
func (rt *roundTrip) admit(now time.Time) Reason {
	if rt.throttle != nil && !rt.throttle.AllowAt(now, rt.t.rand()) {
		return ReasonThrottle
	}
	if rt.budget != nil && !rt.budget.TryWithdrawAt(now) {
		return ReasonBudget
	}
	return ReasonNone
}

// backoff returns the full-jitter wait before retry n (n >= 1).
func (t *Transport) backoff(n int) time.Duration {
	ceil := t.maxBackoff
	if n-1 < 62 {
		if d := t.baseBackoff << (n - 1); d > 0 && d < ceil && d>>(n-1) == t.baseBackoff {
			ceil = d
		}
	}
	u := t.rand()
	if !(u >= 0 && u < 1) {
		u = 0
	}
	return time.Duration(u * float64(ceil))
}

// attempt sends attempt n on the wire.
func (rt *roundTrip) attempt(n int, body io.ReadCloser) (*http.Response, error) {
	t := rt.t
	rt.attempts = n
	actx := rt.lctx
	var aspan trace.Span
	spanEnded := false
	if rt.rec {
		attrs := rt.attrs
		if n > 1 {
			attrs = append(attrs[:len(attrs):len(attrs)], attrResendCount.Int(n-1))
		}
		actx, aspan = t.tracer.Start(rt.lctx, attemptSpanName(rt.method), clientKind, trace.WithAttributes(attrs...))
		// A panic below (Base, a hook) would otherwise leave the span
		// open: never exported, the trace would lose the attempt that
		// failed. runGuarded ends the logical span the same way.
		defer func() {
			if !spanEnded {
				aspan.SetAttributes(attrErrorType.String("panic"))
				aspan.SetStatus(codes.Error, "panic")
				aspan.End()
			}
		}()
	}
	var (
		cancel context.CancelFunc
		timer  *time.Timer
	)
	if t.attemptTimeout > 0 {
		actx, cancel = context.WithCancel(actx)
		timer = time.AfterFunc(t.attemptTimeout, cancel)
	}
	areq := rt.attemptRequest(actx, n, body)
	if n == 1 {
		t.inst.attempts.Add(rt.ctx, 1, t.inst.firstOpts...)
	} else {
		t.inst.attempts.Add(rt.ctx, 1, t.inst.resendOpts...)
	}

	resp, err := t.base.RoundTrip(areq)
	if err != nil && resp != nil {
		resp.Body.Close() // a RoundTripper must not return both
		resp = nil
	}
	if err == nil && resp == nil {
		err = errNilResponse // nor neither
	}
	if err != nil && (forbiddenFields(areq.Header) || forbiddenFields(areq.Trailer)) {
		err = &requestError{err: err}
	}
	timedOut := false
	if timer != nil {
		timedOut = !timer.Stop()
		switch {
		case timedOut && rt.ctx.Err() == nil:
			if resp != nil {
				resp.Body.Close()
				resp = nil
			}
			if err == nil || errors.Is(err, context.Canceled) {
				// The cancellation is the timer's: the attempt ran out
				// of time, and a handler that reads Canceled as "my
				// client went away" would hide the timeout from its
				// limit (a 499, a permit released Ignored).
				err = context.DeadlineExceeded
			}
			err = &attemptTimeoutError{err: err}
			cancel()
		case resp == nil || resp.StatusCode == http.StatusSwitchingProtocols:
			cancel()
		default:
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		}
	}

	if aspan != nil {
		endSpan(aspan, resp, err, timedOut)
		spanEnded = true
	}
	return resp, err
}

// endSpan sets the status code, error.type and status of an attempt's
// span, or of the logical request's, and ends it. error.type is the
// status code for an error status, as the conventions ask.
func endSpan(span trace.Span, resp *http.Response, err error, timedOut bool) {
	switch {
	case err != nil:
		span.SetAttributes(attrErrorType.String(errorType(err, timedOut)))
		span.SetStatus(codes.Error, "")
	case resp.StatusCode >= 400:
		span.SetAttributes(attrStatusCode.Int(resp.StatusCode),
			attrErrorType.String(statusText(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	default:
		span.SetAttributes(attrStatusCode.Int(resp.StatusCode))
	}
	span.End()
}

// attemptRequest returns the request of attempt n, sent under actx with
// body: the caller's, with the attempt's own header, and its body's read
// errors marked (see classifyError).
func (rt *roundTrip) attemptRequest(actx context.Context, n int, body io.ReadCloser) *http.Request {
	t := rt.t
	areq := rt.req.WithContext(actx)
	areq.Body = markBody(body)
	if gb := rt.req.GetBody; gb != nil {
		// net/http replays the body itself after some connection
		// failures: its copies must be marked too.
		areq.GetBody = func() (io.ReadCloser, error) {
			b, err := gb()
			return markBody(b), err
		}
	}
	areq.Header = attemptHeader(rt.req.Header, n)
	if t.deadlineHeader != "" {
		t.setDeadline(areq.Header, rt.ctx)
	}
	t.propagator.Inject(actx, propagation.HeaderCarrier(areq.Header))
	return areq
}

// attemptHeader returns the header of attempt n: the caller's header,
// which a RoundTripper must not modify, copied into a new map with the
// attempt number. The value slices are shared with the caller's header,
// clipped so that an append by a wrapped transport reallocates instead
// of writing into them. Room is left for the trace context.
func attemptHeader(h http.Header, n int) http.Header {
	h2 := make(http.Header, len(h)+3)
	for k, v := range h {
		h2[k] = v[:len(v):len(v)]
	}
	h2[AttemptHeader] = attemptValues[n]
	return h2
}

// setDeadline sets (or removes) the deadline header of an attempt about
// to be sent on behalf of a caller whose context is ctx.
func (t *Transport) setDeadline(h http.Header, ctx context.Context) {
	if len(h) > 0 {
		// The caller's copies go, under any spelling of the key: a stale
		// one sent beside the fresh value would become a second value of
		// the same header at the server.
		for k := range h {
			if len(k) == len(t.deadlineHeader) && k != t.deadlineHeader && strings.EqualFold(k, t.deadlineHeader) {
				delete(h, k)
			}
		}
	}
	dl, ok := ctx.Deadline()
	v, ok := deadlineValue(t.deadlineHeader, t.now(), dl, ok, t.attemptTimeout)
	if !ok {
		delete(h, t.deadlineHeader)
		return
	}
	h[t.deadlineHeader] = []string{v}
}

// statusText returns the status code as error.type wants it.
func statusText(code int) string {
	if code >= 100 && code <= 999 {
		return statusCodes[code-100]
	}
	return "_OTHER"
}

var statusCodes = func() (s [900]string) {
	for i := range s {
		s[i] = fmt.Sprint(i + 100)
	}
	return s
}()

// discard closes the body of a response that will not be returned. It
// drains the body first, so that its connection can be reused, only as
// long as that is cheap: at most maxDrain bytes within maxDrainTime. A
// body that is longer or slower is closed before its end, which closes
// its connection (net/http does not reuse a connection whose body was not
// read to the end). A response with Connection: close is not drained at
// all: its connection will not be reused anyway.
func (t *Transport) discard(resp *http.Response) {
	if !t.drains(resp) {
		resp.Body.Close()
		return
	}
	// When the time is up, the timer closes the body under the blocked
	// Read, which then returns an error (net/http's bodies, HTTP/1 and
	// HTTP/2, allow Close concurrently with Read). The Once makes the
	// two closes one, and makes discard return only once the body is
	// closed, whichever closed it.
	var once sync.Once
	closeBody := func() { once.Do(func() { resp.Body.Close() }) }
	timer := time.AfterFunc(t.maxDrainTime, closeBody)
	// One byte more than the bound: a chunked body of exactly maxDrain
	// bytes still has its terminating chunk to read, without which
	// net/http does not reuse the connection.
	_, _ = io.CopyN(io.Discard, resp.Body, t.maxDrain+1)
	timer.Stop()
	closeBody()
}

// drains reports whether discard reads resp's body before closing it:
// not when draining is off, the connection will not be reused anyway, or
// the body is known to be too long.
func (t *Transport) drains(resp *http.Response) bool {
	return t.maxDrain > 0 && !resp.Close && resp.ContentLength <= t.maxDrain
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// hasValue reports whether any value of key in h is non-empty.
func hasValue(h http.Header, key string) bool {
	for _, v := range h[key] {
		if v != "" {
			return true
		}
	}
	return false
}

func closeBody(b io.ReadCloser) {
	if b != nil {
		b.Close()
	}
}

func closeRequestBody(req *http.Request) { closeBody(req.Body) }

// Compile-time check.
var _ http.RoundTripper = (*Transport)(nil)
