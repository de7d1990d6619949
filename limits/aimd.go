package limits

import (
	"math"
	"sync"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of AIMDConfig that differ from Gradient's.
const (
	// DefaultIncrease is AIMD's additive step per window: 1, as Netflix's
	// AIMD.
	DefaultIncrease = 1
	// DefaultDropTolerance: a window is congested when more than 15% of
	// its work was dropped, beyond the background it learned. Netflix's
	// AIMD cuts on any drop, which turns the tail of a slow dependency
	// into a spiral: at ten times its usual latency a dependency answers
	// some requests after their deadline however few are in flight, and
	// cutting the limit does not fix that. Drops caused by the limit
	// itself, work queued past its deadline, climb to most of a window
	// within a window or two, far above the tolerance.
	DefaultDropTolerance = 0.15
	// DefaultAIMDMinUtilization: AIMD grows only in windows whose largest
	// in-flight count reached 75% of its limit. The headroom between the
	// work in flight and the limit is what a surge can pile onto the
	// dependency before the first congested window, and AIMD's cuts are
	// gentler than Gradient's, so it keeps less headroom than Gradient's
	// 0.5; some is still needed, because a dependency that slows holds
	// more work in flight at the same throughput.
	DefaultAIMDMinUtilization = 0.75
	// DefaultAIMDLatencyTolerance: AIMD counts a window as congested when
	// its latency is more than twice the baseline it learned (and clearly
	// above its noise): a queue as long as the work itself. AIMD cuts by
	// Backoff at each such window, where Gradient cuts in proportion to
	// the excess, so it needs the clearer signal.
	DefaultAIMDLatencyTolerance = 2.0
)

// AIMDConfig configures an [AIMD] limit. Zero fields take the defaults.
type AIMDConfig struct {
	// InitialLimit is the limit before the first window closes. Default
	// DefaultInitialLimit, clamped into [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit. Defaults DefaultMinLimit and
	// DefaultMaxLimit (or InitialLimit or MinLimit, if larger); MaxLimit
	// is at most shed.MaxLimit.
	MinLimit int
	MaxLimit int
	// Increase is added to the limit after a window without congestion in
	// which the limit was in use, >= 1. Default DefaultIncrease.
	Increase int
	// Backoff multiplies the limit after a congested window, in (0, 1).
	// Default DefaultBackoff. Drops beyond the background cut deeper, in
	// proportion to their excess share, by half at most: cut by a tenth at a
	// time, a limit far above the knee stays above it for several windows,
	// and each drops that share of its work.
	Backoff float64
	// Growth multiplies the limit per window in slow start, >= 1; 1 turns
	// slow start off (Netflix's AIMD). Default DefaultGrowth. Slow start
	// runs from the start until the first congested window or the first
	// window in which the limit is not in use, never past the in-flight
	// peak / MinUtilization unless that peak reached the limit (it is then
	// censored: the demand may be any larger); and, with LatencyThreshold set (no
	// learned baseline), after a run of congested windows, from the first
	// window in use without congestion back up to the limit the run's
	// first cut left (TCP's slow start threshold): a burst of timeouts
	// from a slow dependency would otherwise leave the limit at its
	// minimum and growing by Increase per window for minutes after the
	// dependency recovered. With a learned baseline, regrowth at the
	// baseline's latency finds a recovered dependency instead, and a
	// return to the first cut would re-admit the queue the cuts removed.
	Growth float64
	// LatencyThreshold selects the latency signal. Zero (the default):
	// a window whose median latency exceeds LatencyTolerance x a learned
	// baseline, and clearly exceeds its own noise, is congested; as for
	// Gradient, a latency that admitting less does not reduce becomes the
	// new baseline instead of cutting the limit to its minimum. Positive:
	// a fixed threshold (a latency objective): a window above it is
	// congested, whatever the dependency does. Negative: no latency
	// signal, drops alone (Netflix's AIMD).
	LatencyThreshold time.Duration
	// LatencyTolerance is the ratio to the learned baseline above which
	// a window's latency is congestion, > 1. Default
	// DefaultAIMDLatencyTolerance.
	LatencyTolerance float64
	// DropTolerance is the share of a window's units of work that may be
	// drops without the window counting as congested, < 1. Default
	// DefaultDropTolerance; a negative value tolerates none (it does not
	// turn drops off). Above it, drops count only when clearly above the
	// background rate learned from windows without congestion. Drops
	// that crowd at the top of the limit count whatever their share (see
	// the package documentation).
	DropTolerance float64
	// MinUtilization: the limit grows only in windows whose largest
	// in-flight count reached MinUtilization x limit, in (0, 1]. Default
	// DefaultAIMDMinUtilization.
	MinUtilization float64
	// Window configures the sampling windows.
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

// AIMD is a concurrency limit with additive increase while the limit is
// in use and nothing is congested, and multiplicative decrease on
// congestion: drops clearly above their background that the limit
// admitted (read as Gradient reads them), or latency clearly above its
// baseline (see LatencyThreshold). It is simpler and more
// predictable than Gradient, and probes slowly (Increase per window). It
// grows multiplicatively (slow start) until its first congestion, so that
// a service at 300 in flight is not throttled for minutes after a start
// from InitialLimit, and while the work in flight fills the limit at the
// latency of its learned baseline.
//
// Limit is an atomic load. Observe is lock-free and allocation-free; the
// sample that closes a window updates the limit under a mutex.
//
// Make one with NewAIMD. A zero AIMD (&limits.AIMD{}) reports a limit of
// -1 and never adapts; shed.New refuses it as a Source
// (shed.ErrInvalidConfig).
type AIMD struct {
	closable // the limit enforced, 0 while closed
	win      *Window
	cfg      AIMDConfig

	mu        sync.Mutex
	cur       float64
	slowStart bool
	congested bool    // the latest window with samples was congested
	restore   float64 // the limit the first cut of the latest run of congested windows left
	det       detector
	ep        episode
	reason    Reason
	decisions decisions
	unused    unusedRun
}

// Decisions calls f with the number of windows that each reason decided
// so far (shed/shedotel exports them as shedkit.admission.limit.decisions).
func (a *AIMD) Decisions(f func(reason string, windows uint64)) {
	if a == nil {
		return // a failed NewAIMD's result, registered by mistake
	}
	a.mu.Lock()
	d := a.decisions
	a.mu.Unlock()
	d.each(f)
}

// NewAIMD returns an AIMD limit configured by cfg.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &AIMD{win: newWindow(cfg.Window), cfg: cfg, cur: float64(cfg.InitialLimit), slowStart: cfg.Growth > 1}
	a.det = newDetector(cfg.LatencyTolerance, DefaultSignificance, max(cfg.DropTolerance, 0), 0,
		cfg.MinUtilization, DefaultBaselineWindows, cfg.Window)
	a.det.anyDrop = cfg.DropTolerance < 0
	switch {
	case cfg.LatencyThreshold > 0:
		a.det.latency, a.det.ceiling = false, cfg.LatencyThreshold
	case cfg.LatencyThreshold < 0:
		a.det.latency = false
	}
	a.set(int64(cfg.InitialLimit))
	return a, nil
}

func (cfg AIMDConfig) withDefaults() (AIMDConfig, error) {
	var err error
	cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, err = limitRange("AIMDConfig", cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, DefaultInitialLimit)
	if err != nil {
		return cfg, err
	}
	if err := defaultInt("AIMDConfig.Increase", &cfg.Increase, DefaultIncrease); err != nil {
		return cfg, err
	}
	if err := defaultFloat("AIMDConfig.Backoff", &cfg.Backoff, DefaultBackoff, 0, 1, false, false); err != nil {
		return cfg, err
	}
	if cfg.Growth == 0 {
		cfg.Growth = DefaultGrowth
	}
	if !finite(cfg.Growth) || cfg.Growth < 1 {
		return cfg, configError("AIMDConfig.Growth", "must be >= 1, got %v", cfg.Growth)
	}
	if err := defaultFloat("AIMDConfig.MinUtilization", &cfg.MinUtilization, DefaultAIMDMinUtilization, 0, 1, false, true); err != nil {
		return cfg, err
	}
	if err := defaultFloat("AIMDConfig.LatencyTolerance", &cfg.LatencyTolerance, DefaultAIMDLatencyTolerance, 1, math.Inf(1), false, false); err != nil {
		return cfg, err
	}
	switch {
	case math.IsNaN(cfg.DropTolerance) || math.IsInf(cfg.DropTolerance, -1) || cfg.DropTolerance >= 1:
		return cfg, configError("AIMDConfig.DropTolerance", "must be < 1 (negative for none), got %v", cfg.DropTolerance)
	case cfg.DropTolerance == 0:
		cfg.DropTolerance = DefaultDropTolerance
	case cfg.DropTolerance < 0:
		cfg.DropTolerance = -1 // normalized: any drop
	}
	cfg.Window, err = cfg.Window.withDefaults("AIMDConfig.Window.")
	return cfg, err
}

// Limit returns the current limit, 0 while the limit is closed (see
// Probe). It is an atomic load.
func (a *AIMD) Limit() int { return a.current() }

// Probe implements shed.Prober, as Gradient's does.
func (a *AIMD) Probe(now time.Time) bool {
	return a.win != nil && a.probe(now, a.cfg.Window.MinDuration)
}

// Observe records a finished unit of work. The sample that closes a window
// updates the limit; while the limit is closed, a success reopens it. A
// zero AIMD (not made by NewAIMD) ignores samples and reports a limit of
// -1, which shed.New refuses.
func (a *AIMD) Observe(s shed.Sample) {
	if a.win == nil {
		return
	}
	if a.closed() {
		a.observeClosed(s)
		return
	}
	if !s.Timed && !s.Dropped && s.Now.IsZero() {
		a.win.noteInFlight(s.InFlight) // the common untimed release, inlined
		return
	}
	var w WindowSummary
	if a.win.observe(s, &w) {
		a.update(&w)
	}
}

// AIMDState is a snapshot of an AIMD's internals.
type AIMDState struct {
	Limit float64 // the limit before rounding down (the floor while closed)
	// Closed reports a closed limit, as GradientState.Closed.
	Closed bool
	// Baseline is the learned latency without congestion (zero until
	// learned, or with LatencyThreshold set); Background the learned share
	// of work dropped without congestion.
	Baseline   time.Duration
	Background float64
	Reason     Reason
	SlowStart  bool
}

// State returns a snapshot of the AIMD's internals.
func (a *AIMD) State() AIMDState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := AIMDState{Limit: a.cur, Background: a.det.bg.rate(), Reason: a.reason, SlowStart: a.slowStart,
		Closed: a.closed()}
	if a.det.latency && a.det.base.learned() {
		st.Baseline = time.Duration(a.det.base.value())
	}
	return st
}

func (a *AIMD) update(w *WindowSummary) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.det.read(w, a.cur)
	d := a.decide(&s)
	var t WindowTrace
	if a.cfg.Trace != nil {
		t = a.det.trace(w, &s, a.cur, d.reason)
	}
	a.ep, a.reason = d.ep, d.reason
	a.decisions[d.reason]++
	a.unused.note(d.reason == ReasonUnused, &s, a.det.base.span)
	if d.reason == ReasonRelearn {
		a.det.relearn(&s, d.relearnLat, d.relearnDrops, d.relearnN)
	} else {
		a.det.learn(&s)
	}
	a.cur = min(max(d.limit, float64(a.cfg.MinLimit)), float64(a.cfg.MaxLimit))
	a.enforce(a.cur, d.reason, w.End, a.cfg.Window.MinDuration)
	a.win.setCrowd(a.cur)
	if a.cfg.Trace != nil {
		t.Next = a.cur
		if d.reason == ReasonClose {
			t.Next = 0
		}
		a.cfg.Trace(t)
	}
}

// observeClosed is Gradient's, for AIMD.
func (a *AIMD) observeClosed(s shed.Sample) {
	if !a.reopens(s, a.cfg.Window.MinDuration) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed() {
		return
	}
	a.cur, a.reason = float64(a.cfg.MinLimit), ReasonReopen
	a.decisions[ReasonReopen]++
	a.set(int64(a.cur))
}

// decide is AIMD's policy: from a window's signals, the next limit and
// the reason. It changes nothing but the slow start and congestion-run
// bookkeeping.
func (a *AIMD) decide(s *signals) decision {
	c := &a.cfg
	lim := a.cur
	ep := a.ep
	// As Gradient's: an episode begins with congestion and lasts while
	// the limit binds.
	if !s.congested() && !(ep.active && s.binding && s.hasLat) {
		return a.grow(s)
	}
	if a.det.draining(s, lim) {
		return decision{limit: lim, reason: ReasonDrain, ep: ep}
	}
	if s.dead {
		d := deadDecision(s, &a.det, ep, lim, float64(c.MinLimit), c.Backoff)
		if !a.congested {
			a.restore = d.limit
		}
		a.congested, a.slowStart = true, false
		return d
	}
	prev := ep
	atFloor := lim <= float64(c.MinLimit)
	if !s.ceilCong && ep.observe(s, atFloor, epRules{}) == epHold {
		// Cutting stopped helping: the latency (or drops) are the
		// dependency's, as Gradient finds them.
		if ep.held > DefaultRelearnWindows {
			return decision{limit: max(lim, ep.knee), reason: ReasonRelearn,
				relearnLat: ep.heldLat(s), relearnDrops: ep.holdDrops, relearnN: ep.holdN}
		}
		return decision{limit: lim, reason: ReasonHold, ep: ep}
	}
	if !s.congested() {
		if d, ok := ep.afterCut(s, prev, lim, c.Backoff, aimdQueueCutKeep, atFloor); ok {
			return d
		}
		return a.grow(s)
	}
	next := lim * c.Backoff
	if s.dropCong {
		next = lim * a.det.dropCut(s, c.Backoff)
	}
	if !a.congested {
		a.restore = next
	}
	a.congested, a.slowStart = true, false
	reason := ReasonCutLatency
	switch {
	case s.dropCong:
		reason = s.dropReason()
	case s.ceilCong:
		reason = ReasonCutCeiling
	}
	return decision{limit: next, reason: reason, ep: ep}
}

// grow returns the decision after a window without congestion.
func (a *AIMD) grow(s *signals) decision {
	c := &a.cfg
	lim := a.cur
	if s.n == 0 {
		return decision{limit: lim, reason: ReasonIdle}
	}
	a.congested = false
	if !s.used {
		// The limit outgrew the demand: slow start has found it, and
		// from here on a surge must earn its capacity step by step
		// (drops show congestion late, at a deadline).
		a.slowStart = false
		// Headroom no window tested for a span shrinks (see unusedRun).
		if capAt, ok := a.unused.decayed(s, a.det.base.span, c.MinUtilization); ok {
			lim = min(lim, capAt)
		}
		return decision{limit: lim, reason: ReasonUnused}
	}
	if a.det.latency && s.queueForming(a.det.censored) {
		// Growing by Increase until the latency doubles builds that much
		// queue first, and replicas sharing a dependency build it
		// together; Gradient holds here too.
		return decision{limit: lim, reason: ReasonQueue}
	}
	next, reason := lim+float64(c.Increase), ReasonGrow
	switch {
	case s.inFlight >= regrowShare*math.Floor(lim) && s.ratio <= 1+1e-9 && a.det.latency && a.det.unraised():
		// The work in flight fills the limit with no queue at all: the
		// dependency has room (it got back servers it had lost); grow by
		// slow start's factor, Growth, as Gradient regrows
		// multiplicatively too (by regrowth).
		next, reason = max(next, lim*c.Growth), ReasonRegrow
	case a.slowStart:
		// Never past the point where the work in flight would no longer
		// use the limit; a limit it filled may always grow by one. A
		// limit the work in flight reached hid the demand beyond it:
		// capped at its peak, slow start grew by 1/MinUtilization per
		// window, and a service of thousands in flight waited minutes
		// for its limit while windows last seconds.
		grown := lim * c.Growth
		if !s.binding {
			grown = min(grown, demandCap(s.peak, c.MinUtilization))
		}
		next, reason = max(next, grown), ReasonSlowStart
	case lim < a.restore && !a.det.latency:
		// Back to where congestion began (TCP's slow start threshold);
		// the demand cap does not apply, as that limit held before.
		// Only without a learned baseline: with one, regrow finds a
		// recovered dependency, and restoring would re-admit the queue
		// the cuts had just removed.
		next, reason = max(next, min(lim*c.Growth, a.restore)), ReasonRegrow
	}
	return decision{limit: next, reason: reason}
}
