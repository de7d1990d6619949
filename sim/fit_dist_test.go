package sim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFitDistShapes checks the shape a fit chooses for samples whose
// shape is known, repeated values included: a cost that is always the
// same is a constant, not the exponential of its mean.
func TestFitDistShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	draw := func(n int, f func() float64) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = f()
		}
		return xs
	}
	all := []DistKind{Constant, Exponential, LogNormal, Uniform}
	tests := []struct {
		name string
		xs   []float64
		want DistKind
	}{
		{"always 1", draw(500, func() float64 { return 1 }), Constant},
		{"always 10", draw(3, func() float64 { return 10 }), Constant},
		{"exponential", draw(2000, func() float64 { return r.ExpFloat64() * 20 }), Exponential},
		{"lognormal", draw(2000, func() float64 { return 5 * math.Exp(1.2*r.NormFloat64()) }), LogNormal},
		{"uniform", draw(2000, func() float64 { return 10 + 30*r.Float64() }), Uniform},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fitDist(tt.xs, all)
			if f.Dist.Kind != tt.want {
				t.Fatalf("fitted %v (KS %.3f), want %v; candidates %+v", f.Dist.Kind, f.KS, tt.want, f.Candidates)
			}
			if f.KS > 0.05 {
				t.Errorf("KS %.3f for the right shape, want at most 0.05", f.KS)
			}
		})
	}
}

// TestKSDistanceTies checks the distance of samples with repeated values
// against distributions with and without a point mass there.
func TestKSDistanceTies(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		d    Dist
		want float64
	}{
		{"constant sample, its constant", []float64{4, 4, 4, 4}, Const(4), 0},
		{"constant sample, another constant", []float64{4, 4, 4, 4}, Const(5), 1},
		{"half at each of two values, the lower", []float64{1, 1, 2, 2}, Const(1), 0.5},
		{"uniform sample, uniform", []float64{0.25, 0.5, 0.75, 1}, Unif(0, 1), 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ksDistance(tt.xs, tt.d); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("ksDistance = %v, want %v", got, tt.want)
			}
		})
	}
}
