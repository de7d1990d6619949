package sim

import (
	"math"
	"time"
)

// Segment is a span of a recording over which a class's arrival rate is
// constant, as far as the counts can tell.
type Segment struct {
	At, For time.Duration
	// Rate is in requests per second; Count the arrivals counted in it.
	Rate, Count float64
}

// segmentRates splits the per-cell arrival counts (with each cell's
// exposure in seconds) into at most maxSegs spans of constant rate, by
// binary segmentation: it repeatedly splits the span where a split gains
// the most Poisson log-likelihood, as long as the gain exceeds a penalty
// (2 ln cells + 4) that a constant rate's noise almost never reaches. A
// ramp comes out as a staircase. It returns the first cell of each span.
func segmentRates(counts, expo []float64, maxSegs int) []int {
	n := len(counts)
	C, E := make([]float64, n+1), make([]float64, n+1)
	for i := range n {
		C[i+1], E[i+1] = C[i]+counts[i], E[i]+expo[i]
	}
	ll := func(a, b int) float64 {
		c, t := C[b]-C[a], E[b]-E[a]
		if c <= 0 || t <= 0 {
			return 0
		}
		return c*math.Log(c/t) - c
	}
	best := func(a, b int) (int, float64) {
		whole, k, gain := ll(a, b), -1, 0.0
		for s := a + 1; s < b; s++ {
			if g := ll(a, s) + ll(s, b) - whole; g > gain {
				k, gain = s, g
			}
		}
		return k, gain
	}
	type span struct{ a, b int }
	type cand struct {
		k    int
		gain float64
	}
	spans := []span{{0, n}}
	gains := []cand{}
	k, g := best(0, n)
	gains = append(gains, cand{k, g})
	penalty := 2*math.Log(float64(max(n, 2))) + 4
	for len(spans) < maxSegs {
		at := -1
		for i, c := range gains {
			if c.k >= 0 && c.gain > penalty && (at < 0 || c.gain > gains[at].gain) {
				at = i
			}
		}
		if at < 0 {
			break
		}
		s, split := spans[at], gains[at].k
		kl, gl := best(s.a, split)
		kr, gr := best(split, s.b)
		spans = append(spans[:at], append([]span{{s.a, split}, {split, s.b}}, spans[at+1:]...)...)
		gains = append(gains[:at], append([]cand{{kl, gl}, {kr, gr}}, gains[at+1:]...)...)
	}
	starts := make([]int, len(spans))
	for i, s := range spans {
		starts[i] = s.a
	}
	return starts
}

// segments turns the starts of segmentRates into Segments over cells of
// length dt.
func segments(starts []int, counts, expo []float64, dt time.Duration) []Segment {
	out := make([]Segment, len(starts))
	for i, a := range starts {
		b := len(counts)
		if i+1 < len(starts) {
			b = starts[i+1]
		}
		var c, t float64
		for j := a; j < b; j++ {
			c += counts[j]
			t += expo[j]
		}
		out[i] = Segment{At: time.Duration(a) * dt, For: time.Duration(b-a) * dt, Count: c}
		if t > 0 {
			out[i].Rate = c / t
		}
	}
	return out
}
