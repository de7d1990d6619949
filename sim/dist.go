package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
)

// DistKind names the shape of a [Dist].
type DistKind uint8

const (
	// Constant always returns Value.
	Constant DistKind = iota
	// Exponential has mean Mean (memoryless: the M of M/M/1).
	Exponential
	// LogNormal has median Median and shape Sigma (the standard deviation
	// of the logarithm). Service times and LLM token counts are close to
	// log-normal: most are near the median, a few are many times longer.
	LogNormal
	// Uniform is uniform on [Min, Max].
	Uniform
	// Pareto has median Median and tail index Alpha: the probability of a
	// draw above x falls as x^-Alpha, so a few draws are orders of
	// magnitude above the median (Alpha <= 2: infinite variance, Alpha
	// <= 1: infinite mean; bound it with ClampMax).
	Pareto
	// Bimodal mixes two log-normal modes of shape Sigma: the fast one of
	// median Median, and with probability Share a slow one of median
	// Ratio x Median (a cache miss, a cold path, a retry inside the
	// dependency).
	Bimodal
)

var distNames = [...]string{"constant", "exponential", "lognormal", "uniform", "pareto", "bimodal"}

// String returns the kind's name as written in scenario files.
func (k DistKind) String() string {
	if int(k) < len(distNames) {
		return distNames[k]
	}
	return "unknown"
}

// Dist is a distribution of non-negative values: durations in
// nanoseconds (service and think times) or plain numbers (costs, for
// example tokens). Clamp bounds every draw when ClampMax > 0.
type Dist struct {
	Kind DistKind
	// Value (Constant), Mean (Exponential), Median and Sigma (LogNormal),
	// Min and Max (Uniform), Median and Alpha (Pareto), Median, Sigma,
	// Ratio and Share (Bimodal).
	Value, Mean, Median, Sigma, Min, Max float64
	Alpha, Ratio, Share                  float64
	// ClampMin and ClampMax bound every draw (ClampMax zero: no upper
	// bound).
	ClampMin, ClampMax float64
}

// Const returns a constant distribution.
func Const(v float64) Dist { return Dist{Kind: Constant, Value: v} }

// Exp returns an exponential distribution with the given mean.
func Exp(mean float64) Dist { return Dist{Kind: Exponential, Mean: mean} }

// LogNorm returns a log-normal distribution with the given median and
// sigma.
func LogNorm(median, sigma float64) Dist { return Dist{Kind: LogNormal, Median: median, Sigma: sigma} }

// Unif returns a uniform distribution on [lo, hi].
func Unif(lo, hi float64) Dist { return Dist{Kind: Uniform, Min: lo, Max: hi} }

// Par returns a Pareto distribution with the given median and tail index.
func Par(median, alpha float64) Dist { return Dist{Kind: Pareto, Median: median, Alpha: alpha} }

// Bimod returns a mixture of two log-normal modes of shape sigma: median
// median, and with probability share, median ratio x median.
func Bimod(median, sigma, ratio, share float64) Dist {
	return Dist{Kind: Bimodal, Median: median, Sigma: sigma, Ratio: ratio, Share: share}
}

// IsZero reports whether d is the zero Dist (a constant 0).
func (d Dist) IsZero() bool { return d == Dist{} }

// validate checks d's parameters; field names the Dist for errors.
func (d Dist) validate(field string) error {
	bad := func(name string, v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	switch d.Kind {
	case Constant:
		if bad("value", d.Value) {
			return &FieldError{Path: field + ".value", Msg: fmt.Sprintf("must be a finite number >= 0, got %v", d.Value)}
		}
	case Exponential:
		if bad("mean", d.Mean) || d.Mean == 0 {
			return &FieldError{Path: field + ".mean", Msg: fmt.Sprintf("must be > 0, got %v", d.Mean)}
		}
	case LogNormal:
		if bad("median", d.Median) || d.Median == 0 {
			return &FieldError{Path: field + ".median", Msg: fmt.Sprintf("must be > 0, got %v", d.Median)}
		}
		if bad("sigma", d.Sigma) || d.Sigma > 5 {
			return &FieldError{Path: field + ".sigma", Msg: fmt.Sprintf("must be in [0, 5], got %v", d.Sigma)}
		}
	case Pareto:
		if bad("median", d.Median) || d.Median == 0 {
			return &FieldError{Path: field + ".median", Msg: fmt.Sprintf("must be > 0, got %v", d.Median)}
		}
		if bad("alpha", d.Alpha) || d.Alpha < 0.1 || d.Alpha > 100 {
			return &FieldError{Path: field + ".alpha", Msg: fmt.Sprintf("must be in [0.1, 100], got %v", d.Alpha)}
		}
	case Bimodal:
		if bad("median", d.Median) || d.Median == 0 {
			return &FieldError{Path: field + ".median", Msg: fmt.Sprintf("must be > 0, got %v", d.Median)}
		}
		if bad("sigma", d.Sigma) || d.Sigma > 5 {
			return &FieldError{Path: field + ".sigma", Msg: fmt.Sprintf("must be in [0, 5], got %v", d.Sigma)}
		}
		if bad("ratio", d.Ratio) || d.Ratio < 1 || d.Ratio > 1e6 {
			return &FieldError{Path: field + ".ratio", Msg: fmt.Sprintf("must be in [1, 1e6], got %v", d.Ratio)}
		}
		if bad("share", d.Share) || d.Share > 1 {
			return &FieldError{Path: field + ".share", Msg: fmt.Sprintf("must be in [0, 1], got %v", d.Share)}
		}
	case Uniform:
		if bad("min", d.Min) {
			return &FieldError{Path: field + ".min", Msg: fmt.Sprintf("must be >= 0, got %v", d.Min)}
		}
		if bad("max", d.Max) || d.Max < d.Min {
			return &FieldError{Path: field + ".max", Msg: fmt.Sprintf("must be >= min (%v), got %v", d.Min, d.Max)}
		}
	default:
		return &FieldError{Path: field + ".dist", Msg: fmt.Sprintf("unknown distribution %d", d.Kind)}
	}
	if bad("clamp_min", d.ClampMin) {
		return &FieldError{Path: field + ".clamp_min", Msg: "must be >= 0"}
	}
	if bad("clamp_max", d.ClampMax) || (d.ClampMax > 0 && d.ClampMax < d.ClampMin) {
		return &FieldError{Path: field + ".clamp_max", Msg: "must be 0 (none) or >= clamp_min"}
	}
	return nil
}

// sample draws one value from r.
func (d *Dist) sample(r *rand.Rand) float64 {
	var v float64
	switch d.Kind {
	case Constant:
		v = d.Value
	case Exponential:
		v = r.ExpFloat64() * d.Mean
	case LogNormal:
		v = d.Median * math.Exp(d.Sigma*r.NormFloat64())
	case Uniform:
		v = d.Min + (d.Max-d.Min)*r.Float64()
	case Pareto:
		// Inverse transform: the scale x_m = median / 2^(1/alpha).
		u := 1 - r.Float64() // in (0, 1]
		v = d.Median * math.Pow(2*u, -1/d.Alpha)
	case Bimodal:
		v = d.Median * math.Exp(d.Sigma*r.NormFloat64())
		if r.Float64() < d.Share {
			v *= d.Ratio
		}
	}
	if v < d.ClampMin {
		v = d.ClampMin
	}
	if d.ClampMax > 0 && v > d.ClampMax {
		v = d.ClampMax
	}
	return v
}

// MeanValue returns the distribution's mean, clamps ignored.
func (d Dist) MeanValue() float64 {
	switch d.Kind {
	case Constant:
		return d.Value
	case Exponential:
		return d.Mean
	case LogNormal:
		return d.Median * math.Exp(d.Sigma*d.Sigma/2)
	case Uniform:
		return (d.Min + d.Max) / 2
	case Pareto:
		if d.Alpha <= 1 {
			return math.Inf(1)
		}
		return d.Median * math.Pow(2, -1/d.Alpha) * d.Alpha / (d.Alpha - 1)
	case Bimodal:
		return d.Median * math.Exp(d.Sigma*d.Sigma/2) * (1 - d.Share + d.Share*d.Ratio)
	}
	return 0
}

// newStream returns the random stream of one model component: a PCG
// seeded with the run's seed and a hash of the component's name, so that
// adding a component never shifts the draws of another.
func newStream(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// empirical is a sorted sample of a distribution, for the quantities of
// the ideal that have no closed form (cost-scaled service times).
type empirical struct {
	xs   []float64
	mean float64
}

func newEmpirical(xs []float64) *empirical {
	sort.Float64s(xs)
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return &empirical{xs: xs, mean: s / float64(len(xs))}
}

// cdf returns the share of the sample <= x.
func (e *empirical) cdf(x float64) float64 {
	i := sort.Search(len(e.xs), func(i int) bool { return e.xs[i] > x })
	return float64(i) / float64(len(e.xs))
}
