package limits

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestNotTrappedBelowDemand: whatever MinUtilization and wherever a cut
// leaves the limit (a fraction between two integers), a limit that the
// work in flight fills, with nothing congested, grows. A limit compared
// with its unrounded value once could not: with 0.75, any limit in
// (4/3, 2) enforced 1 and waited for a peak of 1.5 that never came.
func TestNotTrappedBelowDemand(t *testing.T) {
	for _, minUtil := range []float64{0.1, 0.5, 0.75, 0.9, 1} {
		for initial := 1; initial <= 12; initial++ {
			for _, k := range []string{"gradient", "aimd"} {
				name := fmt.Sprintf("%s/util=%v/initial=%d", k, minUtil, initial)
				var src shed.LimitSource
				var err error
				if k == "gradient" {
					src, err = NewGradient(GradientConfig{InitialLimit: initial, MinUtilization: minUtil})
				} else {
					src, err = NewAIMD(AIMDConfig{InitialLimit: initial, MinUtilization: minUtil})
				}
				if err != nil {
					t.Fatal(err)
				}
				f := newFeed(src)
				f.window(0, 40, 1000, nil) // every request dropped: a cut to a fraction
				cut := src.Limit()
				grew := false
				for range 10 {
					// The work in flight is exactly the enforced limit.
					if f.window(40, 0, src.Limit(), constant(10*time.Millisecond)) > cut {
						grew = true
						break
					}
				}
				if !grew {
					t.Errorf("%s: cut to %d, then 10 windows at %d in flight without growing", name, cut, cut)
				}
			}
		}
	}
}

// shapes are service-time distributions from constant to heavy-tailed,
// each of median 1 (multiplied by the median of the test).
var shapes = []struct {
	name string
	draw func(r *rand.Rand) float64
}{
	{"constant", func(*rand.Rand) float64 { return 1 }},
	{"exponential", func(r *rand.Rand) float64 { return r.ExpFloat64() * math.Ln2 }},
	{"lognormal 0.5", func(r *rand.Rand) float64 { return math.Exp(0.5 * r.NormFloat64()) }},
	{"lognormal 1.5", func(r *rand.Rand) float64 { return math.Exp(1.5 * r.NormFloat64()) }},
	{"lognormal 2", func(r *rand.Rand) float64 { return math.Exp(2 * r.NormFloat64()) }},
	{"pareto 1.5", func(r *rand.Rand) float64 { return math.Pow(2*(1-r.Float64()), -1/1.5) }},
}

// TestStationaryNeverBelowDemand: under stationary load with no
// congestion (a dependency with room for everything, latencies of any
// shape independent of the work in flight), once past its first windows
// the limit never falls below the work in flight that Little's law says
// the load needs, for random demands, medians and sample counts.
func TestStationaryNeverBelowDemand(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 1))
	for _, sh := range shapes {
		for trial := range 8 {
			demand := 1 + r.IntN(2000)
			median := time.Duration(float64(time.Millisecond) * math.Exp(r.Float64()*math.Log(1000)))
			perWindow := 20 + r.IntN(2000)
			for _, k := range []string{"gradient", "aimd"} {
				name := fmt.Sprintf("%s/%s/demand=%d/median=%v/samples=%d", k, sh.name, demand, median, perWindow)
				var src shed.LimitSource
				if k == "gradient" {
					src, _ = NewGradient(GradientConfig{})
				} else {
					src, _ = NewAIMD(AIMDConfig{})
				}
				f := newFeed(src)
				lat := func(int) time.Duration { return time.Duration(float64(median) * sh.draw(r)) }
				for w := range 200 {
					got := f.window(perWindow, 0, demand, lat)
					if w >= 40 && got < demand {
						t.Errorf("%s: window %d: limit %d below the %d in flight the load needs (%v)", name, w, got, demand, stateOf(src))
						break
					}
				}
				_ = trial
			}
		}
	}
}

func stateOf(src shed.LimitSource) any {
	switch s := src.(type) {
	case *Gradient:
		return s.State()
	case *AIMD:
		return s.State()
	}
	return nil
}

// TestBackAfterASlowdown: a ten-fold slowdown of a dependency with a knee
// (capacity 100 in flight, healthy demand 70), then its end: within 10
// windows of the end both limits are back at 90% of their healthy value
// or more.
func TestBackAfterASlowdown(t *testing.T) {
	for _, k := range []string{"gradient", "aimd"} {
		t.Run(k, func(t *testing.T) {
			var src shed.LimitSource
			if k == "gradient" {
				src, _ = NewGradient(GradientConfig{})
			} else {
				src, _ = NewAIMD(AIMDConfig{})
			}
			m := newModel(7000, healthyLatency) // 70 in flight
			m.latency = knee(healthyLatency, 100)
			healthy := m.settle(t, src, 1000)
			m.latency = knee(10*healthyLatency, 100)
			slow := m.run(src, 30)
			m.latency = knee(healthyLatency, 100)
			back := m.run(src, 10)
			t.Logf("healthy %d, slow %v, back %v", healthy, slow, back)
			if got := back[9]; float64(got) < 0.9*float64(healthy) {
				t.Fatalf("10 windows after the slowdown the limit is %d, want >= 90%% of %d", got, healthy)
			}
		})
	}
}

// TestAIMDSeesLatency: with its defaults AIMD shrinks its limit when the
// latency rises ten-fold and nothing is dropped, and takes a latency that
// admitting less does not reduce as the dependency's new normal instead
// of cutting it to the minimum.
func TestAIMDSeesLatency(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(healthyRate, healthyLatency)
	steady := m.settle(t, a, 1000)
	m.latency = flat(10 * healthyLatency)
	slow := m.run(a, 30)
	t.Logf("steady %d, at 10x latency: %v", steady, slow)
	low := steady
	for _, l := range slow {
		low = min(low, l)
	}
	if low >= steady {
		t.Fatalf("a ten-fold latency did not cut the limit from %d", steady)
	}
	if st := a.State(); !near(st.Baseline, 10*healthyLatency) || slow[29] < steady/2 {
		t.Fatalf("after 30 windows at 10x: %+v, limit %d: want the slower latency learned and the limit above half of %d", st, slow[29], steady)
	}
	// LatencyThreshold < 0: drops only, as before.
	b, _ := NewAIMD(AIMDConfig{LatencyThreshold: -1})
	m = newModel(healthyRate, healthyLatency)
	steady = m.settle(t, b, 1000)
	m.latency = flat(10 * healthyLatency)
	if got := m.run(b, 5); got[4] < steady {
		t.Fatalf("drops-only AIMD cut on latency: %v from %d", got, steady)
	}
}

// slowMode is a dependency whose service time is bimodal: a share of its
// work takes slowX times the median and misses the deadline however
// little is admitted. Work arrives at rate per second; the work in flight
// is the demand that Little's law gives, capped by the limit, and the
// samples come one completion apart, so a low limit on a slow dependency
// gives windows of a handful of samples.
type slowMode struct {
	share, slowX, deadlineX, rate float64
	median                        time.Duration
}

func (d slowMode) meanLatency() float64 {
	return ((1-d.share)*d.median.Seconds() + d.share*d.slowX*d.median.Seconds())
}

// demand is the work in flight the load needs.
func (d slowMode) demand() float64 { return d.rate * d.meanLatency() }

// run feeds src for secs of virtual time and returns its limit each second.
func (d slowMode) run(src shed.LimitSource, secs int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 9))
	now := t0
	src.Observe(shed.Sample{Now: now})
	var limits []int
	next := now.Add(time.Second)
	for len(limits) < secs {
		inFlight := min(float64(src.Limit()), d.demand())
		now = now.Add(time.Duration(float64(time.Second) * d.meanLatency() / inFlight))
		lat := float64(d.median)
		if r.Float64() < d.share {
			lat *= d.slowX
		}
		lat *= 0.8 + 0.4*r.Float64()
		src.Observe(shed.Sample{Now: now, Latency: time.Duration(lat), Timed: true, InFlight: int(inFlight),
			Dropped: lat > d.deadlineX*float64(d.median)})
		for ; !now.Before(next) && len(limits) < secs; next = next.Add(time.Second) {
			limits = append(limits, src.Limit())
		}
	}
	return limits
}

// TestNotTrappedByInherentDrops: a dependency that misses the deadline on
// a share of its work (10-50%) whatever is admitted is healthy, and
// neither limit may stay below the work in flight its load needs. Before
// the background is learned, drops count only when clearly above the
// tolerance: a limit that cut on two slow units of work in five stayed at
// its floor, where its windows were too small ever to learn it.
func TestNotTrappedByInherentDrops(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 3))
	for trial := range 40 {
		d := slowMode{share: 0.1 + 0.4*r.Float64(), slowX: 5 + 25*r.Float64(),
			median: time.Duration(float64(time.Millisecond) * math.Exp(r.Float64()*math.Log(2000)))}
		d.deadlineX = 2 + (0.8*d.slowX-2)*r.Float64()
		d.rate = math.Exp(r.Float64() * math.Log(300))
		for _, k := range []string{"gradient", "aimd"} {
			var src shed.LimitSource
			if k == "gradient" {
				src, _ = NewGradient(GradientConfig{MaxLimit: 5000})
			} else {
				src, _ = NewAIMD(AIMDConfig{MaxLimit: 5000})
			}
			limits := d.run(src, 600, uint64(trial))
			below := 0
			for _, l := range limits[300:] {
				if float64(l) < d.demand() {
					below++
				}
			}
			if below > 30 {
				t.Errorf("%s: %+v: limit below the %.1f in flight the load needs for %d of the last 300 s (last %d)",
					k, d, d.demand(), below, limits[len(limits)-1])
			}
		}
	}
}
