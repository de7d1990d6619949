package shedredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/shedkit/shedkit/record"
)

// Defaults of Config.
const (
	// DefaultPrefix starts every key the package writes.
	DefaultPrefix = "shedkit:"
	// DefaultTimeout is the time budget of one Redis call: a few round
	// trips on a LAN, well under what a request can afford to wait.
	DefaultTimeout = 5 * time.Millisecond
	// DefaultBreakerFailures is how many consecutive failed calls open the
	// breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpen is how long an open breaker stops calling Redis
	// before it lets one probe through.
	DefaultBreakerOpen = time.Second
	// DefaultLeaseTTL is how long a concurrency lease lives in Redis
	// without renewal: the longest a crashed replica's leases count.
	DefaultLeaseTTL = 10 * time.Second
)

// ErrInvalidConfig is wrapped by the errors of the constructors; the
// message names the invalid field.
var ErrInvalidConfig = errors.New("shedredis: invalid config")

// Config configures a Store or a Concurrency. Zero fields take the
// documented defaults; Client and Replicas are required.
type Config struct {
	// Client is the Redis client, shared with the rest of the service if
	// you like. A *redis.Client or *redis.ClusterClient must have
	// ContextTimeoutEnabled set: without it go-redis ignores the context
	// deadline that enforces Timeout and waits its own ReadTimeout
	// (3 s by default) on a sick Redis. Required.
	Client redis.UniversalClient
	// Prefix starts every key written. Default DefaultPrefix.
	Prefix string
	// Timeout bounds each Redis call (a script run, a renewal batch).
	// On timeout or error the decision falls back to the local share.
	// Default DefaultTimeout (5 ms).
	Timeout time.Duration
	// Replicas is the number of replicas expected to share the quotas.
	// While Redis cannot be used, each replica enforces 1/Replicas of
	// each quota on its own (at least one request or lease). Required,
	// >= 1.
	Replicas int
	// BreakerFailures is how many consecutive failed calls open the
	// breaker, which then stops calling Redis (every decision falls back
	// at once) for BreakerOpen, after which one call probes Redis; a
	// success closes it. Default DefaultBreakerFailures.
	BreakerFailures int
	// BreakerOpen is how long an open breaker waits before it probes.
	// Default DefaultBreakerOpen (1 s).
	BreakerOpen time.Duration
	// FallbackMaxKeys bounds the local fallback state (see
	// shedhttp.MemoryStoreConfig.MaxKeys). Default shedhttp.DefaultMaxKeys.
	FallbackMaxKeys int
	// LeaseTTL (Concurrency only) is how long a lease counts in Redis
	// unless renewed. A replica renews its leases every LeaseTTL/3 while
	// their work runs; a crashed replica's leases expire within LeaseTTL.
	// Default DefaultLeaseTTL (10 s); at least 4 × Timeout and 1 ms.
	LeaseTTL time.Duration
	// Name is the value of the shedkit.store.name attribute on the
	// metrics, to tell stores apart. Default "redis".
	Name string
	// MeterProvider supplies the meter of the metrics; nil means
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Recorder, when set, records the Redis calls (record.KindStore):
	// each call's start, how long it took, its operation (allow, acquire,
	// release, renew, and cleanup: after a renewal, the removal of the
	// leases released while it was out, under the renewal's budget) and
	// how it ended (ok, timeout, error, breaker_open, canceled), sampled
	// as the recorder samples requests (and counted toward its
	// MaxRecordsPerSecond), so that shedsim fit can infer the scenario's
	// service.store. Pass the
	// Recorder of the service's shedkit middleware: the calls need its
	// requests' ticks. Nil records nothing, and costs nothing.
	Recorder *record.Recorder
}

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// validate checks cfg and fills in the defaults.
func (cfg *Config) validate() error {
	if cfg.Client == nil {
		return configError("Client", "required")
	}
	switch c := cfg.Client.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return configError("Client", "ContextTimeoutEnabled must be set in its redis.Options, or Timeout is not enforced")
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return configError("Client", "ContextTimeoutEnabled must be set in its redis.ClusterOptions, or Timeout is not enforced")
		}
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	switch {
	case cfg.Timeout < 0:
		return configError("Timeout", "must be >= 0, got %v", cfg.Timeout)
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Replicas < 1 {
		return configError("Replicas", "required: the number of replicas sharing the quotas, >= 1, got %d", cfg.Replicas)
	}
	switch {
	case cfg.BreakerFailures < 0:
		return configError("BreakerFailures", "must be >= 0, got %d", cfg.BreakerFailures)
	case cfg.BreakerFailures == 0:
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	switch {
	case cfg.BreakerOpen < 0:
		return configError("BreakerOpen", "must be >= 0, got %v", cfg.BreakerOpen)
	case cfg.BreakerOpen == 0:
		cfg.BreakerOpen = DefaultBreakerOpen
	}
	if cfg.FallbackMaxKeys < 0 {
		return configError("FallbackMaxKeys", "must be >= 0, got %d", cfg.FallbackMaxKeys)
	}
	switch {
	case cfg.LeaseTTL < 0:
		return configError("LeaseTTL", "must be >= 0, got %v", cfg.LeaseTTL)
	case cfg.LeaseTTL == 0:
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseTTL < time.Millisecond {
		// The scripts count in whole milliseconds: a TTL of 0 ms would
		// write leases already expired, and admit every Acquire.
		return configError("LeaseTTL", "must be at least 1ms, got %v", cfg.LeaseTTL)
	}
	if cfg.LeaseTTL < 4*cfg.Timeout {
		return configError("LeaseTTL", "must be at least 4 × Timeout (%v), got %v", 4*cfg.Timeout, cfg.LeaseTTL)
	}
	if cfg.Name == "" {
		cfg.Name = "redis"
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	return nil
}

// Metric names and attributes.
const (
	// MetricErrors counts failed Redis calls (errors and timeouts), by
	// operation and error.type; calls the open breaker skipped are not
	// errors.
	MetricErrors = "shedkit.store.errors"
	// MetricFallbacks counts decisions taken on the local share instead
	// of Redis, by operation and cause (error, timeout, breaker_open).
	MetricFallbacks = "shedkit.store.fallbacks"
	// MetricDuration is the latency of Redis calls, in seconds, by
	// operation: what the store adds to a request.
	MetricDuration = "shedkit.store.duration"

	AttrStore     = attribute.Key("shedkit.store.name")
	AttrOperation = attribute.Key("shedkit.store.operation")
	AttrCause     = attribute.Key("shedkit.store.fallback_cause")
	AttrErrorType = attribute.Key("error.type")
)

// Operations, the values of AttrOperation.
const (
	OpAllow   = "allow"
	OpAcquire = "acquire"
	OpRelease = "release"
	OpRenew   = "renew"
)

// opCleanup is the call, after a renewal, that removes the leases
// released while it was out. It is recorded apart (record.StoreCleanup):
// it is no request's release, and has the renewal's time budget. Its
// metrics are the releases', as they always were.
const opCleanup = "cleanup"

// Fallback causes, the values of AttrCause.
const (
	CauseTimeout     = "timeout"
	CauseError       = "error"
	CauseBreakerOpen = "breaker_open"
	// causeCanceled: the caller's context ended during the call; not
	// counted as a Redis failure.
	causeCanceled = "canceled"
)

// guard runs Redis calls within the time budget, behind the breaker, and
// records their metrics (and, with Config.Recorder, a sample of them).
type guard struct {
	timeout  time.Duration
	rec      *record.Recorder
	now      func() time.Time // time.Now; tests replace it
	breaker  *gobreaker.TwoStepCircuitBreaker[struct{}]
	errors   metric.Int64Counter
	fallback metric.Int64Counter
	duration metric.Float64Histogram
	store    attribute.KeyValue
	opts     map[string]*opOptions
}

// opOptions are the precomputed attribute options of one operation, so
// that recording allocates nothing: slices, passed on with "...", as a
// single option would be wrapped in a new slice at each call.
type opOptions struct {
	recOp    record.StoreOp
	op       []metric.RecordOption
	fallback map[string][]metric.AddOption
	errs     map[string][]metric.AddOption
}

// scopeName is the instrumentation scope of the package's meter.
const scopeName = "github.com/shedkit/shedkit/middleware/shedredis"

func newGuard(cfg *Config) (*guard, error) {
	m := cfg.MeterProvider.Meter(scopeName)
	g := &guard{timeout: cfg.Timeout, rec: cfg.Recorder, now: time.Now, store: AttrStore.String(cfg.Name), opts: map[string]*opOptions{}}
	var err error
	if g.errors, err = m.Int64Counter(MetricErrors, metric.WithUnit("{call}"),
		metric.WithDescription("Failed Redis calls of a shedkit store: errors and timeouts.")); err != nil {
		return nil, err
	}
	if g.fallback, err = m.Int64Counter(MetricFallbacks, metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions a shedkit store took on its local share because Redis could not be used.")); err != nil {
		return nil, err
	}
	if g.duration, err = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Latency of the Redis calls of a shedkit store."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)); err != nil {
		return nil, err
	}
	recOps := map[string]record.StoreOp{OpAllow: record.StoreAllow, OpAcquire: record.StoreAcquire, OpRelease: record.StoreRelease,
		OpRenew: record.StoreRenew, opCleanup: record.StoreCleanup}
	for _, op := range []string{OpAllow, OpAcquire, OpRelease, OpRenew, opCleanup} {
		g.opts[op] = g.newOpOptions(metricOp(op), recOps[op])
	}
	failures := uint32(cfg.BreakerFailures)
	g.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "shedredis:" + cfg.Name,
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// The caller's own cancellation says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	return g, nil
}

// metricOp is the AttrOperation value of op's metrics.
func metricOp(op string) string {
	if op == opCleanup {
		return OpRelease
	}
	return op
}

// newOpOptions precomputes the attribute options of the operation whose
// metrics say op and whose records say recOp.
func (g *guard) newOpOptions(op string, recOp record.StoreOp) *opOptions {
	o := &opOptions{
		recOp:    recOp,
		op:       []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(g.store, AttrOperation.String(op)))},
		fallback: map[string][]metric.AddOption{},
		errs:     map[string][]metric.AddOption{},
	}
	for _, c := range []string{CauseTimeout, CauseError, CauseBreakerOpen} {
		o.fallback[c] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(g.store, AttrOperation.String(op), AttrCause.String(c)))}
	}
	for _, c := range []string{CauseTimeout, CauseError} {
		o.errs[c] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(g.store, AttrOperation.String(op), AttrErrorType.String(c)))}
	}
	return o
}

// do runs call within the time budget. It returns "" when call succeeded,
// else the fallback cause; the error is recorded.
func (g *guard) do(ctx context.Context, op string, call func(ctx context.Context) error) string {
	return g.doWithin(ctx, op, g.timeout, call)
}

// doWithin is do with another time budget.
func (g *guard) doWithin(ctx context.Context, op string, timeout time.Duration, call func(ctx context.Context) error) string {
	o := g.opts[op]
	done, err := g.breaker.Allow()
	if err != nil {
		if op == OpAllow || op == OpAcquire {
			g.fallback.Add(ctx, 1, o.fallback[CauseBreakerOpen]...)
		}
		if g.rec != nil && g.rec.StoreCall() {
			g.record(o, g.now(), 0, record.StoreBreakerOpen) // the clock read only for a sampled call
		}
		return CauseBreakerOpen
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	start := g.now()
	err = call(cctx)
	took := g.now().Sub(start)
	g.duration.Record(ctx, took.Seconds(), o.op...)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The caller gave up: that says nothing about Redis.
		done(context.Canceled)
		g.sample(o, start, took, record.StoreCanceled)
		return causeCanceled
	}
	done(err)
	if err == nil {
		g.sample(o, start, took, record.StoreOK)
		return ""
	}
	cause, res := CauseError, record.StoreError
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		cause, res = CauseTimeout, record.StoreTimeout
	}
	g.sample(o, start, took, res)
	g.errors.Add(ctx, 1, o.errs[cause]...)
	if op == OpAllow || op == OpAcquire {
		g.fallback.Add(ctx, 1, o.fallback[cause]...)
	}
	return cause
}

// sample records a call with the Recorder, when there is one and it
// samples the call.
func (g *guard) sample(o *opOptions, start time.Time, took time.Duration, res record.StoreResult) {
	if g.rec != nil && g.rec.StoreCall() {
		g.record(o, start, took, res)
	}
}

// record hands a sampled call to the Recorder.
func (g *guard) record(o *opOptions, start time.Time, took time.Duration, res record.StoreResult) {
	g.rec.Add(record.Record{Kind: record.KindStore, Time: start, Latency: max(took, 0), Timed: true, Op: o.recOp, Result: res})
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
