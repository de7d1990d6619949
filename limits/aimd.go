package limits

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of AIMDConfig that differ from Gradient's.
const (
	// DefaultIncrease is AIMD's additive step per window: 1, as Netflix's
	// AIMD.
	DefaultIncrease = 1
	// DefaultDropTolerance: a window is congested when more than 15% of
	// its work was dropped. Netflix's AIMD cuts on any drop, which turns
	// the tail of a slow dependency into a spiral: at ten times its usual
	// latency a dependency answers some requests after their deadline
	// however few are in flight, and cutting the limit does not fix
	// that (in sim/'s slowdown about 8% of requests do; with any drop,
	// AIMD fell to its minimum limit and kept 23% of the ideal goodput,
	// with 0.15 it keeps 93%). Drops caused by the limit itself, work
	// queued past its deadline, climb to most of a window within a window
	// or two, far above the tolerance.
	DefaultDropTolerance = 0.15
	// DefaultAIMDMinUtilization: AIMD grows only in windows whose largest
	// in-flight count reached 75% of its limit. AIMD has no latency
	// signal, and its drops come at deadlines, so the headroom between
	// the work in flight and the limit is what a surge can pile onto the
	// dependency before the first signal: with Gradient's 0.5 the limit
	// sits at twice the work in flight, and in sim/'s 3x spike AIMD kept
	// 68% of the ideal goodput; at 0.75, 89%. Some headroom still helps
	// when the dependency slows and in-flight work grows at the same
	// throughput (0.9 costs a quarter of the goodput during a retry storm).
	DefaultAIMDMinUtilization = 0.75
)

// AIMDConfig configures an [AIMD] limit. Zero fields take the defaults.
type AIMDConfig struct {
	// InitialLimit is the limit before the first window closes. Default
	// DefaultInitialLimit, clamped into [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit. Defaults DefaultMinLimit and
	// DefaultMaxLimit; MaxLimit is at most shed.MaxLimit.
	MinLimit int
	MaxLimit int
	// Increase is added to the limit after a window without congestion in
	// which the limit was in use, >= 1. Default DefaultIncrease.
	Increase int
	// Backoff multiplies the limit after a congested window, in (0, 1).
	// Default DefaultBackoff.
	Backoff float64
	// Growth multiplies the limit per window in slow start, >= 1; 1 turns
	// slow start off (Netflix's AIMD). Default DefaultGrowth. Slow start
	// runs from the start until the first congested window or the first
	// window in which the limit is not in use, never past the in-flight
	// peak / MinUtilization; and after a run of congested windows, from
	// the first window in use without congestion back up to the limit
	// the run's first cut left (TCP's slow start threshold). A run of
	// drops cuts the limit every window, but only its first window says
	// where congestion began: a burst of timeouts from a slow dependency
	// would otherwise leave the limit at its minimum and growing by
	// Increase per window for minutes after the dependency recovered.
	Growth float64
	// LatencyThreshold, when set, makes a window whose latency statistic
	// exceeds it congested. Zero means drops alone signal congestion
	// (Netflix's AIMD uses a 5 s timeout, rarely reached; set it to your
	// latency objective).
	LatencyThreshold time.Duration
	// DropTolerance is the share of a window's units of work that may be
	// drops without the window counting as congested, < 1. Default
	// DefaultDropTolerance; a negative value means none: any drop
	// congests a window (Netflix's AIMD).
	DropTolerance float64
	// MinUtilization: the limit grows only in windows whose largest
	// in-flight count reached MinUtilization x limit, in (0, 1]. Default
	// DefaultAIMDMinUtilization.
	MinUtilization float64
	// Window configures the sampling windows.
	Window WindowConfig
}

// AIMD is a loss-based concurrency limit: additive increase while the limit
// is in use and nothing is dropped, multiplicative decrease on drops or
// when the window latency exceeds LatencyThreshold. It is simpler and more
// predictable than Gradient, and probes slowly (Increase per window). It
// grows multiplicatively (slow start) until its first congestion, so that
// a service at 300 in flight is not throttled for minutes after a start
// from InitialLimit, and after a run of congested windows back up to the
// limit the run's first cut left.
//
// Limit is an atomic load. Observe is lock-free and allocation-free; the
// sample that closes a window updates the limit under a mutex.
type AIMD struct {
	limit atomic.Int64
	win   *Window
	cfg   AIMDConfig

	mu        sync.Mutex
	cur       float64
	slowStart bool
	congested bool    // the latest window with samples was congested
	restore   float64 // the limit the first cut of the latest run of congested windows left
}

// NewAIMD returns an AIMD limit configured by cfg.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	var err error
	cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, err = limitRange("AIMDConfig", cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit, DefaultInitialLimit)
	if err != nil {
		return nil, err
	}
	if err := defaultInt("AIMDConfig.Increase", &cfg.Increase, DefaultIncrease); err != nil {
		return nil, err
	}
	if err := defaultFloat("AIMDConfig.Backoff", &cfg.Backoff, DefaultBackoff, 0, 1, false, false); err != nil {
		return nil, err
	}
	if cfg.Growth == 0 {
		cfg.Growth = DefaultGrowth
	}
	if !finite(cfg.Growth) || cfg.Growth < 1 {
		return nil, configError("AIMDConfig.Growth", "must be >= 1, got %v", cfg.Growth)
	}
	if err := defaultFloat("AIMDConfig.MinUtilization", &cfg.MinUtilization, DefaultAIMDMinUtilization, 0, 1, false, true); err != nil {
		return nil, err
	}
	switch {
	case math.IsNaN(cfg.DropTolerance) || math.IsInf(cfg.DropTolerance, -1) || cfg.DropTolerance >= 1:
		return nil, configError("AIMDConfig.DropTolerance", "must be < 1 (negative for none), got %v", cfg.DropTolerance)
	case cfg.DropTolerance == 0:
		cfg.DropTolerance = DefaultDropTolerance
	case cfg.DropTolerance < 0:
		cfg.DropTolerance = -1 // normalized: any drop
	}
	if cfg.LatencyThreshold < 0 {
		return nil, configError("AIMDConfig.LatencyThreshold", "must be >= 0, got %v", cfg.LatencyThreshold)
	}
	cfg.Window, err = cfg.Window.withDefaults("AIMDConfig.Window.")
	if err != nil {
		return nil, err
	}
	a := &AIMD{win: newWindow(cfg.Window), cfg: cfg, cur: float64(cfg.InitialLimit), slowStart: cfg.Growth > 1}
	a.limit.Store(int64(cfg.InitialLimit))
	return a, nil
}

// Limit returns the current limit. It is an atomic load.
func (a *AIMD) Limit() int { return int(a.limit.Load()) }

// Observe records a finished unit of work. The sample that closes a window
// updates the limit.
func (a *AIMD) Observe(s shed.Sample) {
	if !s.Timed && !s.Dropped && s.Now.IsZero() {
		a.win.noteInFlight(s.InFlight) // the common untimed release, inlined
		return
	}
	var w WindowSummary
	if a.win.observe(s, &w) {
		a.update(&w)
	}
}

func (a *AIMD) update(w *WindowSummary) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &a.cfg
	lim := a.cur
	hasLat := w.Samples >= c.Window.MinSamples && w.Samples > 0
	dropSig := w.Drops > 0 && float64(w.Drops) > c.DropTolerance*float64(w.Samples+w.Drops)
	slow := hasLat && c.LatencyThreshold > 0 && w.Latency > c.LatencyThreshold
	switch {
	case dropSig || slow:
		lim *= c.Backoff
		if !a.congested {
			a.restore = lim
		}
		a.congested = true
		a.slowStart = false
	case w.Samples > 0 && float64(w.MaxInFlight) >= c.MinUtilization*lim:
		a.congested = false
		next := lim + float64(c.Increase)
		switch {
		case a.slowStart:
			next = max(next, min(lim*c.Growth, float64(w.MaxInFlight)/c.MinUtilization))
		case lim < a.restore:
			// Back to where congestion began; the demand cap does not
			// apply, as that limit held before.
			next = max(next, min(lim*c.Growth, a.restore))
		}
		lim = next
	case w.Samples > 0:
		// The limit outgrew the demand: slow start has found it, and
		// from here on a surge must earn its capacity step by step
		// (drops show congestion late, at a deadline).
		a.congested = false
		a.slowStart = false
	}
	lim = min(max(lim, float64(c.MinLimit)), float64(c.MaxLimit))
	a.cur = lim
	a.limit.Store(int64(lim))
}
