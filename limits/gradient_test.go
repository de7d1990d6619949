package limits

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func newGradient(t *testing.T, cfg GradientConfig) *Gradient {
	t.Helper()
	g, err := NewGradient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGradientDefaults(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	c := g.cfg
	want := GradientConfig{
		InitialLimit: DefaultInitialLimit, MinLimit: DefaultMinLimit, MaxLimit: DefaultMaxLimit,
		Tolerance: DefaultTolerance, Smoothing: DefaultSmoothing, Growth: DefaultGrowth,
		Backoff: DefaultBackoff, MinUtilization: DefaultMinUtilization,
		RelearnWindows: DefaultRelearnWindows, BaselineWindows: DefaultBaselineWindows,
		Window: WindowConfig{MinDuration: DefaultMinWindow, MaxDuration: DefaultMaxWindow, MinSamples: DefaultMinSamples},
	}
	c.QueueAllowance = nil
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", c, want)
	}
	if q := g.cfg.QueueAllowance(400); q != 20 {
		t.Fatalf("default queue allowance at 400 = %v, want sqrt = 20", q)
	}
	if g.Limit() != DefaultInitialLimit {
		t.Fatalf("initial limit %d", g.Limit())
	}
	// An initial limit left zero is clamped into a non-default range.
	if g := newGradient(t, GradientConfig{MinLimit: 50, MaxLimit: 60}); g.Limit() != 50 {
		t.Fatalf("initial limit with MinLimit 50: %d", g.Limit())
	}
}

func TestGradientConfigErrors(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		cfg   GradientConfig
		field string
	}{
		{GradientConfig{MinLimit: -1}, "GradientConfig.MinLimit"},
		{GradientConfig{MaxLimit: -1}, "GradientConfig.MaxLimit"},
		{GradientConfig{MinLimit: 10, MaxLimit: 5}, "GradientConfig.MaxLimit"},
		{GradientConfig{InitialLimit: -3}, "GradientConfig.InitialLimit"},
		{GradientConfig{InitialLimit: 5, MinLimit: 10}, "GradientConfig.InitialLimit"},
		{GradientConfig{InitialLimit: 50, MaxLimit: 10}, "GradientConfig.InitialLimit"},
		{GradientConfig{Tolerance: 1}, "GradientConfig.Tolerance"},
		{GradientConfig{Tolerance: 0.5}, "GradientConfig.Tolerance"},
		{GradientConfig{Tolerance: nan}, "GradientConfig.Tolerance"},
		{GradientConfig{Tolerance: math.Inf(1)}, "GradientConfig.Tolerance"},
		{GradientConfig{Smoothing: -0.1}, "GradientConfig.Smoothing"},
		{GradientConfig{Smoothing: 1.1}, "GradientConfig.Smoothing"},
		{GradientConfig{Growth: 1}, "GradientConfig.Growth"},
		{GradientConfig{Backoff: 1}, "GradientConfig.Backoff"},
		{GradientConfig{Backoff: -0.5}, "GradientConfig.Backoff"},
		{GradientConfig{MinUtilization: 1.5}, "GradientConfig.MinUtilization"},
		{GradientConfig{DropTolerance: 1}, "GradientConfig.DropTolerance"},
		{GradientConfig{DropTolerance: nan}, "GradientConfig.DropTolerance"},
		{GradientConfig{LatencyCeiling: -time.Second}, "GradientConfig.LatencyCeiling"},
		{GradientConfig{RelearnWindows: -1}, "GradientConfig.RelearnWindows"},
		{GradientConfig{BaselineWindows: -1}, "GradientConfig.BaselineWindows"},
		{GradientConfig{Window: WindowConfig{MinDuration: -1}}, "GradientConfig.Window.MinDuration"},
		{GradientConfig{Window: WindowConfig{MinDuration: 2 * time.Second, MaxDuration: time.Second}}, "GradientConfig.Window.MaxDuration"},
		{GradientConfig{Window: WindowConfig{MinSamples: -1}}, "GradientConfig.Window.MinSamples"},
		{GradientConfig{Window: WindowConfig{Quantile: 1.01}}, "GradientConfig.Window.Quantile"},
	} {
		_, err := NewGradient(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("NewGradient(%+v) = %v, want an ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// Slow start doubles the limit every window until it meets congestion (or
// the maximum).
func TestGradientSlowStartDoubles(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	m := newModel(1_000_000, healthyLatency) // 10,000 would be in flight
	got := m.run(g, 7)
	want := []int{40, 80, 160, 320, 640, 1000, 1000}
	if !slices.Equal(got, want) {
		t.Fatalf("slow start %v, want %v", got, want)
	}
	if p := g.State().Phase; p != PhaseSlowStart {
		t.Fatalf("phase %v, want slow start: there was no congestion", p)
	}
}

// A limit that is not in use learns nothing and does not grow.
func TestNoGrowthWhileUnused(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			src := k.new(t)
			m := newModel(500, healthyLatency) // 5 in flight, limit 20
			if limits := m.run(src, 100); slices.Max(limits) != 20 {
				t.Fatalf("limit grew to %d with 5 in flight", slices.Max(limits))
			}
		})
	}
}

// A latency above the ceiling cuts the limit even when it is stable (the
// baseline has learned it), down to MinLimit, where it stays.
func TestGradientLatencyCeiling(t *testing.T) {
	g := newGradient(t, GradientConfig{LatencyCeiling: 30 * time.Millisecond, MinLimit: 5})
	m := newModel(healthyRate, 50*time.Millisecond)
	limits := m.run(g, 200)
	for i := 1; i < len(limits); i++ {
		if limits[i] > limits[i-1] {
			t.Fatalf("window %d: limit climbed %d -> %d above the ceiling: %v", i, limits[i-1], limits[i], limits)
		}
	}
	if limits[len(limits)-1] != 5 {
		t.Fatalf("limit %d after 200 windows above the ceiling, want MinLimit 5", limits[len(limits)-1])
	}
	// Without the ceiling the same stable latency is the baseline, and
	// the limit grows to serve the 500 in flight.
	g = newGradient(t, GradientConfig{})
	m = newModel(healthyRate, 50*time.Millisecond)
	if l := m.run(g, 20)[19]; l < 500 {
		t.Fatalf("without a ceiling the limit is %d, want >= 500", l)
	}
}

// A lasting latency shift that admitting less does not cure is re-learned
// once, after which the limit is stable: no periodic dips (Envoy's minRTT
// probing pins the limit low every interval).
func TestGradientRelearnsWithoutBursts(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	m := newModel(healthyRate, healthyLatency)
	steady := m.settle(t, g, 100)

	m.latency = flat(slowLatency)
	var limits []int
	for range 300 {
		before := g.State().Relearned
		l := m.runWindow(g)
		// The window that re-learns restores the knee of the episode
		// (160: cutting below it lost throughput) at once.
		if g.State().Relearned > before && float64(l) < 0.8*float64(steady) {
			t.Fatalf("the window that re-learned left the limit at %d, want the knee, 80%% of %d", l, steady)
		}
		limits = append(limits, l)
	}
	st := g.State()
	if st.Relearned != 1 || st.Baseline != slowLatency {
		t.Fatalf("after 300 windows at 20 ms: %+v, want the baseline re-learned once to 20ms", st)
	}
	// Halving the 200 in flight takes a few windows, RelearnWindows more
	// gather evidence, then recovery grows back to the anchor's in-flight.
	first := slices.IndexFunc(limits, func(l int) bool { return float64(l) >= 0.9*float64(steady) })
	t.Logf("limit back to >= 90%% of %d at window %d: %v", steady, first, limits[:first+1])
	if first < 0 || first > 25 {
		t.Fatalf("limit did not recover within 25 windows: %v", limits)
	}
	if low := slices.Min(limits[first:]); float64(low) < 0.9*float64(steady) {
		t.Fatalf("limit dipped to %d after re-learning: %v", low, limits[first:])
	}
	// While gathering evidence it held once the in-flight work was halved
	// (the last cut may overshoot half by one step) instead of cutting to
	// the floor.
	if low := slices.Min(limits); float64(low) < 0.4*float64(steady) {
		t.Fatalf("limit fell to %d while re-learning, want a hold near half of %d", low, steady)
	}
}

// After a re-learned slowdown ends, the baseline comes down within a few
// windows, so that a new slowdown is noticed at once.
func TestGradientBaselineRecoversDownwards(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	m := newModel(healthyRate, healthyLatency)
	m.settle(t, g, 100)
	m.latency = flat(slowLatency)
	m.run(g, 100)
	if b := g.State().Baseline; b != slowLatency {
		t.Fatalf("baseline %v, want re-learned to 20ms", b)
	}
	m.latency = flat(healthyLatency)
	m.run(g, 5)
	if b := g.State().Baseline; b > 11*time.Millisecond {
		t.Fatalf("5 windows after recovery the baseline is %v, want <= 11ms", b)
	}
	before := g.Limit()
	m.latency = flat(slowLatency)
	if after := m.runWindow(g); after >= before {
		t.Fatalf("a new slowdown did not cut the limit at once: %d -> %d", before, after)
	}
}

// Samples of any duration count: sub-millisecond latencies (which the Go
// port's windowed limit discards below 100 ms) and zero (virtual time).
func TestGradientLearnsFromFastSamples(t *testing.T) {
	for _, base := range []time.Duration{0, 50 * time.Microsecond} {
		g := newGradient(t, GradientConfig{})
		m := newModel(2_000_000, base) // 100 in flight at 50 µs
		m.latency = func(int) time.Duration { return base }
		if base == 0 {
			// Little's law gives nothing in flight at zero latency: drive
			// the in-flight count directly.
			m.rate = math.Inf(1)
		}
		steady := m.settle(t, g, 100)
		if base == 0 {
			if steady != DefaultMaxLimit {
				t.Fatalf("zero-latency work fills any limit; limit %d", steady)
			}
			continue
		}
		m.latency = flat(2 * base)
		if l := slices.Min(m.run(g, 10)); float64(l) > 0.6*float64(steady) {
			t.Fatalf("at %v -> %v the limit went from %d down to %d at most, want <= 60%%", base, 2*base, steady, l)
		}
	}
}

// An untimed drop (its latency was not measured) is still congestion.
func TestGradientUntimedDropCuts(t *testing.T) {
	g := newGradient(t, GradientConfig{InitialLimit: 100, Window: WindowConfig{MinSamples: 1}})
	t0 := time.Unix(0, 0)
	g.Observe(shed.Sample{Now: t0, Timed: true, Latency: time.Millisecond, InFlight: 1})
	g.Observe(shed.Sample{Now: t0.Add(time.Second), Dropped: true, InFlight: 100})
	if l := g.Limit(); l != 90 {
		t.Fatalf("limit %d after an untimed drop, want 90", l)
	}
}

func TestGradientDropTolerance(t *testing.T) {
	g := newGradient(t, GradientConfig{InitialLimit: 100, DropTolerance: 0.05})
	now := time.Unix(0, 0)
	g.Observe(shed.Sample{Now: now}) // opens the first window
	// Windows of 100 samples with 10 in flight: the limit of 100 is not
	// in use, so only drops move it.
	feed := func(drops int) int {
		step := time.Second / 100
		for i := range 100 {
			now = now.Add(step)
			g.Observe(shed.Sample{Now: now, Timed: true, Latency: healthyLatency, InFlight: 10, Dropped: i < drops})
		}
		return g.Limit()
	}
	if l := feed(0); l != 100 {
		t.Fatalf("no drops: limit %d, want 100", l)
	}
	if l := feed(4); l != 100 {
		t.Fatalf("4%% drops with DropTolerance 5%%: limit %d, want 100", l)
	}
	// A window of 100 samples measures a rate within about two standard
	// errors (4.4 points at 5%): 9% is noise around the tolerance, 10% is
	// over it.
	if l := feed(9); l != 100 {
		t.Fatalf("9%% drops in 100 samples with DropTolerance 5%%: limit %d, want 100", l)
	}
	if l := feed(10); l != 90 {
		t.Fatalf("10%% drops with DropTolerance 5%%: limit %d, want 90", l)
	}
}

func TestGradientQueueAllowanceMisbehaving(t *testing.T) {
	for _, f := range []func(float64) float64{
		func(float64) float64 { return math.NaN() },
		func(float64) float64 { return -5 },
		func(float64) float64 { return math.Inf(1) },
	} {
		g := newGradient(t, GradientConfig{QueueAllowance: f, InitialLimit: 100, Growth: 1.5})
		m := newModel(1_000_000, healthyLatency)
		m.latency = knee(healthyLatency, 200)
		for _, l := range m.run(g, 50) {
			if l < 1 || l > DefaultMaxLimit {
				t.Fatalf("limit %d out of range", l)
			}
		}
	}
}

func TestPhaseString(t *testing.T) {
	for p, want := range map[Phase]string{PhaseSlowStart: "slow-start", PhaseSteady: "steady", PhaseCongested: "congested", PhaseRecovery: "recovery", 9: "unknown"} {
		if p.String() != want {
			t.Errorf("%d: %q", p, p.String())
		}
	}
}

// TestGradientForgetsTheSlowdown: a dependency with a knee at 500 in flight
// slows down ten-fold (Gradient re-learns the slow latency), then recovers.
// The baseline must return to the healthy latency rather than settle on
// the queueing that a grown limit causes: the limit comes back to the
// knee's range, not above it.
func TestGradientForgetsTheSlowdown(t *testing.T) {
	g, err := NewGradient(GradientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(100_000, healthyLatency)
	m.latency = knee(healthyLatency, 500)
	m.run(g, 100)
	before := g.State()
	t.Logf("healthy: %+v", before)

	m.latency = knee(10*healthyLatency, 500)
	slow := m.run(g, 30)
	t.Logf("slowed ten-fold: %v", slow)
	if st := g.State(); st.Relearned == 0 {
		t.Fatalf("the slowdown was not re-learned: %+v", st)
	}

	m.latency = knee(healthyLatency, 500)
	back := m.run(g, 60)
	t.Logf("recovered: %v", back)
	st := g.State()
	if st.Baseline > before.Baseline*11/10 {
		t.Fatalf("baseline %v after recovery, want near the healthy %v", st.Baseline, before.Baseline)
	}
	if hi := slices.Max(back[30:]); hi > 650 {
		t.Fatalf("limit up to %d in the last 30 windows after recovery, want <= 650 (knee 500, tolerance 1.2)", hi)
	}
}

// TestGradientBackgroundDropsDoNotSpiral: a dependency with a knee at 500
// in flight slows down ten-fold and from then on fails 8% of requests
// whatever is admitted. Gradient re-learns the latency and the drop rate
// (from few samples, so the rate is noisy); drops around that background
// at a normal latency must not cut the limit far below the work in flight
// at which it was learned, window after window.
func TestGradientBackgroundDropsDoNotSpiral(t *testing.T) {
	for seed := range uint64(8) {
		g, err := NewGradient(GradientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(100_000, healthyLatency)
		m.latency = knee(healthyLatency, 500)
		m.run(g, 60)

		m.latency = knee(10*healthyLatency, 500)
		m.dropRand, m.dropProb = rand.New(rand.NewPCG(seed, 7)), 0.08
		slow := m.run(g, 120)
		if st := g.State(); st.Relearned == 0 {
			t.Fatalf("seed %d: the slowdown was not re-learned: %+v", seed, st)
		}
		if lo := slices.Min(slow[60:]); lo < 250 {
			t.Errorf("seed %d: the limit fell to %d in the last 60 windows (knee 500): %v", seed, lo, slow)
		}
	}
}

// TestGradientPreciseWindowsTighten: once its baseline is averaged over
// BaselineWindows windows, a Gradient whose windows measure their mean
// latency precisely (100 samples with +-25% jitter: a standard error of
// 1.4%) cuts at 1.1 x the baseline instead of Tolerance (1.2): in front of
// a knee at 500 in flight it keeps about 550 in flight, not 600. Until the
// baseline is learned, or with a quantile statistic, Tolerance holds.
func TestGradientPreciseWindowsTighten(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    GradientConfig
		lo, hi int
	}{
		{"learned", GradientConfig{}, 530, 575},
		{"still learning", GradientConfig{BaselineWindows: 1000}, 585, 640},
		{"p90", GradientConfig{Window: WindowConfig{Quantile: 0.9}}, 585, 640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGradient(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(30_000, healthyLatency) // 300 in flight: under the knee
			m.latency = knee(healthyLatency, 500)
			m.jitter, m.jitterFrac = rand.New(rand.NewPCG(1, 2)), 0.25
			m.run(g, 40)
			m.rate = 100_000 // 1,000 would be in flight
			got := m.run(g, 200)[100:]
			mean := 0
			for _, l := range got {
				mean += l
			}
			mean /= len(got)
			t.Logf("limit over the last 100 windows: mean %d, range [%d, %d]", mean, slices.Min(got), slices.Max(got))
			if mean < tc.lo || mean > tc.hi {
				t.Fatalf("mean limit %d, want in [%d, %d]", mean, tc.lo, tc.hi)
			}
		})
	}
}

// TestGradientBenignStepWhileNotBinding: the tighter threshold of precise
// windows applies only while the limit binds. A dependency whose latency
// steps up by 12% (a deploy, a colder cache) while the service runs well
// under its limit is not queueing that the limit causes: Tolerance (1.2)
// holds, and the limit is not cut.
func TestGradientBenignStepWhileNotBinding(t *testing.T) {
	g, err := NewGradient(GradientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(30_000, healthyLatency) // 300 in flight: under the knee
	m.latency = knee(healthyLatency, 500)
	m.jitter, m.jitterFrac = rand.New(rand.NewPCG(3, 4)), 0.25
	before := m.run(g, 60)[59]
	m.latency = knee(healthyLatency*112/100, 500)
	after := m.run(g, 60)
	t.Logf("limit %d before the step, after it: %v", before, after)
	if lo := slices.Min(after); lo < before*95/100 {
		t.Fatalf("a 12%% latency step well under the limit cut it from %d to %d", before, lo)
	}
}

// TestGradientOnsetWindowIsNotTheBestThroughput: a dependency loses most
// of its capacity. The window in which that begins still holds fast
// completions of earlier work, so by Little's law it shows a throughput
// (in flight / latency) above what the dependency now serves. Cutting then
// keeps the real throughput (the queue shortens and the latency falls with
// it): the episode must go on cutting, not take the lower throughput for
// work lost and re-learn the queueing latency as the new normal.
func TestGradientOnsetWindowIsNotTheBestThroughput(t *testing.T) {
	g := newGradient(t, GradientConfig{InitialLimit: 200})
	now := t0
	g.Observe(shed.Sample{Now: now})
	window := func(lat time.Duration, inFlight, timed, drops int) int {
		step := time.Second / time.Duration(timed+drops)
		for i := range timed + drops {
			now = now.Add(step)
			s := shed.Sample{Now: now, InFlight: inFlight}
			if i < timed {
				s.Timed, s.Latency = true, lat
			} else {
				s.Dropped = true
			}
			g.Observe(s)
		}
		return g.Limit()
	}
	base := 50 * time.Millisecond
	for range 25 {
		window(base, 70, 1000, 0)
	}
	if st := g.State(); st.Baseline != base || st.Limit != 200 {
		t.Fatalf("healthy: %+v, want baseline %v and limit 200", st, base)
	}
	// Onset: 80 in flight at 8.6x the latency reads as 186 requests/s;
	// the dependency now serves about 137 (7 in flight at the healthy
	// 50 ms, without a queue).
	got := []int{window(430*time.Millisecond, 80, 100, 2)}
	got = append(got, window(0, 150, 0, 100))                     // every request times out
	got = append(got, window(800*time.Millisecond, 110, 100, 30)) // x = 137
	got = append(got, window(555*time.Millisecond, 76, 120, 5))   // x = 137
	got = append(got, window(490*time.Millisecond, 67, 130, 0))   // x = 137
	got = append(got, window(420*time.Millisecond, 57, 135, 0))   // x = 136: 48% less in flight
	got = append(got, window(350*time.Millisecond, 48, 137, 0))   // x = 137
	got = append(got, window(300*time.Millisecond, 41, 137, 0))   // x = 137
	got = append(got, window(300*time.Millisecond, 41, 137, 0))   // closes the last one
	st := g.State()
	t.Logf("limits %v, state %+v", got, st)
	if st.Relearned != 0 || st.Baseline != base {
		t.Fatalf("the queue was re-learned as the new normal: %+v", st)
	}
	if last := got[len(got)-1]; last > 50 {
		t.Fatalf("limit %d after the latency kept falling with each cut, want it cut on to 50 or less", last)
	}
}

// TestGradientAllDroppedCutsDeeper: one window in which everything timed
// out (a slowdown's onset catches the work started just before it) cuts
// by Backoff; from the second such window in a row, the work in flight is
// far beyond what the dependency serves, and each cuts by a quarter.
func TestGradientAllDroppedCutsDeeper(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	m := newModel(healthyRate, healthyLatency)
	steady := m.settle(t, g, 100)
	m.drop, m.untimed = true, true
	got := m.run(g, 3)
	t.Logf("steady %d, then every request dropped: %v", steady, got)
	want := []int{int(float64(steady) * 0.9), int(float64(steady) * 0.9 * 0.75), int(float64(steady) * 0.9 * 0.75 * 0.75)}
	for i := range want {
		if d := got[i] - want[i]; d < -1 || d > 1 {
			t.Fatalf("limits %v, want about %v (x0.9, then x0.75 per window)", got, want)
		}
	}
	// One such window between healthy ones cuts by Backoff only.
	m.drop, m.untimed = false, false
	m.settle(t, g, 200)
	before := g.Limit()
	m.drop, m.untimed = true, true
	one := m.run(g, 1)[0]
	if want := int(float64(before) * 0.9); one < want-1 {
		t.Fatalf("a single window of drops cut %d to %d, want %d (Backoff)", before, one, want)
	}
}

// TestGradientCutsToLittlesLawOnceTheQueueIsOurs: a dependency that served
// 500 in flight at 10 ms loses nine servers in ten. Cutting keeps its
// throughput and shortens the queue; once the episode has shown that,
// Gradient cuts straight toward the in-flight work that serves the same
// throughput at its tolerance (Little's law), at most halving per window,
// instead of a quarter every other window.
func TestGradientCutsToLittlesLawOnceTheQueueIsOurs(t *testing.T) {
	g := newGradient(t, GradientConfig{})
	m := newModel(40_000, healthyLatency) // 400 in flight
	m.latency = knee(healthyLatency, 500)
	steady := m.settle(t, g, 200)
	m.latency = knee(healthyLatency, 50) // 5,000 requests/s at most
	got := m.run(g, 12)
	t.Logf("steady %d, after the loss: %v", steady, got)
	// At 5,000/s and the 1.2 tolerance, 60 in flight.
	i := slices.IndexFunc(got, func(l int) bool { return l <= 75 })
	if i < 0 || i > 7 {
		t.Fatalf("limits %v: want at most 75 within 8 windows", got)
	}
	if st := g.State(); st.Relearned != 0 {
		t.Fatalf("the queue was re-learned as the new normal: %+v", st)
	}

	// The servers come back. The limit binds and the latency is at the
	// healthy baseline: it grows by half per window, not by sqrt(limit),
	// and is back above the 400 in flight within 8 windows.
	m.latency = knee(healthyLatency, 500)
	back := m.run(g, 8)
	t.Logf("servers back: %v", back)
	if back[len(back)-1] < 400 {
		t.Fatalf("after the loss: %v, want >= 400 within 8 windows", back)
	}
}
