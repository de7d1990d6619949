package shedotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/shedkit/shedkit/shed"
)

// Attribute keys of shedkit's metrics and spans. The middleware sets the
// same keys on server spans (package middleware/shedhttp).
const (
	AttrLimiter  = attribute.Key("shedkit.limiter")  // Config.Name
	AttrClass    = attribute.Key("shedkit.class")    // the class name
	AttrDecision = attribute.Key("shedkit.decision") // admitted, queued, rejected, cancelled; spans: admitted, rejected, dry_run
	AttrReason   = attribute.Key("shedkit.reason")   // shed.Reason.String(), on rejections
	AttrOutcome  = attribute.Key("shedkit.outcome")  // shed.Outcome.String(), or leaked
	// Span-only attributes.
	AttrQueueWait      = attribute.Key("shedkit.queue.wait")      // seconds spent queued (float64)
	AttrCost           = attribute.Key("shedkit.cost")            // the cost the request reserved
	AttrAttempt        = attribute.Key("shedkit.attempt")         // the inbound attempt number (int)
	AttrDeadlineBudget = attribute.Key("shedkit.deadline.budget") // seconds left before the deadline (float64)
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/shedkit/shedkit/shed/shedotel"

// Config configures Metrics.
type Config struct {
	// MeterProvider supplies the meter; nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Name identifies the limiter in the shedkit.limiter attribute, for
	// services with several limiters. Default "default".
	Name string
}

// Metrics records a shed.Limiter's activity. It is a shed.Observer: put it
// in shed.Config.Observer, then Register the limiter.
type Metrics struct {
	name      string
	meter     metric.Meter
	queueWait metric.Float64Histogram
	latency   metric.Float64Histogram
	// opts holds precomputed options, so that recording allocates nothing;
	// Register swaps in a table with the limiter's class names.
	opts atomic.Pointer[options]
	// rateLimited counts, by class, the rejections the middleware decides
	// itself and reports to Observe (shed.ReasonRateLimited): the limiter
	// never sees them, so its Snapshot cannot count them.
	rateLimited [shed.MaxClasses]atomic.Uint64

	// What is registered: the series carry only Config.Name, so a second
	// limiter or limit source would add its numbers to the first's.
	mu                 sync.Mutex
	limiterOn, limitOn bool
}

// ErrRegistered is returned by Register and RegisterLimit when the Metrics
// already reports a limiter (or a limit): each series is named by
// Config.Name alone, so a second one would add to the first. Unregister
// the first, or give each limiter its own Metrics with its own Name.
var ErrRegistered = errors.New("shedotel: already registered")

// claim marks *on, or fails with ErrRegistered; the returned
// registration clears it on Unregister.
func (m *Metrics) claim(on *bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *on {
		return ErrRegistered
	}
	*on = true
	return nil
}

func (m *Metrics) unclaim(on *bool) {
	m.mu.Lock()
	*on = false
	m.mu.Unlock()
}

// registration is an OpenTelemetry registration that frees its claim on
// the Metrics once unregistered.
type registration struct {
	metric.Registration
	once sync.Once
	free func()
}

func (r *registration) Unregister() error {
	err := r.Registration.Unregister()
	r.once.Do(r.free)
	return err
}

// claimed registers the callback made by reg under the claim on, which
// it frees when reg fails.
func (m *Metrics) claimed(on *bool, reg func() (metric.Registration, error)) (metric.Registration, error) {
	if err := m.claim(on); err != nil {
		return nil, err
	}
	r, err := reg()
	if err != nil {
		m.unclaim(on)
		return nil, err
	}
	return &registration{Registration: r, free: func() { m.unclaim(on) }}, nil
}

// options are the record options of every class.
type options struct {
	wait    [shed.MaxClasses][3][]metric.RecordOption // admitted, rejected, cancelled
	latency [shed.MaxClasses][2][]metric.RecordOption // success, dropped
}

// New creates the histograms. The limiter's class names are learned at
// Register; until then events are recorded with the class index as name.
func New(cfg Config) (*Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	m := &Metrics{name: cfg.Name, meter: mp.Meter(ScopeName)}
	var err error
	if m.queueWait, err = m.meter.Float64Histogram("shedkit.admission.queue.wait",
		metric.WithUnit("s"), metric.WithDescription("Time requests spent in the admission queue."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)); err != nil {
		return nil, fmt.Errorf("shedotel: %w", err)
	}
	if m.latency, err = m.meter.Float64Histogram("shedkit.admission.latency",
		metric.WithUnit("s"), metric.WithDescription("How long timed permits were held (a sample of requests at high rates)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)); err != nil {
		return nil, fmt.Errorf("shedotel: %w", err)
	}
	names := make([]string, shed.MaxClasses)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	m.setClasses(names)
	return m, nil
}

func (m *Metrics) setClasses(names []string) {
	t := &options{}
	lim := AttrLimiter.String(m.name)
	for c := 0; c < shed.MaxClasses; c++ {
		name := fmt.Sprint(c)
		if c < len(names) {
			name = names[c]
		}
		cl := AttrClass.String(name)
		for i, d := range []string{"admitted", "rejected", "cancelled"} {
			t.wait[c][i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(lim, cl, AttrDecision.String(d)))}
		}
		for i, o := range []shed.Outcome{shed.Success, shed.Dropped} {
			t.latency[c][i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(lim, cl, AttrOutcome.String(o.String())))}
		}
	}
	m.opts.Store(t)
}

// Observe records the histograms (queue waits and timed latencies) and
// counts the middleware's rate-limit rejections, which the limiter does not
// see. Every other event returns at once; counters are read from Snapshot
// instead.
func (m *Metrics) Observe(e shed.Event) {
	c := e.Class & (shed.MaxClasses - 1)
	switch {
	case e.Kind == shed.EventAdmitted && e.Queued:
		m.queueWait.Record(context.Background(), e.Wait.Seconds(), m.opts.Load().wait[c][0]...)
	case e.Kind == shed.EventRejected && e.Queued:
		m.queueWait.Record(context.Background(), e.Wait.Seconds(), m.opts.Load().wait[c][1]...)
	case e.Kind == shed.EventRejected && e.Reason == shed.ReasonRateLimited:
		m.rateLimited[c].Add(1)
	case e.Kind == shed.EventCancelled:
		m.queueWait.Record(context.Background(), e.Wait.Seconds(), m.opts.Load().wait[c][2]...)
	case e.Kind == shed.EventReleased && e.Timed && (e.Outcome == shed.Success || e.Outcome == shed.Dropped):
		m.latency.Record(context.Background(), e.Latency.Seconds(), m.opts.Load().latency[c][e.Outcome]...)
	}
}

// Register adds the observable instruments of l. A Metrics reports one
// limiter at a time (the one it observes, see Config.Name): a second
// Register fails with ErrRegistered until the first is unregistered.
func (m *Metrics) Register(l *shed.Limiter) (metric.Registration, error) {
	if l == nil {
		return nil, errors.New("shedotel: Register: nil limiter")
	}
	return m.claimed(&m.limiterOn, func() (metric.Registration, error) { return m.register(l) })
}

func (m *Metrics) register(l *shed.Limiter) (metric.Registration, error) {
	snap := l.Snapshot()
	names := make([]string, len(snap.Classes))
	for i, c := range snap.Classes {
		names[i] = c.Name
	}
	m.setClasses(names)
	in, err := m.newLimiterInstruments()
	if err != nil {
		return nil, fmt.Errorf("shedotel: %w", err)
	}
	lim := AttrLimiter.String(m.name)
	sets := newClassSets(lim, names)
	limSet := attribute.NewSet(lim)
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		in.observe(o, m.withRateLimited(l.Snapshot()), limSet, sets)
		return nil
	}, in.limit, in.budget, in.inflight, in.cost, in.depth, in.tenants, in.decisions, in.releases)
}

// withRateLimited adds the middleware's rate-limit rejections to snap's
// counts, which hold none of their own (a Limiter never rejects with
// shed.ReasonRateLimited).
func (m *Metrics) withRateLimited(snap shed.Snapshot) shed.Snapshot {
	for i := range snap.Classes {
		snap.Classes[i].Rejected[shed.ReasonRateLimited] += m.rateLimited[i&(shed.MaxClasses-1)].Load()
	}
	return snap
}

// limiterInstruments are the observable instruments of a registered
// limiter, all read from one snapshot per collection.
type limiterInstruments struct {
	limit, budget                  metric.Int64ObservableGauge
	inflight, cost, depth, tenants metric.Int64ObservableUpDownCounter
	decisions, releases            metric.Int64ObservableCounter
}

// newLimiterInstruments creates the instruments of a limiter and joins
// the errors of all of them, so that one error says everything the meter
// refused.
func (m *Metrics) newLimiterInstruments() (*limiterInstruments, error) {
	var (
		in   limiterInstruments
		errs [8]error
	)
	in.limit, errs[0] = m.meter.Int64ObservableGauge("shedkit.admission.limit", metric.WithUnit("{request}"),
		metric.WithDescription("The concurrency limit in force."))
	in.budget, errs[1] = m.meter.Int64ObservableGauge("shedkit.admission.cost.budget", metric.WithUnit("{unit}"),
		metric.WithDescription("The in-flight cost budget."))
	in.inflight, errs[2] = m.meter.Int64ObservableUpDownCounter("shedkit.admission.inflight", metric.WithUnit("{request}"),
		metric.WithDescription("Admitted work not yet released."))
	in.cost, errs[3] = m.meter.Int64ObservableUpDownCounter("shedkit.admission.inflight.cost", metric.WithUnit("{unit}"),
		metric.WithDescription("Cost of the admitted work not yet released."))
	in.depth, errs[4] = m.meter.Int64ObservableUpDownCounter("shedkit.admission.queue.depth", metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting in the admission queue."))
	in.tenants, errs[5] = m.meter.Int64ObservableUpDownCounter("shedkit.admission.tenants", metric.WithUnit("{tenant}"),
		metric.WithDescription("Tenants with work in flight or queued, each held to its share of a contended class."))
	in.decisions, errs[6] = m.meter.Int64ObservableCounter("shedkit.admission.decisions", metric.WithUnit("{request}"),
		metric.WithDescription("Admission decisions by class, decision and reason; a queued request is counted again when admitted, rejected or cancelled."))
	in.releases, errs[7] = m.meter.Int64ObservableCounter("shedkit.admission.releases", metric.WithUnit("{request}"),
		metric.WithDescription("Released permits by class and outcome."))
	return &in, errors.Join(errs[:]...)
}

// classSets are the attribute sets of one class's observations.
type classSets struct {
	class     attribute.Set
	admitted  attribute.Set
	queued    attribute.Set
	cancelled attribute.Set
	rejected  [shed.NumReasons]attribute.Set
	released  [3]attribute.Set
	leaked    attribute.Set
}

// newClassSets builds every set a collection needs at Register, so that
// collecting allocates none.
func newClassSets(lim attribute.KeyValue, names []string) []classSets {
	sets := make([]classSets, len(names))
	for i, n := range names {
		cl := AttrClass.String(n)
		s := &sets[i]
		s.class = attribute.NewSet(lim, cl)
		s.admitted = attribute.NewSet(lim, cl, AttrDecision.String("admitted"))
		s.queued = attribute.NewSet(lim, cl, AttrDecision.String("queued"))
		s.cancelled = attribute.NewSet(lim, cl, AttrDecision.String("cancelled"))
		for r := range s.rejected {
			s.rejected[r] = attribute.NewSet(lim, cl, AttrDecision.String("rejected"), AttrReason.String(shed.Reason(r).String()))
		}
		for o := range s.released {
			s.released[o] = attribute.NewSet(lim, cl, AttrOutcome.String(shed.Outcome(o).String()))
		}
		s.leaked = attribute.NewSet(lim, cl, AttrOutcome.String("leaked"))
	}
	return sets
}

// observe reports snap. Every rejection reason and the leaks are
// reported from zero, not from their first count: rate() and increase()
// need a sample before the first count to see it, so a series that
// appears with its first rejection or leak hides that one from an alert.
// The reasons are a fixed set, so the series are bounded by the classes.
func (in *limiterInstruments) observe(o metric.Observer, snap shed.Snapshot, limSet attribute.Set, sets []classSets) {
	o.ObserveInt64(in.limit, int64(snap.Limit), metric.WithAttributeSet(limSet))
	if snap.MaxCost > 0 {
		o.ObserveInt64(in.budget, snap.MaxCost, metric.WithAttributeSet(limSet))
	}
	for i, c := range snap.Classes {
		s := &sets[i]
		o.ObserveInt64(in.inflight, int64(c.InFlight), metric.WithAttributeSet(s.class))
		o.ObserveInt64(in.cost, c.InFlightCost, metric.WithAttributeSet(s.class))
		o.ObserveInt64(in.depth, int64(c.Queued), metric.WithAttributeSet(s.class))
		o.ObserveInt64(in.tenants, int64(c.Tenants), metric.WithAttributeSet(s.class))
		o.ObserveInt64(in.decisions, int64(c.Admitted), metric.WithAttributeSet(s.admitted))
		o.ObserveInt64(in.decisions, int64(c.Enqueued), metric.WithAttributeSet(s.queued))
		o.ObserveInt64(in.decisions, int64(c.Cancelled), metric.WithAttributeSet(s.cancelled))
		for r, n := range c.Rejected {
			if shed.Reason(r) != shed.ReasonNone {
				o.ObserveInt64(in.decisions, int64(n), metric.WithAttributeSet(s.rejected[r]))
			}
		}
		for r, n := range c.Released {
			o.ObserveInt64(in.releases, int64(n), metric.WithAttributeSet(s.released[r]))
		}
		o.ObserveInt64(in.releases, int64(c.Leaked), metric.WithAttributeSet(s.leaked))
	}
}

// AttrLimitReason is the reason of an adaptive limit's decision
// (limits.Reason.String(): grow, cut-latency, relearn, ...).
const AttrLimitReason = attribute.Key("shedkit.limit.reason")

// LimitDecisions is implemented by the adaptive limits of package limits
// (Gradient, AIMD): the windows they closed, counted by the reason of the
// decision each led to.
type LimitDecisions interface {
	Decisions(f func(reason string, windows uint64))
}

// RegisterLimit exports src's decisions as the counter
// shedkit.admission.limit.decisions, by shedkit.limit.reason: which rule
// moved the limit, and how often. The reasons are those src reports when
// it is registered (every reason, for the limits of package limits); a
// reason it reports only later is not exported. One limit at a time: a
// second RegisterLimit fails with ErrRegistered until the first is
// unregistered.
func (m *Metrics) RegisterLimit(src LimitDecisions) (metric.Registration, error) {
	if src == nil {
		return nil, errors.New("shedotel: RegisterLimit: nil source")
	}
	return m.claimed(&m.limitOn, func() (metric.Registration, error) { return m.registerLimit(src) })
}

func (m *Metrics) registerLimit(src LimitDecisions) (metric.Registration, error) {
	decisions, err := m.meter.Int64ObservableCounter("shedkit.admission.limit.decisions", metric.WithUnit("{window}"),
		metric.WithDescription("Windows closed by the adaptive limit, by the reason of the decision they led to."))
	if err != nil {
		return nil, fmt.Errorf("shedotel: %w", err)
	}
	lim := AttrLimiter.String(m.name)
	sets := map[string]attribute.Set{}
	src.Decisions(func(reason string, _ uint64) {
		sets[reason] = attribute.NewSet(lim, AttrLimitReason.String(reason))
	})
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		src.Decisions(func(reason string, n uint64) {
			if s, ok := sets[reason]; ok {
				o.ObserveInt64(decisions, int64(n), metric.WithAttributeSet(s))
			}
		})
		return nil
	}, decisions)
}
