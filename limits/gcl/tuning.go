package gcl

import (
	"math"

	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/shedkit/shedkit/shed"
)

// Tuning overrides the limits of the library's algorithms built by
// NewGradient2Tuned, NewVegasTuned and NewAIMDTuned; everything else keeps
// the library's default tuning. Zero fields take the algorithm's default
// (see the constructors). A default gives way to the values given: a
// default MinLimit is lowered to a given MaxLimit, a default MaxLimit is
// raised to a given MinLimit or InitialLimit, and a default InitialLimit
// is clamped into [MinLimit, MaxLimit]. Values given must satisfy
// MinLimit <= InitialLimit <= MaxLimit <= shed.MaxLimit; violations are
// errors wrapping limits.ErrInvalidConfig that name the field.
type Tuning struct {
	// InitialLimit is the limit before the first update: set it to start
	// the algorithm warm.
	InitialLimit int
	// MinLimit is the floor of the limit. Only Gradient2 has one (Vegas
	// and AIMD floor at 1); a MinLimit for them is an error, since
	// clamping what the adapter reports would let the library's own
	// estimate sink below it unseen and climb back slowly.
	MinLimit int
	// MaxLimit caps the limit. Gradient2 and Vegas apply it themselves.
	// The library's AIMD has no maximum: the Source clamps the limit it
	// reports instead, and the in-flight count it passes on. The
	// library's estimate then stops at most one increase above MaxLimit
	// (it grows only while the in-flight count reaches it), and backs off
	// from there, also when a limiter's dry run admits past the limit.
	// Zero keeps AIMD capped only at shed.MaxLimit.
	MaxLimit int
	// NoProbe turns off Vegas' probe, which re-bases its no-load latency
	// every 15 to 30 x limit samples at a point drawn from math/rand's
	// global source, so that runs are reproducible. The library maps its
	// own ProbeDisabled back to 30, so a probe multiplier of
	// math.MaxInt32 is passed instead: it leaves the probe out of any
	// finite run. Vegas only.
	NoProbe bool
}

// tuningDefaults are an algorithm's default limits; max 0 means uncapped.
type tuningDefaults struct {
	alg                 string
	initial, minL, maxL int
	hasMin, hasProbe    bool
}

var (
	gradient2Defaults = tuningDefaults{alg: "Gradient2", initial: 20, minL: 20, maxL: 200, hasMin: true}
	vegasDefaults     = tuningDefaults{alg: "Vegas", initial: 20, minL: 1, maxL: 1000, hasProbe: true}
	aimdDefaults      = tuningDefaults{alg: "AIMD", initial: 10, minL: 1}
)

// resolve validates t for an algorithm and fills in its defaults. The
// library's constructors silently replace bad values (or build a limit
// that never moves), hence the checks here.
func (t Tuning) resolve(d tuningDefaults) (Tuning, error) {
	switch {
	case t.InitialLimit < 0:
		return t, configError("Tuning.InitialLimit", "must be >= 0, got %d", t.InitialLimit)
	case t.MinLimit < 0:
		return t, configError("Tuning.MinLimit", "must be >= 0, got %d", t.MinLimit)
	case t.MaxLimit < 0:
		return t, configError("Tuning.MaxLimit", "must be >= 0, got %d", t.MaxLimit)
	case t.MinLimit != 0 && !d.hasMin:
		return t, configError("Tuning.MinLimit", "the library's %s has no minimum (it floors at 1)", d.alg)
	case t.NoProbe && !d.hasProbe:
		return t, configError("Tuning.NoProbe", "the library's %s has no probe", d.alg)
	case t.MaxLimit > shed.MaxLimit:
		// Above it a limit means nothing to a shed.Limiter.
		return t, configError("Tuning.MaxLimit", "must be <= shed.MaxLimit (%d), got %d", shed.MaxLimit, t.MaxLimit)
	}
	if t.MinLimit == 0 {
		t.MinLimit = d.minL
		if t.MaxLimit != 0 {
			t.MinLimit = min(t.MinLimit, t.MaxLimit)
		}
	}
	if t.MaxLimit == 0 && d.maxL != 0 {
		t.MaxLimit = min(max(d.maxL, t.MinLimit, t.InitialLimit), shed.MaxLimit)
	}
	if t.MaxLimit != 0 && t.MaxLimit < t.MinLimit {
		return t, configError("Tuning.MaxLimit", "must be >= MinLimit (%d), got %d", t.MinLimit, t.MaxLimit)
	}
	ceiling := t.MaxLimit
	if ceiling == 0 {
		ceiling = shed.MaxLimit
	}
	if t.InitialLimit == 0 {
		t.InitialLimit = min(max(d.initial, t.MinLimit), ceiling)
	}
	if t.InitialLimit < t.MinLimit || t.InitialLimit > ceiling {
		return t, configError("Tuning.InitialLimit", "must be in [MinLimit, MaxLimit] = [%d, %d], got %d", t.MinLimit, ceiling, t.InitialLimit)
	}
	return t, nil
}

// NewGradient2Tuned is NewGradient2 with the limits of t. Defaults:
// initial 20, min 20, max 200.
func NewGradient2Tuned(cfg Config, t Tuning) (*Source, error) {
	r, err := t.resolve(gradient2Defaults)
	if err != nil {
		return nil, err
	}
	// The other arguments are those of limit.NewDefaultGradient2Limit.
	l, err := limit.NewGradient2Limit(Name, r.InitialLimit, r.MaxLimit, r.MinLimit, func(int) int { return 4 }, 0.2, 600, nil, nil)
	if err != nil { // min > max, excluded by resolve
		return nil, configError("Tuning", "%v", err)
	}
	return fromCore(l, cfg, r.MaxLimit)
}

// NewVegasTuned is NewVegas with the limits of t and, with t.NoProbe,
// without the probe. Defaults: initial 20, max 1000; no MinLimit.
func NewVegasTuned(cfg Config, t Tuning) (*Source, error) {
	r, err := t.resolve(vegasDefaults)
	if err != nil {
		return nil, err
	}
	probe := -1 // the library's default, 30
	if r.NoProbe {
		probe = math.MaxInt32
	}
	// Smoothing 1 and nil functions are limit.NewDefaultVegasLimit's.
	l := limit.NewVegasLimitWithRegistry(Name, r.InitialLimit, nil, r.MaxLimit, 1.0, nil, nil, nil, nil, nil, probe, nil, nil)
	return fromCore(l, cfg, r.MaxLimit)
}

// NewAIMDTuned is NewAIMD with the limits of t. Defaults: initial 10, no
// maximum; no MinLimit. A MaxLimit is applied by the Source (see Tuning).
func NewAIMDTuned(cfg Config, t Tuning) (*Source, error) {
	r, err := t.resolve(aimdDefaults)
	if err != nil {
		return nil, err
	}
	// Backoff 0.9 and increase 1 are limit.NewDefaultAIMDLimit's.
	return fromCore(limit.NewAIMDLimit(Name, r.InitialLimit, 0.9, 1, nil), cfg, r.MaxLimit)
}
