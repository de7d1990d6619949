package sim

import (
	"math"
	"slices"
	"strconv"
)

// DistFit is a distribution fitted to samples, with how well each
// candidate shape fits them.
type DistFit struct {
	// Dist is the chosen distribution; zero when there were no samples.
	Dist Dist
	// N is the number of samples; Median, Mean and P99 are theirs.
	N                 int
	Median, Mean, P99 float64
	// KS is the Kolmogorov-Smirnov distance between the samples and Dist:
	// the largest gap between their cumulative distributions, from 0
	// (identical) to 1.
	KS float64
	// Candidates are every shape tried, in order of preference.
	Candidates []Candidate
}

// Candidate is one shape tried by a fit.
type Candidate struct {
	Dist Dist
	KS   float64
}

// Quality says in words how well the fit matches its samples: "good" when
// the KS distance is within what sampling alone explains (the 1%
// critical value, at least 0.03), "fair" up to 0.1, else "poor".
func (f DistFit) Quality() string {
	switch {
	case f.N == 0:
		return "no samples"
	case f.KS <= max(0.03, 1.63/math.Sqrt(float64(f.N))):
		return "good"
	case f.KS <= 0.1:
		return "fair"
	}
	return "poor"
}

// fitKS is the margin within which a simpler shape is preferred to a
// better-fitting one: a constant over an exponential, either over the
// two-parameter shapes.
const fitKS = 0.01

// fitDist fits xs (which it sorts) with the given shapes, tried in that
// order of preference: every shape's parameters come from quantiles or
// the mean, and the shape chosen is the first whose KS distance is within
// fitKS of the best. Parameters are rounded to 4 significant digits.
func fitDist(xs []float64, shapes []DistKind) DistFit {
	f := DistFit{N: len(xs)}
	if len(xs) == 0 {
		return f
	}
	slices.Sort(xs)
	f.Median, f.P99, f.Mean = quantile(xs, 0.5), quantile(xs, 0.99), mean(xs)
	best := math.Inf(1)
	for _, k := range shapes {
		d, ok := candidate(k, xs, f.Mean)
		if !ok {
			continue
		}
		c := Candidate{Dist: d, KS: ksDistance(xs, d)}
		f.Candidates = append(f.Candidates, c)
		best = min(best, c.KS)
	}
	for _, c := range f.Candidates {
		if c.KS <= best+fitKS {
			f.Dist, f.KS = c.Dist, c.KS
			break
		}
	}
	return f
}

// candidate returns the distribution of shape k that matches sorted xs.
func candidate(k DistKind, xs []float64, m float64) (Dist, bool) {
	switch k {
	case Constant:
		return Const(round4(quantile(xs, 0.5))), true
	case Exponential:
		return Exp(round4(m)), m > 0
	case LogNormal:
		// A log-normal's 10% and 90% quantiles lie 1.2816 sigma either
		// side of its median, in logarithms; they are less sensitive to
		// the tails than the standard deviation is.
		q10, q50, q90 := quantile(xs, 0.1), quantile(xs, 0.5), quantile(xs, 0.9)
		if q10 <= 0 || q90 <= q10 {
			return Dist{}, false
		}
		sigma := math.Round(1000*math.Log(q90/q10)/(2*1.2815516)) / 1000
		return LogNorm(round4(q50), min(sigma, 5)), sigma > 0
	case Uniform:
		lo, hi := round4(xs[0]), round4(xs[len(xs)-1])
		return Unif(lo, hi), hi > lo
	}
	return Dist{}, false
}

// ksDistance is the Kolmogorov-Smirnov distance between sorted xs and d.
// Equal values are one step of the empirical CDF, compared once on each
// side: from the share below them to the share up to the last of them.
// Compared one by one, a sample of one repeated value (a cost that is
// always 1) lay as far as possible from the constant that it is.
func ksDistance(xs []float64, d Dist) float64 {
	n := float64(len(xs))
	var D float64
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[i] {
			j++
		}
		D = max(D, math.Abs(d.cdf(xs[i])-float64(j+1)/n), math.Abs(float64(i)/n-d.cdfBelow(xs[i])))
		i = j + 1
	}
	return D
}

// cdf is P(X <= x) for the shapes fits use (others: 0).
func (d Dist) cdf(x float64) float64 {
	switch d.Kind {
	case Constant:
		if x >= d.Value {
			return 1
		}
		return 0
	case Exponential:
		return 1 - math.Exp(-max(x, 0)/d.Mean)
	case LogNormal:
		if x <= 0 {
			return 0
		}
		return 0.5 * math.Erfc(-math.Log(x/d.Median)/(d.Sigma*math.Sqrt2))
	case Uniform:
		return min(max((x-d.Min)/(d.Max-d.Min), 0), 1)
	}
	return 0
}

// cdfBelow is P(X < x): the cdf without a point mass at x.
func (d Dist) cdfBelow(x float64) float64 {
	if d.Kind == Constant && x == d.Value {
		return 0
	}
	return d.cdf(x)
}

// quantile returns the q-quantile of sorted xs (linear interpolation).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	p := q * float64(len(xs)-1)
	i := int(p)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (p-float64(i))*(xs[i+1]-xs[i])
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// round4 rounds x to 4 significant digits: what a fit can tell apart, and
// what a scenario file shows.
func round4(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return v
}
