package sim

import (
	"math"
	"testing"
	"time"
)

// queueScenario is an open-loop Poisson source into an upstream of c
// exponential servers with no degradation, no deadline that matters and no
// limit: an M/M/c queue.
func queueScenario(lambda float64, c int, mean time.Duration, d time.Duration) *Scenario {
	return &Scenario{
		Name:     "mmc",
		Duration: d,
		Warmup:   d / 10,
		Classes:  []Class{{Name: "default", Rate: lambda, Timeout: time.Hour}},
		Upstream: Upstream{Capacity: c, ServiceTime: Exp(float64(mean))},
	}
}

// erlangC returns the probability that an arrival waits in M/M/c with
// offered load a = lambda/mu.
func erlangC(c int, a float64) float64 {
	term, sum := 1.0, 0.0
	for k := 0; k < c; k++ {
		sum += term
		term *= a / float64(k+1)
	}
	// term is now a^c / c!
	top := term * float64(c) / (float64(c) - a)
	return top / (sum + top)
}

func TestQueueingTheory(t *testing.T) {
	none, err := ParsePolicy("none")
	if err != nil {
		t.Fatal(err)
	}
	const mean = time.Millisecond // mu = 1000/s per server
	mu := 1 / mean.Seconds()
	tests := []struct {
		name   string
		lambda float64
		c      int
		d      time.Duration
	}{
		{"M/M/1 rho=0.5", 500, 1, 400 * time.Second},
		{"M/M/1 rho=0.7", 700, 1, 600 * time.Second},
		{"M/M/4 rho=0.7", 2800, 4, 120 * time.Second},
		{"M/M/16 rho=0.8", 12800, 16, 30 * time.Second},
	}
	seeds := []uint64{1, 2}
	if raceEnabled {
		// About 100,000 jobs per case: still within 2% of theory.
		seeds = seeds[:1]
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.d
			if raceEnabled {
				d = (d / 4).Truncate(time.Second)
			}
			for _, seed := range seeds {
				r, err := Run(queueScenario(tc.lambda, tc.c, mean, d), none, Options{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				s := r.Summary
				a := tc.lambda / mu
				want := erlangC(tc.c, a)/(float64(tc.c)*mu-tc.lambda) + 1/mu
				got := s.UpstreamSojourn
				if rel := math.Abs(got-want) / want; rel > 0.05 {
					t.Errorf("seed %d: mean time in system %.4gs, theory %.4gs (off by %.1f%%, want <= 5%%)", seed, got, want, 100*rel)
				}
				// Little's law: L = lambda W, on the same window.
				l, lw := s.UpstreamMeanJobs, s.UpstreamThroughput*s.UpstreamSojourn
				if rel := math.Abs(l-lw) / l; rel > 0.01 {
					t.Errorf("seed %d: Little's law: L = %.4g, lambda W = %.4g (off by %.2f%%, want <= 1%%)", seed, l, lw, 100*rel)
				}
				// Every request is admitted: the limiter's in-flight work
				// is the upstream's population.
				if rel := math.Abs(s.MeanInFlight-l) / l; rel > 0.01 {
					t.Errorf("seed %d: mean in flight %.4g, upstream population %.4g", seed, s.MeanInFlight, l)
				}
				t.Logf("seed %d: W = %.4gs (theory %.4gs), L = %.4g, lambda W = %.4g, %d jobs", seed, got, want, l, lw, s.Jobs)
			}
		})
	}
}
