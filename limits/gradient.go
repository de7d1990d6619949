package limits

import (
	"math"
	"sync"
	"sync/atomic"
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
	// DefaultMaxLimit caps a limit at 1,000, the maximum of
	// go-concurrency-limits' Gradient2 and Vegas. Netflix's 200 is below
	// the real concurrency of many services and would stop slow start
	// short of it; a limit only grows while it is used, so the cap is a
	// guard against runaway, not the working point.
	DefaultMaxLimit = 1000
	// DefaultBackoff multiplies a limit on a drop (and, for Gradient, on
	// a latency above LatencyCeiling): 0.9, Netflix AIMD's backoff ratio.
	// Repeated every window, it halves the limit in 7 windows.
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
	// buffer (25%) rather than Netflix Gradient2's 1.5. In simulation
	// (sim/, the built-in suite) 1.5 keeps up to half the service time of
	// queueing in front of a saturated dependency, which costs goodput in
	// spikes and slowdowns; windows average enough samples that 1.2 is
	// still far above their noise.
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
	// long: every held window serves less than the dependency could. One
	// window did best in simulation (sim/, the built-in suite).
	DefaultRelearnWindows = 1
	// DefaultBaselineWindows is the length of the exponential average that
	// tracks the baseline while the latency stays within 10% of it: 20
	// windows. Latency outside that band never drags the baseline up (it
	// is queueing, or a new normal that re-learning handles), which is
	// what keeps the limit from creeping as Gradient2's does.
	DefaultBaselineWindows = 20
)

// GradientConfig configures a [Gradient]. Zero fields take the defaults.
type GradientConfig struct {
	// InitialLimit is the limit before the first window closes. Default
	// DefaultInitialLimit, clamped into [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit. Defaults DefaultMinLimit and
	// DefaultMaxLimit; MaxLimit is at most shed.MaxLimit.
	MinLimit int
	MaxLimit int

	// Tolerance is the ratio of window latency to baseline latency above
	// which the limit shrinks, > 1. Default DefaultTolerance. A window
	// that measured its mean latency precisely (many samples, little
	// spread) while the limit binds uses a tighter threshold once the
	// baseline is averaged over BaselineWindows windows: 1 + 4 standard
	// errors of its mean, at least 1.1 (and never above Tolerance). The
	// limit then keeps less queue in front of a saturated dependency. Set
	// Tolerance to 1.1 or less for a fixed threshold.
	Tolerance float64
	// Smoothing is the share of the gradient's cut applied per window,
	// in (0, 1]. Default DefaultSmoothing.
	Smoothing float64
	// QueueAllowance returns how much the limit grows in a window without
	// congestion once slow start is over. It should grow slower than the
	// limit. Default math.Sqrt, as Envoy's adaptive concurrency (Netflix
	// uses a constant 4, which ramps up too slowly at high limits).
	QueueAllowance func(limit float64) float64
	// Growth multiplies the limit per window in slow start and in
	// recovery, > 1. Default DefaultGrowth.
	Growth float64

	// LatencyCeiling, when set, is an absolute latency target: a window
	// whose latency exceeds it cuts the limit by Backoff, whatever the
	// baseline. Use it when a stable but slow dependency is still too slow
	// (a latency SLO). Zero means no ceiling.
	LatencyCeiling time.Duration
	// Backoff multiplies the limit on a drop or a latency above
	// LatencyCeiling, in (0, 1). Default DefaultBackoff.
	Backoff float64
	// DropTolerance is the share of a window's samples (timed successes
	// plus drops) that may be drops without it counting as congestion,
	// in [0, 1). Default 0: any drop is congestion, as in Netflix's AIMD.
	// Raise it when a small background rate of drops is normal. With the
	// wall-clock API only a subset of successes is timed, so the share is
	// overstated at high traffic.
	DropTolerance float64
	// MinUtilization: the limit grows only in windows whose largest
	// in-flight count reached MinUtilization x limit, in (0, 1]. Default
	// DefaultMinUtilization.
	MinUtilization float64

	// RelearnWindows and BaselineWindows tune the baseline (see
	// DefaultRelearnWindows and DefaultBaselineWindows), >= 1.
	RelearnWindows  int
	BaselineWindows int

	// Window configures the sampling windows.
	Window WindowConfig
}

// Phase says what a Gradient is doing.
type Phase uint8

const (
	// PhaseSlowStart: growing by Growth per window until the first sign
	// of congestion.
	PhaseSlowStart Phase = iota
	// PhaseSteady: growing by QueueAllowance while there is no congestion.
	PhaseSteady
	// PhaseCongested: the last window was congested and cut the limit.
	PhaseCongested
	// PhaseRecovery: growing by Growth back to the limit that held before
	// the last congestion.
	PhaseRecovery
)

var phaseNames = [...]string{"slow-start", "steady", "congested", "recovery"}

// String returns the phase's name.
func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// GradientState is a snapshot of a Gradient's internals, for metrics,
// simulation plots and tests.
type GradientState struct {
	Limit float64 // the limit before rounding down
	// Baseline is the learned no-congestion latency; zero until the first
	// window with enough timed successes.
	Baseline time.Duration
	Phase    Phase
	// RecoverTo is the limit of the last window without congestion before
	// the latest congestion: recovery grows multiplicatively up to it.
	RecoverTo float64
	Windows   uint64 // windows observed
	Relearned uint64 // times the baseline was re-learned upwards
}

// Gradient is an adaptive concurrency limit driven by latency and drops,
// in the family of Netflix's Gradient2. It compares the latency of each
// window with a learned baseline and shrinks the limit when the ratio
// exceeds Tolerance, in proportion to the excess; drops and latency above
// LatencyCeiling cut it by Backoff. Without congestion it grows, but only
// while the limit is in use: multiplicatively in slow start and when
// recovering, by QueueAllowance otherwise. See the package documentation
// for how it differs from Gradient2.
//
// Limit is an atomic load. Observe is lock-free and allocation-free; the
// sample that closes a window updates the limit under a mutex.
type Gradient struct {
	limit atomic.Int64
	win   *Window

	cfg        GradientConfig
	minSamples int
	band       float64 // the baseline's noise band, relative
	ewma       float64 // baseline tracking factor

	mu sync.Mutex
	st gradientState
}

type gradientState struct {
	limit    float64
	baseline float64 // ns; 0 until learned
	// learned counts the windows averaged into the baseline since it was
	// first set or re-learned, up to BaselineWindows.
	learned int
	// healthy is the baseline before the first upward re-learning of a
	// run of them: when the dependency speeds up again to near it, the
	// baseline returns to it instead of settling on the queue we cause.
	healthy   float64
	slowStart bool
	congested bool
	lastGood  float64
	recoverTo float64
	windows   uint64
	relearned uint64
	// A latency episode: windows above the baseline's band. It is
	// anchored at the in-flight count and latency of its first window, or
	// of the last window whose latency improved.
	ep episode
	// congestedAt is the limit at which the last congestion began.
	congestedAt float64
	// The last window cut the limit, with these signals.
	cutLast  bool
	cutRatio float64
	cutDrop  float64
	// dropBase is a background drop rate re-learned when admitting less
	// did not reduce drops; it recedes as soon as drops do.
	dropBase float64
	// dropFloor: while a background drop rate is known, drops alone (at
	// a normal latency) do not cut the limit below it (see
	// dropFloorShare).
	dropFloor float64
	// allDropped counts consecutive windows in which nearly all work
	// was dropped and too little succeeded to measure a latency.
	allDropped int
	lastPhase  Phase
}

// NewGradient returns a Gradient configured by cfg.
func NewGradient(cfg GradientConfig) (*Gradient, error) {
	var err error
	cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, err = limitRange("GradientConfig", cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, DefaultInitialLimit)
	if err != nil {
		return nil, err
	}
	if err := defaultFloat("GradientConfig.Tolerance", &cfg.Tolerance, DefaultTolerance, 1, math.Inf(1), false, false); err != nil {
		return nil, err
	}
	if err := defaultFloat("GradientConfig.Smoothing", &cfg.Smoothing, DefaultSmoothing, 0, 1, false, true); err != nil {
		return nil, err
	}
	if err := defaultFloat("GradientConfig.Growth", &cfg.Growth, DefaultGrowth, 1, math.Inf(1), false, false); err != nil {
		return nil, err
	}
	if err := defaultFloat("GradientConfig.Backoff", &cfg.Backoff, DefaultBackoff, 0, 1, false, false); err != nil {
		return nil, err
	}
	if err := defaultFloat("GradientConfig.MinUtilization", &cfg.MinUtilization, DefaultMinUtilization, 0, 1, false, true); err != nil {
		return nil, err
	}
	if math.IsNaN(cfg.DropTolerance) || cfg.DropTolerance < 0 || cfg.DropTolerance >= 1 {
		return nil, configError("GradientConfig.DropTolerance", "must be in [0, 1), got %v", cfg.DropTolerance)
	}
	if cfg.LatencyCeiling < 0 {
		return nil, configError("GradientConfig.LatencyCeiling", "must be >= 0, got %v", cfg.LatencyCeiling)
	}
	if cfg.QueueAllowance == nil {
		cfg.QueueAllowance = math.Sqrt
	}
	if err := defaultInt("GradientConfig.RelearnWindows", &cfg.RelearnWindows, DefaultRelearnWindows); err != nil {
		return nil, err
	}
	if err := defaultInt("GradientConfig.BaselineWindows", &cfg.BaselineWindows, DefaultBaselineWindows); err != nil {
		return nil, err
	}
	cfg.Window, err = cfg.Window.withDefaults("GradientConfig.Window.")
	if err != nil {
		return nil, err
	}
	g := &Gradient{
		win:        newWindow(cfg.Window),
		cfg:        cfg,
		minSamples: cfg.Window.MinSamples,
		band:       min(0.1, (cfg.Tolerance-1)/2),
		ewma:       2 / float64(cfg.BaselineWindows+1),
	}
	g.st = gradientState{
		limit:     float64(cfg.InitialLimit),
		slowStart: true,
		lastGood:  float64(cfg.InitialLimit),
	}
	g.limit.Store(int64(cfg.InitialLimit))
	return g, nil
}

// Limit returns the current limit. It is an atomic load.
func (g *Gradient) Limit() int { return int(g.limit.Load()) }

// Observe records a finished unit of work. The sample that closes a window
// updates the limit.
func (g *Gradient) Observe(s shed.Sample) {
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
	return GradientState{
		Limit:     g.st.limit,
		Baseline:  time.Duration(g.st.baseline),
		Phase:     g.st.lastPhase,
		RecoverTo: g.st.recoverTo,
		Windows:   g.st.windows,
		Relearned: g.st.relearned,
	}
}

// update applies one closed window.
func (g *Gradient) update(w *WindowSummary) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &g.st
	st.windows++
	c := &g.cfg
	lim := st.limit

	hasLat := w.Samples >= g.minSamples && w.Samples > 0
	cur := max(float64(w.Latency), 1) // ns; a zero latency is possible in virtual time
	if hasLat && st.baseline == 0 {
		st.baseline = cur
	}
	ratio := 1.0
	if hasLat {
		ratio = cur / st.baseline
	}
	dropRate := 0.0
	if n := w.Samples + w.Drops; n > 0 {
		dropRate = float64(w.Drops) / float64(n)
	}
	if dropRate < st.dropBase {
		st.dropBase += 0.5 * (dropRate - st.dropBase) // the background recedes fast
		if st.dropBase < minBackgroundDrops {
			st.dropBase, st.dropFloor = 0, 0 // gone
		}
	}
	inFlight := float64(w.MaxInFlight)

	// Congestion signals. Drops are one unless DropTolerance or a
	// re-learned background rate explains them (with a margin for the
	// noise of a small window); latency above Tolerance x baseline is one;
	// a latency above the user's ceiling always is.
	dropSig := w.Drops > 0 && dropRate > g.dropThreshold(w.Samples+w.Drops)
	tol := g.tolerance(w)
	// The baseline's noise band stays within half the excess tolerated.
	band := min(g.band, (tol-1)/2)
	latSig := hasLat && ratio > tol
	ceilSig := hasLat && c.LatencyCeiling > 0 && w.Latency > c.LatencyCeiling
	if !dropSig && !latSig {
		st.ep = episode{}
	}
	if hasLat && !latSig {
		g.trackBaseline(cur, ratio, band)
	}

	switch {
	case (dropSig || latSig) && hasLat && dropRate <= maxBackgroundDrops &&
		st.ep.hold(cur, w.MeanInFlight, band, st.limit <= float64(c.MinLimit), w.Drops, w.Samples+w.Drops):
		// Admitting 40% less only cut throughput: the latency or the
		// drops are not ours. Hold the limit (cutting further would shed
		// work without helping) and, after RelearnWindows such windows,
		// accept them as the dependency's new normal and undo the cuts
		// that did not help: recovery grows back to the knee.
		g.congestion()
		if st.ep.held >= c.RelearnWindows {
			if latSig {
				if st.healthy == 0 {
					st.healthy = st.baseline
				}
				st.baseline, st.learned = cur, 1
			}
			if dropSig {
				st.dropBase = st.ep.dropRate()
				st.dropFloor = dropFloorShare * st.ep.holdIn
			}
			// Back to the knee at once: it was measured in this episode,
			// and doubling back to it only sheds work the dependency could
			// take (in simulation, the retry storm's goodput over seeds
			// 1-20 rose from 49.9% to 52.5%; the others did not move).
			st.recoverTo = st.ep.knee
			lim = max(lim, st.ep.knee)
			st.ep = episode{}
			st.relearned++
		}
		if ceilSig {
			lim *= c.Backoff
		}
	case (dropSig || latSig || ceilSig) && st.cutLast && ratio <= (1+band)*st.cutRatio && dropRate <= st.cutDrop && dropRate <= maxBackgroundDrops &&
		!(latSig && st.ep.queueIsOurs(w.MeanInFlight, cur)):
		// The window right after a cut mostly shows work admitted before
		// it (drops surface at the deadline, latency at completion): if
		// it is no worse than the window that caused the cut, wait for
		// the cut to take effect instead of cutting again for the same
		// congestion.
		g.congestion()
		st.cutLast = false
	case dropSig || latSig || ceilSig:
		g.congestion()
		// Apply the strongest cut the signals call for.
		cut := 1.0
		if dropSig || ceilSig {
			cut = c.Backoff
		}
		if st.allDropped > 0 && !hasLat && dropRate > allDroppedShare {
			// A second window in a row in which nearly everything timed
			// out: the work in flight is far beyond what the dependency
			// serves, and Backoff alone (10%) would take many windows to
			// get there. Cut as much as a latency far above the tolerance
			// would. (A slowdown's onset has one such window: work started
			// just before it; losing servers has several.)
			cut = min(cut, 1-c.Smoothing*0.5)
		}
		if latSig {
			gradient := max(0.5, tol/ratio)
			cut = min(cut, 1-c.Smoothing*(1-gradient))
			if st.ep.queueIsOurs(w.MeanInFlight, cur) {
				// Cutting shortened the queue and kept the throughput:
				// by Little's law the same throughput at Tolerance x the
				// baseline needs tol x in-flight / ratio. Go there, at
				// most halving per window, without waiting a window for
				// the last cut to show.
				cut = min(cut, max(0.5, tol*w.MeanInFlight/ratio/lim))
			}
		}
		lim *= cut
		if dropSig && !latSig && !ceilSig && dropRate <= maxBackgroundDrops {
			// Drops alone, at a normal latency, around a known background:
			// below where that background was measured they are the
			// background again (estimated from one window, so often too
			// low), and cutting on them would spiral down while nothing
			// is congested.
			lim = max(lim, min(st.limit, st.dropFloor))
		}
		st.cutLast, st.cutRatio, st.cutDrop = true, ratio, dropRate
	case !hasLat:
		// Nothing learned (too few timed successes): no reason to cut,
		// none to grow.
	default:
		st.congested = false
		st.lastGood = lim
		if lim < st.recoverTo {
			// Back to the limit that held before the congestion: it was
			// in use then, it need not be in use now to be restored.
			lim = min(lim*c.Growth, st.recoverTo)
			break
		}
		if inFlight < c.MinUtilization*lim {
			break // the limit is not in use: nothing learned about capacity
		}
		// Grow, but not past the point where the work in flight would no
		// longer use the limit: that would be headroom nobody asked for,
		// and a higher limit to cut down when the dependency slows.
		next := lim + g.allowance(lim)
		if lc := st.congestedAt; lc > 0 && lim >= plateauLow*lc && lim <= plateauHigh*lc {
			// Near the limit at which the last congestion began: probe
			// gently, as TCP CUBIC does around its last maximum. The
			// congestion shows a window late, so full steps there overshoot
			// into the queue and come back as drops.
			next = lim + max(1, g.allowance(lim)/plateauSlowdown)
		}
		if !st.slowStart && st.healthy == 0 && ratio <= 1 && inFlight >= bindingShare*lim {
			// The limit binds and the latency is at or below the healthy
			// baseline: no queue at all, so the dependency has room (it
			// got back servers it had lost). Grow multiplicatively, as
			// Envoy's gradient does below its minRTT, instead of by the
			// queue allowance.
			next = max(next, lim*cleanGrowth)
		}
		switch {
		case st.slowStart && ratio > 1+band:
			// Latency starts to rise: the knee is near, stop doubling.
			st.slowStart = false
		case st.slowStart:
			next = lim * c.Growth
		}
		lim = max(lim, min(next, inFlight/c.MinUtilization))
	}
	if !hasLat && dropRate > allDroppedShare {
		st.allDropped++
	} else {
		st.allDropped = 0
	}
	if lim >= st.limit {
		st.cutLast = false
	}
	lim = min(max(lim, float64(c.MinLimit)), float64(c.MaxLimit))
	st.limit = lim
	switch {
	case st.congested:
		st.lastPhase = PhaseCongested
	case st.slowStart:
		st.lastPhase = PhaseSlowStart
	case lim < st.recoverTo:
		st.lastPhase = PhaseRecovery
	default:
		st.lastPhase = PhaseSteady
	}
	g.limit.Store(int64(lim))
}

// tolerance is the latency ratio above which window w signals congestion:
// Tolerance, or less once the baseline is averaged over BaselineWindows
// windows, while the limit binds (the window's in-flight peak reached
// bindingShare of it) and w measured its mean latency precisely enough to
// tell a smaller excess from noise (toleranceZ standard errors), but never
// below minTolerance. Quantile windows keep Tolerance: the standard error
// is that of the mean. Well under the limit, a modest latency step (a
// deploy, a colder cache) is not queueing that the limit causes, and
// Tolerance leaves it alone.
func (g *Gradient) tolerance(w *WindowSummary) float64 {
	t := g.cfg.Tolerance
	if g.cfg.Window.Quantile == 0 && w.RelErr > 0 && g.st.learned >= g.cfg.BaselineWindows &&
		float64(w.MaxInFlight) >= bindingShare*g.st.limit {
		t = min(t, max(minTolerance, 1+toleranceZ*w.RelErr))
	}
	return t
}

// cleanGrowth multiplies a binding limit per window while the latency is
// at or below the healthy baseline. In simulation (sim/, seeds 1-20) it
// took the recovery after a ten-fold capacity loss from 12.7 s to 6.2 s
// and the retry storm's worst seed from 38.5% to 50.5%; the others did not
// move. 2 cost the interactive + batch scenario's worst seed 2.7 points; a
// threshold of 1.05 x the baseline instead of 1 cost it 2.8 points on
// average. A re-learned (slower) baseline does not count: there, growing
// fast cost the slowdown 3 points.
const cleanGrowth = 1.5

// toleranceZ and minTolerance bound the latency threshold of a precise
// window: 1 + 4 standard errors of its mean, at least 1.1. The limit
// settles where the latency reaches the threshold, so a tolerance of 1.2
// keeps about a fifth of the service time queued in front of a saturated
// dependency. In simulation (sim/, seeds 1-10, goodput during the trigger)
// the precise threshold took the 3x spike from 89.6% to 91.5% and
// interactive + batch at 3x from 92.9% to 95.0%, and left the slowdown,
// retry storm and LLM scenarios where they were. 1.08 gained a little more
// but leaves less room for latency that drifts with the request mix; a
// fixed tolerance that low over-cut on the noise of small windows (the LLM
// scenario fell to 80%), and a baseline taken from one window made it
// over-cut everywhere (hence the averaging of trackBaseline).
const (
	toleranceZ   = 4.0
	minTolerance = 1.1
	bindingShare = 0.9
)

// congestion ends slow start and, at the start of a congestion episode,
// remembers the last good limit as the recovery target.
func (g *Gradient) congestion() {
	st := &g.st
	if !st.congested {
		st.recoverTo = recoverShare * st.lastGood
		st.congestedAt = st.limit
		st.congested = true
	}
	st.slowStart = false
}

func (g *Gradient) allowance(lim float64) float64 {
	q := g.cfg.QueueAllowance(lim)
	if !(q > 0) || math.IsInf(q, 0) {
		return 0 // NaN, negative or infinite: grow by nothing
	}
	return q
}

// dropThreshold is the drop rate above which a window of n samples signals
// congestion: DropTolerance, or Tolerance x the re-learned background rate
// if higher, plus two standard errors of a rate measured on n samples, so
// that the noise of a small window around the background is not taken for
// congestion.
func (g *Gradient) dropThreshold(n int) float64 {
	q := max(g.cfg.DropTolerance, g.st.dropBase*g.cfg.Tolerance)
	if q == 0 || n == 0 {
		return q
	}
	return q + 2*math.Sqrt(q*(1-min(q, 1))/float64(n))
}

// allDroppedShare: a window without a latency that dropped more than this
// share of its work dropped nearly all of it. In simulation (sim/, seeds
// 1-20) cutting by the gradient's largest step from the second such window
// on took the goodput during a ten-fold capacity loss from 88.2% to 91.1%
// and left the other scenarios where they were.
const allDroppedShare = 0.9

// holdThroughput: a cut that leaves less than this share of the episode's
// best throughput has cut into useful work.
const holdThroughput = 0.85

// recoverShare of the last limit without congestion is where recovery
// from a congestion stops growing multiplicatively. Congestion shows a
// window late, so the last clean limit was often already too high.
const recoverShare = 0.8

// Growth slows to allowance / plateauSlowdown while the limit is between
// plateauLow and plateauHigh times the limit at which the last congestion
// began.
const (
	plateauLow      = 0.8
	plateauHigh     = 1.15
	plateauSlowdown = 4.0
)

// dropFloorShare of the mean in-flight count at which a background drop
// rate was re-learned (the held window's) is as low as drops alone, at a
// normal latency, cut the limit while that background lasts: there, they
// are that background again. It is measured on one window and so often
// too low (4% for a true 8%), and cuts on its noise took the limit from
// the knee to half of it in 30 windows. In simulation (sim/, the 10x
// slowdown over seeds 1-10) the floor raised the goodput during the
// slowdown from 88.8% to 89.9% on average and on the worst seed from 84.9%
// to 88.4%; 1.1 did better than 1.0 or 1.2.
const dropFloorShare = 1.1

// minBackgroundDrops: a re-learned background drop rate that recedes
// below it is gone.
const minBackgroundDrops = 0.005

// maxBackgroundDrops: a drop rate above it is never accepted as the
// dependency's background. When most work fails, admitting less at least
// wastes less of the dependency's capacity, and the floor still lets
// samples through to see it recover.
const maxBackgroundDrops = 0.5

// relearnCut is how much the in-flight work must fall, relative to the
// start of a congestion episode, before latency or drops count as not
// ours: half. A smaller cut would re-learn sooner in a dependency slowdown,
// but would give up on a doubled latency too early.
const relearnCut = 0.4

// episode follows one congestion: consecutive windows with a latency or
// drop signal. It decides when cutting has stopped helping. By Little's law
// a window's throughput is its in-flight work over its latency. Above the
// dependency's knee, admitting less leaves throughput where it was and
// shortens the queue, so the latency falls: the congestion is ours and the
// cuts are right. Below the knee, admitting less only loses throughput
// while the latency stays: that is not ours.
type episode struct {
	active   bool
	inFlight float64 // the most in flight in a window of the episode
	xMax     float64 // best throughput seen
	knee     float64 // least in flight with a throughput within 10% of the best
	held     int     // windows held (not cut); 0: cutting
	holdLat  float64 // latency when the hold began
	holdIn   float64 // mean in flight when the hold began
	// Drops and samples of the held windows: the background drop rate if
	// the hold ends in re-learning.
	holdDrops, holdN int
}

func (e *episode) dropRate() float64 {
	if e.holdN == 0 {
		return 0
	}
	return float64(e.holdDrops) / float64(e.holdN)
}

// queueIsOurs reports whether this episode has shown that the queue is
// ours: since it began the work in flight fell by oursCut (the window at
// hand, with inFlight in flight at latency cur, included) and the
// throughput did not.
func (e *episode) queueIsOurs(inFlight, cur float64) bool {
	return e.active && e.xMax > 0 && inFlight <= (1-oursCut)*e.inFlight && inFlight/cur >= 0.9*e.xMax
}

// oursCut is how much the work in flight must have fallen within an
// episode, at the same throughput, before Gradient cuts by Little's law
// instead of by the clamped gradient. In simulation (sim/, seeds 1-20) it
// took the goodput during a ten-fold capacity loss from 91.1% to 92.5%
// (the others moved by 0.2 points at most); 0.2 cost the slowdown 1.5
// points over seeds 1-10 (the fall of a slowdown's onset passes for a
// queue that drains).
const oursCut = 0.3

// hold takes one congested window of latency cur with inFlight in flight
// and reports whether the limit should hold instead of being cut: once the
// in-flight work was cut by relearnCut since the episode began (or the
// limit is at its floor) and that cut into throughput, the episode holds
// until re-learning. A hold ends, and cutting resumes, if the latency
// rises again beyond the band: new congestion on top of the old.
func (e *episode) hold(cur, inFlight, band float64, atFloor bool, drops, n int) bool {
	x := inFlight / cur
	if !e.active {
		// The window in which congestion begins mixes both regimes (fast
		// completions of earlier work, slow ones of new work), and Little's
		// law does not hold across such a change: its throughput estimate
		// can be well above what the dependency serves. As the best
		// throughput of the episode it made cuts that kept the throughput
		// look like cuts that lost it, and a dependency that had lost
		// capacity was re-learned as slower (in sim/'s capacity loss, one
		// seed in ten kept 72% of the ideal goodput instead of 86-89%).
		*e = episode{active: true, inFlight: inFlight, knee: inFlight}
		return false
	}
	e.inFlight = max(e.inFlight, inFlight)
	switch {
	case x > 1.1*e.xMax:
		e.xMax, e.knee = x, inFlight
	case x > e.xMax:
		e.xMax, e.knee = x, min(e.knee, inFlight)
	case x >= 0.9*e.xMax:
		e.knee = min(e.knee, inFlight)
	}
	if e.held > 0 {
		if cur > (1+band)*e.holdLat {
			*e = episode{active: true, inFlight: inFlight, xMax: x, knee: inFlight}
			return false
		}
		e.held++
		e.holdDrops += drops
		e.holdN += n
		return true
	}
	if (inFlight <= (1-relearnCut)*e.inFlight || atFloor) && x < holdThroughput*e.xMax {
		e.held, e.holdLat, e.holdIn, e.holdDrops, e.holdN = 1, cur, inFlight, drops, n
		return true
	}
	return false
}

// trackBaseline moves the baseline after a window without latency
// congestion, of latency cur (band is the noise band of this window):
//   - below the band after a re-learning, and nearer the healthy baseline
//     than the re-learned one: back to the healthy baseline at once;
//   - for the first BaselineWindows windows within the configured band
//     (after the baseline is first set or re-learned): their plain mean;
//   - below the band: down fast (half-way per window), so that a recovered
//     dependency is recognized within a few windows;
//   - within the band (or up to Tolerance): an exponential average that
//     absorbs noise but never follows latency above the band, which is
//     queueing or a new normal that the episode logic re-learns.
func (g *Gradient) trackBaseline(cur, ratio, band float64) {
	st := &g.st
	switch {
	case ratio < 1-band && st.healthy > 0 && cur*cur <= st.healthy*st.baseline:
		// The dependency is back nearer its healthy latency than the
		// re-learned one: take the healthy baseline back. Whatever is
		// left above it is queueing the limit causes (cut as usual) or a
		// new normal (re-learned as usual); the half-way steps below would
		// settle on the queue instead, since they follow the latency down
		// only as far as the limit lets it fall.
		st.baseline, st.healthy, st.learned = st.healthy, 0, g.cfg.BaselineWindows
	case st.learned < g.cfg.BaselineWindows && ratio <= 1+g.band:
		// Still learning: a plain mean of the windows so far, so that
		// one early window (or the one that re-learned it) does not set
		// the baseline for long.
		st.learned++
		st.baseline += (cur - st.baseline) / float64(st.learned)
	case ratio < 1-band:
		st.baseline += 0.5 * (cur - st.baseline)
	case ratio <= 1+band:
		st.baseline += g.ewma * (cur - st.baseline)
	}
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
