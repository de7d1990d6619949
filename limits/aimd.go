package limits

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// DefaultIncrease is AIMD's additive step per window: 1, as Netflix's AIMD.
const DefaultIncrease = 1

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
	// Growth multiplies the limit per window in slow start: from the
	// start until the first congested window or the first window in which
	// the limit is not in use, the limit grows by Growth instead of
	// Increase (as TCP slow start), but never past the in-flight peak /
	// MinUtilization. >= 1; 1 turns slow start off (Netflix's AIMD).
	// Default DefaultGrowth.
	Growth float64
	// LatencyThreshold, when set, makes a window whose latency statistic
	// exceeds it congested. Zero means drops alone signal congestion
	// (Netflix's AIMD uses a 5 s timeout, rarely reached; set it to your
	// latency objective).
	LatencyThreshold time.Duration
	// DropTolerance is the share of a window's samples that may be drops
	// without it counting as congested, in [0, 1). Default 0: any drop.
	DropTolerance float64
	// MinUtilization: the limit grows only in windows whose largest
	// in-flight count reached MinUtilization x limit, in (0, 1]. Default
	// DefaultMinUtilization.
	MinUtilization float64
	// Window configures the sampling windows.
	Window WindowConfig
}

// AIMD is a loss-based concurrency limit: additive increase while the limit
// is in use and nothing is dropped, multiplicative decrease on a drop or
// when the window latency exceeds LatencyThreshold. It is simpler and more
// predictable than Gradient but recovers slowly (Increase per window);
// until its first congestion it grows multiplicatively (slow start), so
// that a service at 300 in flight is not throttled for minutes after a
// start from InitialLimit.
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
	if err := defaultFloat("AIMDConfig.MinUtilization", &cfg.MinUtilization, DefaultMinUtilization, 0, 1, false, true); err != nil {
		return nil, err
	}
	if math.IsNaN(cfg.DropTolerance) || cfg.DropTolerance < 0 || cfg.DropTolerance >= 1 {
		return nil, configError("AIMDConfig.DropTolerance", "must be in [0, 1), got %v", cfg.DropTolerance)
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
		a.slowStart = false
	case w.Samples > 0 && float64(w.MaxInFlight) >= c.MinUtilization*lim:
		next := lim + float64(c.Increase)
		if a.slowStart {
			next = max(next, min(lim*c.Growth, float64(w.MaxInFlight)/c.MinUtilization))
		}
		lim = next
	case w.Samples > 0:
		// The limit outgrew the demand: slow start has found it, and
		// from here on a surge must earn its capacity step by step
		// (drops show congestion late, at a deadline).
		a.slowStart = false
	}
	lim = min(max(lim, float64(c.MinLimit)), float64(c.MaxLimit))
	a.cur = lim
	a.limit.Store(int64(lim))
}
