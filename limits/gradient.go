package limits

import (
	"math"
	"sync"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Defaults shared by Gradient and AIMD.
const (
	// DefaultInitialLimit is where a limit starts: 20, as Netflix's
	// Gradient2 and AIMD. Gradient leaves it quickly by slow start.
	DefaultInitialLimit = 20
	// DefaultMinLimit is the floor of a limit: 1. A floor such as
	// Gradient2's 20 cannot protect a dependency that slowed down ten-fold
	// at 10 requests in flight; 1 keeps one unit of work (and so samples)
	// flowing while the dependency recovers.
	DefaultMinLimit = 1
	// DefaultMaxLimit caps a limit at 10,000. A limit only grows while
	// the work in flight uses it, and never past twice that work, so the
	// cap is a guard against runaway, not the working point; the 200 of
	// Netflix's Gradient2 and the 1,000 of go-concurrency-limits' are
	// below the real concurrency of services that wait on slow or
	// widely replicated dependencies (a thousand servers of 1 s each).
	DefaultMaxLimit = 10000
	// DefaultBackoff multiplies a limit on drops (at least; more drops
	// cut deeper) and, for Gradient, on a latency above LatencyCeiling:
	// 0.9, Netflix AIMD's backoff ratio. Repeated every window, it halves
	// the limit in 7 windows.
	DefaultBackoff = 0.9
	// DefaultMinUtilization: a limit grows only in windows whose largest
	// in-flight count reached half of it, as Netflix's Gradient2 and Vegas
	// ("don't grow the limit if we are app limited"). A limit that is not
	// used has learned nothing about capacity.
	DefaultMinUtilization = 0.5
)

// Defaults of GradientConfig.
const (
	// DefaultTolerance is how much the window latency may exceed the
	// baseline before the limit shrinks: 1.2, Envoy's adaptive concurrency
	// buffer (25%) rather than Netflix Gradient2's 1.5. At 1.5 a saturated
	// dependency keeps up to half its service time of queueing in front of
	// it, which the user waits for; the baseline and the window's own
	// noise (Significance) already keep 1.2 clear of chance.
	DefaultTolerance = 1.2
	// DefaultSmoothing is the share of the gradient's cut applied per
	// window: 0.5. Netflix uses 0.2 and applies it per sample (or per
	// window under a WindowedLimit): with a tolerance of 1.5, a latency
	// that doubles then cuts only 5% per window, 40% after 10 windows.
	// 0.5 cuts 12.5% per window at double latency, and the gradient's
	// clamp at 0.5 bounds any single cut to 25%.
	DefaultSmoothing = 0.5
	// DefaultGrowth multiplies the limit per window during slow start and
	// while recovering to the limit that held before congestion: 2, as TCP
	// slow start doubles per round trip. From 20, slow start passes 500 in
	// 5 windows, where Gradient2's +0.8 per window needs 600 windows.
	DefaultGrowth = 2.0
	// DefaultRelearnWindows is how many windows a congestion episode holds
	// the limit, once cutting has stopped helping, before it re-learns the
	// baseline: 1. Cutting stops helping when the in-flight work fell by
	// 40% since the episode began and throughput (in flight / latency, by
	// Little's law) fell with it: queueing that we cause falls when we
	// admit less, latency that does not is the dependency's new normal.
	// The hold already waits for evidence, so re-learning need not wait
	// long: every held window serves less than the dependency could.
	DefaultRelearnWindows = 1
	// DefaultBaselineWindows is the length of the exponential averages of
	// the baseline latency, its window-to-window spread and the background
	// drop rate: 20 windows, long enough to average out the noise of a
	// heavy tail, short enough to follow a day's drift. It is also how
	// many unused windows in a row shrink an untested limit.
	DefaultBaselineWindows = 20
	// DefaultSignificance is how many standard errors a window's latency
	// (or drop rate) must exceed the baseline (or background) by before it
	// counts as congestion: 3, the limit of a control chart. The errors
	// are the window's own: of its median, from the spread of its
	// latencies and its sample count, and binomial for its drops. A
	// service whose latency is heavy-tailed or whose windows hold few
	// samples varies a lot from window to window by chance alone; a fixed
	// tolerance cut such a service's limit in window after window while
	// nothing was wrong. 3 standard errors are crossed by chance in about
	// one window in 700.
	DefaultSignificance = 3.0
)

// GradientConfig configures a [Gradient]. Zero fields take the defaults.
type GradientConfig struct {
	// InitialLimit is the limit before the first window closes. Default
	// DefaultInitialLimit, clamped into [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit. Defaults DefaultMinLimit and
	// DefaultMaxLimit (or InitialLimit or MinLimit, if larger); MaxLimit
	// is at most shed.MaxLimit.
	MinLimit int
	MaxLimit int

	// Tolerance is the least ratio of a window's latency to the baseline
	// that counts as congestion, > 1. Default DefaultTolerance. Where
	// windows vary more than that by chance, Significance sets a higher
	// threshold.
	Tolerance float64
	// Significance is how many standard errors of the window's own
	// median (and of its drop rate) a window must exceed the baseline
	// (and the background drop rate) by to count as congestion, > 0.
	// Default DefaultSignificance.
	Significance float64
	// Smoothing is the share of the gradient's cut applied per window,
	// in (0, 1]. Default DefaultSmoothing.
	Smoothing float64
	// QueueAllowance returns how much the limit grows in a window without
	// congestion once slow start is over. It should grow slower than the
	// limit. Default DefaultQueueAllowance.
	QueueAllowance func(limit float64) float64
	// Growth multiplies the limit per window in slow start, > 1. Default
	// DefaultGrowth.
	Growth float64

	// LatencyCeiling, when set, is an absolute latency target: a window
	// whose latency exceeds it cuts the limit by Backoff, whatever the
	// baseline. Use it when a stable but slow dependency is still too slow
	// (a latency SLO). Zero means no ceiling.
	LatencyCeiling time.Duration
	// Backoff multiplies the limit on drops beyond the background (at
	// least: drops cut in proportion to their excess share, by half at
	// most beyond Backoff) or a latency above LatencyCeiling, in (0, 1).
	// Default DefaultBackoff.
	Backoff float64
	// DropTolerance is a share of a window's work (timed successes plus
	// drops) that drops may reach without counting as congestion, in
	// [0, 1), on top of the background drop rate that Gradient learns.
	// Default 0. With the wall-clock API only a subset of successes is
	// timed, so the share is overstated at high traffic. Drops that crowd
	// at the top of the limit count whatever their share (see the
	// package documentation).
	DropTolerance float64
	// MinUtilization: the limit grows only in windows whose largest
	// in-flight count reached MinUtilization x limit, in (0, 1], and not
	// past that count / MinUtilization. Default DefaultMinUtilization.
	MinUtilization float64

	// RelearnWindows and BaselineWindows tune the baseline (see
	// DefaultRelearnWindows and DefaultBaselineWindows), >= 1.
	RelearnWindows  int
	BaselineWindows int

	// Window configures the sampling windows. Gradient compares the
	// windows' median latency with the baseline unless Window.Quantile
	// selects another quantile.
	Window WindowConfig

	// Trace, when set, receives every closed window: what it showed, what
	// the limit had learned before it and what the limit decided (see
	// WindowTrace). It runs under the limit's lock, on the goroutine whose
	// sample closed the window, once a window (a second by default): it
	// must return quickly and must not call State, Decisions or Observe (nor
	// release a permit of a Limiter that this limit feeds: its sample would
	// reach Observe and wait for the lock for ever).
	Trace func(WindowTrace)
}

// GradientState is a snapshot of a Gradient's internals, for metrics,
// simulation plots and tests.
type GradientState struct {
	Limit float64 // the limit before rounding down (the floor while closed)
	// Closed reports a closed limit: Limit() is 0 and shed admits only
	// probes (see Probe).
	Closed bool
	// Baseline is the learned latency without congestion (the windows'
	// median, or the configured quantile); zero until the first window
	// with enough timed successes. Spread is its window-to-window
	// standard deviation, in log space.
	Baseline time.Duration
	Spread   float64
	// Background is the learned share of work dropped without
	// congestion.
	Background float64
	// Reason says what the last window did to the limit, and why.
	Reason    Reason
	SlowStart bool
	Windows   uint64 // windows observed
	Relearned uint64 // times the baseline was re-learned upwards
}

// DefaultQueueAllowance is Gradient's default QueueAllowance: the square
// root of the limit, as Envoy's adaptive concurrency (Netflix uses a
// constant 4, which ramps up too slowly at high limits), but at most a
// tenth of the limit and at least one. A limit under 100 that grew by its
// square root (by half at 4) overshot a dependency shared by many
// replicas before any window could show the queue it made, and every
// replica cut at once.
func DefaultQueueAllowance(limit float64) float64 {
	return min(math.Sqrt(limit), max(1, limit/10))
}

// Gradient is an adaptive concurrency limit driven by latency and drops,
// in the family of Netflix's Gradient2. Each window, it compares the
// latency with a learned baseline and the drop rate with a learned
// background, each against its usual variation; when either is clearly
// above, it cuts the limit (in proportion to the excess latency or drop
// share), unless cutting has stopped reducing them, in which
// case it takes them as the dependency's new normal. Otherwise it grows
// the limit while the limit is in use: multiplicatively in slow start and
// while it binds with no queue at all, by QueueAllowance otherwise. See
// the package documentation for the rules and their reasons.
//
// Limit is an atomic load. Observe is lock-free and allocation-free; the
// sample that closes a window updates the limit under a mutex.
//
// Make one with NewGradient. A zero Gradient (&limits.Gradient{}) reports
// a limit of -1 and never adapts; shed.New refuses it as a Source
// (shed.ErrInvalidConfig).
type Gradient struct {
	closable // the limit enforced, 0 while closed
	win      *Window

	cfg GradientConfig

	mu sync.Mutex
	st gradientState
}

// NewGradient returns a Gradient configured by cfg.
func NewGradient(cfg GradientConfig) (*Gradient, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Gradient{win: newWindow(cfg.Window), cfg: cfg}
	g.st = gradientState{
		limit:     float64(cfg.InitialLimit),
		slowStart: true,
		det: newDetector(cfg.Tolerance, cfg.Significance, cfg.DropTolerance, cfg.LatencyCeiling,
			cfg.MinUtilization, cfg.BaselineWindows, cfg.Window),
	}
	g.st.det.queueTeaches = true
	g.set(int64(cfg.InitialLimit))
	return g, nil
}

func (cfg GradientConfig) withDefaults() (GradientConfig, error) {
	var err error
	cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, err = limitRange("GradientConfig", cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, DefaultInitialLimit)
	if err != nil {
		return cfg, err
	}
	for _, f := range []struct {
		name      string
		v         *float64
		def       float64
		lo, hi    float64
		loIn, hiI bool
	}{
		{"Tolerance", &cfg.Tolerance, DefaultTolerance, 1, math.Inf(1), false, false},
		{"Significance", &cfg.Significance, DefaultSignificance, 0, math.Inf(1), false, false},
		{"Smoothing", &cfg.Smoothing, DefaultSmoothing, 0, 1, false, true},
		{"Growth", &cfg.Growth, DefaultGrowth, 1, math.Inf(1), false, false},
		{"Backoff", &cfg.Backoff, DefaultBackoff, 0, 1, false, false},
		{"MinUtilization", &cfg.MinUtilization, DefaultMinUtilization, 0, 1, false, true},
	} {
		if err := defaultFloat("GradientConfig."+f.name, f.v, f.def, f.lo, f.hi, f.loIn, f.hiI); err != nil {
			return cfg, err
		}
	}
	if math.IsNaN(cfg.DropTolerance) || cfg.DropTolerance < 0 || cfg.DropTolerance >= 1 {
		return cfg, configError("GradientConfig.DropTolerance", "must be in [0, 1), got %v", cfg.DropTolerance)
	}
	if cfg.LatencyCeiling < 0 {
		return cfg, configError("GradientConfig.LatencyCeiling", "must be >= 0, got %v", cfg.LatencyCeiling)
	}
	if cfg.QueueAllowance == nil {
		cfg.QueueAllowance = DefaultQueueAllowance
	}
	if err := defaultInt("GradientConfig.RelearnWindows", &cfg.RelearnWindows, DefaultRelearnWindows); err != nil {
		return cfg, err
	}
	if err := defaultInt("GradientConfig.BaselineWindows", &cfg.BaselineWindows, DefaultBaselineWindows); err != nil {
		return cfg, err
	}
	cfg.Window, err = cfg.Window.withDefaults("GradientConfig.Window.")
	return cfg, err
}

// Limit returns the current limit, 0 while the limit is closed (see
// Probe). It is an atomic load.
func (g *Gradient) Limit() int { return g.current() }

// Probe implements shed.Prober: while the limit is closed, it admits one
// request per Window.MinDuration, counted from now or from the end of
// the last probe that was dropped, whichever is later.
func (g *Gradient) Probe(now time.Time) bool {
	return g.win != nil && g.probe(now, g.cfg.Window.MinDuration)
}

// Observe records a finished unit of work. The sample that closes a window
// updates the limit; while the limit is closed, a success reopens it. A
// zero Gradient (not made by NewGradient) ignores samples and reports a
// limit of -1, which shed.New refuses.
func (g *Gradient) Observe(s shed.Sample) {
	if g.win == nil {
		return
	}
	if g.closed() {
		g.observeClosed(s)
		return
	}
	if !s.Timed && !s.Dropped && s.Now.IsZero() {
		g.win.noteInFlight(s.InFlight) // the common untimed release, inlined
		return
	}
	var w WindowSummary
	if g.win.observe(s, &w) {
		g.update(&w)
	}
}

// State returns a snapshot of the Gradient's internals.
func (g *Gradient) State() GradientState {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &g.st
	out := GradientState{
		Limit: st.limit, Spread: st.det.base.spread(), Background: st.det.bg.rate(),
		Reason: st.reason, SlowStart: st.slowStart, Windows: st.windows, Relearned: st.relearned,
		Closed: g.closed(),
	}
	if st.det.base.learned() {
		out.Baseline = time.Duration(st.det.base.value())
	}
	return out
}

// Decisions calls f with the number of windows that each reason decided
// so far (shed/shedotel exports them as shedkit.admission.limit.decisions).
func (g *Gradient) Decisions(f func(reason string, windows uint64)) {
	if g == nil {
		return // a failed NewGradient's result, registered by mistake
	}
	g.mu.Lock()
	d := g.st.decisions
	g.mu.Unlock()
	d.each(f)
}

// update applies one closed window: its signals, the decision they lead
// to, and what the window teaches.
func (g *Gradient) update(w *WindowSummary) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.st.det.read(w, g.st.limit)
	d := g.decide(&s)
	var t WindowTrace
	if g.cfg.Trace != nil {
		t = g.st.det.trace(w, &s, g.st.limit, d.reason)
	}
	g.apply(&s, &d)
	g.enforce(g.st.limit, d.reason, w.End, g.cfg.Window.MinDuration)
	g.win.setCrowd(g.st.limit)
	if g.cfg.Trace != nil {
		t.Next = g.st.limit
		if d.reason == ReasonClose {
			t.Next = 0
		}
		g.cfg.Trace(t)
	}
}

// observeClosed takes a sample while the limit is closed: a drop delays
// the next probe, a success reopens the limit at its floor.
func (g *Gradient) observeClosed(s shed.Sample) {
	if !g.reopens(s, g.cfg.Window.MinDuration) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed() {
		return
	}
	st := &g.st
	st.limit, st.reason = float64(g.cfg.MinLimit), ReasonReopen
	st.decisions[ReasonReopen]++
	g.set(int64(st.limit))
}

// defaultFloat validates *f in (lo, hi) (bounds included when loIn/hiIn),
// after replacing zero with def.
func defaultFloat(field string, f *float64, def, lo, hi float64, loIn, hiIn bool) error {
	if *f == 0 {
		*f = def
	}
	v := *f
	ok := finite(v) && (v > lo || (loIn && v == lo)) && (v < hi || (hiIn && v == hi))
	if !ok {
		l, r := "(", ")"
		if loIn {
			l = "["
		}
		if hiIn {
			r = "]"
		}
		return configError(field, "must be in %s%v, %v%s, got %v", l, lo, hi, r, v)
	}
	return nil
}

func defaultInt(field string, n *int, def int) error {
	if *n < 0 {
		return configError(field, "must be >= 1, got %d", *n)
	}
	if *n == 0 {
		*n = def
	}
	return nil
}
