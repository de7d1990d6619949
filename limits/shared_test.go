package limits

import (
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// sharedModel is the closed-form model of model_test.go for replicas that
// share one dependency: each replica's work in flight is min(its limit,
// rate x latency(total)), where total is the work in flight of all of
// them. Every replica sees the same latency, and their windows close
// together: the worst case for cuts that all happen at once.
type sharedModel struct {
	rate    float64 // arrivals per second at each replica
	latency func(total int) time.Duration
	samples int // per replica and window
	now     time.Time
	primed  bool
}

// inFlight returns each replica's work in flight under limits, and their
// sum: the least total at which the replicas' demand fits.
func (m *sharedModel) inFlight(limits []int, each []int) int {
	demand := func(total int) (sum int) {
		want := m.rate * m.latency(total).Seconds()
		for i, l := range limits {
			each[i] = max(1, min(l, int(math.Ceil(want))))
			sum += each[i]
		}
		return sum
	}
	hi := 0
	for _, l := range limits {
		hi += l
	}
	lo := 0
	for lo < hi {
		mid := (lo + hi) / 2
		if demand(mid) <= mid {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return demand(lo)
}

// runWindow feeds one window to every replica's limit and returns the
// total work in flight at its end.
func (m *sharedModel) runWindow(srcs []shed.LimitSource) int {
	if !m.primed {
		for _, s := range srcs {
			s.Observe(shed.Sample{Now: m.now})
		}
		m.primed = true
	}
	limits, each := make([]int, len(srcs)), make([]int, len(srcs))
	total := 0
	for range m.samples {
		m.now = m.now.Add(time.Second / time.Duration(m.samples))
		for i, s := range srcs {
			limits[i] = s.Limit()
		}
		total = m.inFlight(limits, each)
		lat := m.latency(total)
		for i, s := range srcs {
			s.Observe(shed.Sample{Now: m.now, Latency: lat, Timed: true, InFlight: each[i]})
		}
	}
	return total
}

// On a dependency that replicas share and overload twice over, their
// growth must find its knee without overshooting it far: each replica
// grows by its queue allowance in the same window, so the sum of the
// allowances is the overshoot the next window shows. The default
// allowance, at most a tenth of the limit and at least one, must never
// overshoot more than Envoy's square root, and less where the replicas'
// limits are a few units each (the square root grows such a limit by half
// or more). Below about four units per replica, growth by one unit is
// already a quarter of each share and both overshoot alike: the fleet
// then reaches up to 1.8 times the knee, which this test does not cover.
func TestQueueAllowanceOnSharedUpstream(t *testing.T) {
	const (
		capacity = 100 // units of work the dependency serves at full speed
		base     = 50 * time.Millisecond
	)
	run := func(replicas int, allowance func(float64) float64) (overshoot, served float64) {
		m := &sharedModel{
			// Twice what the dependency can serve: 200 units in flight at
			// the base latency.
			rate:    2 * capacity / float64(replicas) / base.Seconds(),
			latency: knee(base, capacity),
			samples: 100,
			now:     time.Unix(1_700_000_000, 0),
		}
		srcs := make([]shed.LimitSource, replicas)
		for i := range srcs {
			g, err := NewGradient(GradientConfig{QueueAllowance: allowance})
			if err != nil {
				t.Fatal(err)
			}
			srcs[i] = g
		}
		const warm, windows = 60, 240
		worst, sum := 0, 0.0
		for w := range warm + windows {
			total := m.runWindow(srcs)
			if w >= warm {
				worst = max(worst, total)
				sum += float64(min(total, capacity))
			}
		}
		return float64(worst) / capacity, sum / windows / capacity
	}
	lower := 0
	for _, replicas := range []int{5, 10, 15, 20, 25} {
		overshoot, served := run(replicas, nil)
		sqrtOvershoot, _ := run(replicas, math.Sqrt)
		t.Logf("%d replicas: the fleet reached %.2f x the knee and served %.2f of it; %.2f with the square root",
			replicas, overshoot, served, sqrtOvershoot)
		// Regrowth (x1.5 while no replica sees a queue) may take the
		// fleet that far past the knee in one window, as a latency within
		// Tolerance of the base is no congestion.
		if overshoot > 1.5 || served < 0.9 {
			t.Errorf("%d replicas: the fleet reached %.2f x the knee and served %.2f of it, want at most 1.5 and at least 0.9",
				replicas, overshoot, served)
		}
		if overshoot > sqrtOvershoot {
			t.Errorf("%d replicas: the default allowance overshot %.2f, the square root %.2f", replicas, overshoot, sqrtOvershoot)
		}
		if overshoot < sqrtOvershoot {
			lower++
		}
	}
	if lower == 0 {
		t.Error("the default allowance never overshot less than the square root: the cap earns no place")
	}
}
