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
)

func TestAIMDDefaults(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := AIMDConfig{
		InitialLimit: DefaultInitialLimit, MinLimit: DefaultMinLimit, MaxLimit: DefaultMaxLimit,
		Increase: DefaultIncrease, Backoff: DefaultBackoff, Growth: DefaultGrowth, MinUtilization: DefaultAIMDMinUtilization,
		DropTolerance: DefaultDropTolerance, LatencyTolerance: DefaultAIMDLatencyTolerance,
		Window: WindowConfig{MinDuration: DefaultMinWindow, MaxDuration: DefaultMaxWindow, MinSamples: DefaultMinSamples},
	}
	if !reflect.DeepEqual(a.cfg, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", a.cfg, want)
	}
	if a.Limit() != DefaultInitialLimit {
		t.Fatalf("initial limit %d", a.Limit())
	}
}

func TestAIMDConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   AIMDConfig
		field string
	}{
		{AIMDConfig{MinLimit: -1}, "AIMDConfig.MinLimit"},
		{AIMDConfig{MinLimit: 10, MaxLimit: 5}, "AIMDConfig.MaxLimit"},
		{AIMDConfig{InitialLimit: 2000, MaxLimit: 1500}, "AIMDConfig.InitialLimit"},
		{AIMDConfig{InitialLimit: math.MaxInt}, "AIMDConfig.InitialLimit"},
		{AIMDConfig{Increase: -1}, "AIMDConfig.Increase"},
		{AIMDConfig{Backoff: 1.5}, "AIMDConfig.Backoff"},
		{AIMDConfig{Growth: 0.5}, "AIMDConfig.Growth"},
		{AIMDConfig{Growth: math.Inf(1)}, "AIMDConfig.Growth"},
		{AIMDConfig{Backoff: math.NaN()}, "AIMDConfig.Backoff"},
		{AIMDConfig{MinUtilization: -1}, "AIMDConfig.MinUtilization"},
		{AIMDConfig{DropTolerance: 1}, "AIMDConfig.DropTolerance"},
		{AIMDConfig{DropTolerance: math.NaN()}, "AIMDConfig.DropTolerance"},
		{AIMDConfig{DropTolerance: math.Inf(-1)}, "AIMDConfig.DropTolerance"},
		{AIMDConfig{LatencyTolerance: 0.5}, "AIMDConfig.LatencyTolerance"},
		{AIMDConfig{LatencyTolerance: math.NaN()}, "AIMDConfig.LatencyTolerance"},
		{AIMDConfig{Window: WindowConfig{Quantile: 2}}, "AIMDConfig.Window.Quantile"},
	} {
		_, err := NewAIMD(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("NewAIMD(%+v) = %v, want an ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// Additive increase only while the limit is in use and nothing dropped;
// multiplicative decrease on drops (deeper for more of them) or a slow
// window; after a run of
// congested windows, back to the limit the run's first cut left.
func TestAIMDRules(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{InitialLimit: 100, Increase: 5, LatencyThreshold: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(a)
	ms := time.Millisecond
	for _, step := range []struct {
		name             string
		n, drops, flight int
		lat              time.Duration
		want             int
		reason           Reason
	}{
		// Slow start, capped at 75 / MinUtilization = 100: +Increase.
		{"in use, fast", 20, 0, 75, 10 * ms, 105, ReasonSlowStart},
		{"not in use", 20, 0, 78, 10 * ms, 105, ReasonUnused},
		{"in use after slow start", 20, 0, 79, 10 * ms, 110, ReasonGrow},
		{"slow", 20, 0, 110, 60 * ms, 99, ReasonCutCeiling},
		// Drops clearly above the tolerance (while the background is
		// learned) cut by their share beyond the background (none yet),
		// by Backoff at least and by half at most.
		{"drops, 30%", 140, 60, 99, 10 * ms, 69, ReasonCutDrops},
		{"drops, 40%", 120, 80, 69, 10 * ms, 41, ReasonCutDrops},
		{"in use again: toward the first cut", 20, 0, 40, 10 * ms, 83, ReasonRegrow},
		{"back to the first cut", 20, 0, 70, 10 * ms, 99, ReasonRegrow},
		{"then additive", 20, 0, 99, 10 * ms, 104, ReasonGrow},
	} {
		if got := f.window(step.n, step.drops, step.flight, constant(step.lat)); got != step.want || a.State().Reason != step.reason {
			t.Fatalf("%s: limit %d (%s), want %d (%s)", step.name, got, a.State().Reason, step.want, step.reason)
		}
	}
}

// TestAIMDDropTolerance: a background of timeouts that admitting less
// does not change (8%, below DefaultDropTolerance) leaves the limit alone;
// timeouts above the tolerance cut it (until an episode shows that
// cutting does not reduce them, when they become the background, as for
// Gradient); errors as fast as the successes below the limit are the
// dependency's, and do not cut it; a negative tolerance cuts on any drop,
// as Netflix's AIMD.
func TestAIMDDropTolerance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tolerance float64
		share     float64
		slow      float64 // latency of a drop / a success's; 0: as fast
		cut       bool
	}{
		{"background 8%", 0, 0.08, 3, false},
		{"overload 40%", 0, 0.4, 3, true},
		{"errors 40%", 0, 0.4, 0, false},
		{"any drop", -1, 0.08, 0, true},
		{"tolerance 0.5, 40%", 0.5, 0.4, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{DropTolerance: tc.tolerance})
			if err != nil {
				t.Fatal(err)
			}
			m := newModel(healthyRate, healthyLatency)
			steady := m.settle(t, a, 1000)
			m.dropRand, m.dropProb, m.dropSlow = rand.New(rand.NewPCG(1, 2)), tc.share, tc.slow
			got := m.run(a, 20)
			t.Logf("steady %d, with %.0f%% drops: %v", steady, 100*tc.share, got)
			if low := slices.Min(got); tc.cut != (low < steady) {
				t.Fatalf("lowest limit %d from %d: cut = %v, want %v", low, steady, low < steady, tc.cut)
			}
			if tc.cut && slices.Min(got) > steady*3/4 {
				t.Fatalf("20 windows of drops above the tolerance cut the limit to %d of %d at most, want by a quarter or more", slices.Min(got), steady)
			}
		})
	}
}

// TestAIMDSlowStart: from 20, with 1,000 requests in flight if nothing
// limits them, AIMD grows by Growth per window until the first congested
// window (the limit binds, so its peak says nothing of the demand beyond
// it; TestAIMDRules caps a limit that does not bind at in-flight /
// MinUtilization); after it, never past the first cut again, and once
// settled by Increase only.
func TestAIMDSlowStart(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{LatencyThreshold: 15 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(100_000, healthyLatency)
	m.latency = knee(healthyLatency, 500) // 15 ms at 750 in flight
	ramp := m.run(a, 14)
	t.Logf("ramp: %v", ramp)
	if ramp[0] != 40 || ramp[1] != 80 {
		t.Fatalf("slow start %v: want 40, 80, ... (x2 per window that the limit binds)", ramp)
	}
	if i := slices.IndexFunc(ramp, func(l int) bool { return l >= 500 }); i < 0 || i > 5 {
		t.Fatalf("slow start %v did not reach the knee at 500 within 6 windows", ramp)
	}
	cut := -1
	for i := 1; i < len(ramp); i++ {
		if ramp[i] < ramp[i-1] {
			cut = i
			break
		}
	}
	if cut < 0 {
		t.Fatalf("no congestion in %v", ramp)
	}
	after := m.run(a, 100)
	t.Logf("after the first congestion: %v", after)
	prev, firstCut := ramp[len(ramp)-1], ramp[cut]
	for i, l := range after {
		// Past the first congestion, steps above Increase only return
		// to the limit the first cut left, never above it.
		if l-prev > DefaultIncrease && l > firstCut {
			t.Fatalf("window %d after: the limit jumped from %d to %d, past the first cut's %d (%v)", i, prev, l, firstCut, after)
		}
		prev = l
	}
	// Once the cuts that follow each return have brought it down, the
	// limit stays around the knee. The median read through the window
	// histogram is within 3.2%: the threshold may be crossed up to 3.2%
	// past 750.
	if lo, hi := slices.Min(after[20:]), slices.Max(after[20:]); lo < 600 || hi > 780 {
		t.Fatalf("20 windows after the first congestion the limit ranged over [%d, %d], want within [600, 780] around the 750 that congests", lo, hi)
	}

	// Growth 1 is Netflix's AIMD: +Increase per window from the start.
	b, err := NewAIMD(AIMDConfig{Growth: 1})
	if err != nil {
		t.Fatal(err)
	}
	m = newModel(100_000, healthyLatency)
	if got := m.run(b, 3); !slices.Equal(got, []int{21, 22, 23}) {
		t.Fatalf("Growth 1: %v, want [21 22 23]", got)
	}
}

// learnedAIMD returns a default AIMD started at 100 that learned a
// baseline of 10 ms over twice BaselineWindows windows with 80 in flight.
func learnedAIMD(t *testing.T) (*AIMD, *feed) {
	t.Helper()
	a, err := NewAIMD(AIMDConfig{InitialLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(a)
	for range 2 * DefaultBaselineWindows {
		f.window(20, 0, 80, constant(10*time.Millisecond))
	}
	return a, f
}

// TestAIMDStaysOffAQueueItCut: once a run of cuts has brought the
// latency back under the tolerance, the default AIMD does not slow-start
// back to the limit its first cut left, which would re-admit the queue
// the cuts removed: the throughput held with less in flight, so the rest
// is queue too and it goes on cutting (cut-queue), as Gradient does; once
// a cut costs throughput it returns to the knee and grows by Increase.
// (With LatencyThreshold set, and so no baseline to tell a recovered
// dependency by, it still returns there: see TestAIMDRules.)
func TestAIMDStaysOffAQueueItCut(t *testing.T) {
	a, f := learnedAIMD(t)
	ms := time.Millisecond
	start := a.Limit()
	for range 3 { // a queue: cut three times
		f.window(20, 0, a.Limit(), constant(30*ms))
	}
	cut := a.Limit()
	// Still above the baseline (no regrow), under the tolerance.
	var got []int
	for range 10 {
		got = append(got, f.window(20, 0, a.Limit(), constant(12*ms)))
	}
	grew := 0 // after the return to the knee
	for i := 2; i < len(got); i++ {
		grew = max(grew, got[i]-got[i-1])
	}
	if got[0] >= cut || grew > DefaultIncrease {
		t.Fatalf("from %d, cut to %d: under the tolerance %v, want a cut-queue first, then growth by at most %d a window",
			start, cut, got, DefaultIncrease)
	}
}

// TestAIMDHoldsWhileAQueueForms: a window whose latency is above the
// square root of the tolerance (x1.41 the baseline) but below congestion
// (x2) holds the limit: growing by Increase until the latency doubles
// builds that much queue first, and replicas sharing a dependency build it
// together. Below the square root, the limit grows again.
func TestAIMDHoldsWhileAQueueForms(t *testing.T) {
	a, f := learnedAIMD(t)
	ms := time.Millisecond
	before := a.Limit()
	inUse := before * 8 / 10 // used (MinUtilization 0.75), not binding
	if got := f.window(20, 0, inUse, constant(16*ms)); got != before || a.State().Reason != ReasonQueue {
		t.Fatalf("x1.6 the baseline: limit %d -> %d (%s), want held by %s", before, got, a.State().Reason, ReasonQueue)
	}
	if got := f.window(20, 0, inUse, constant(12*ms)); got != before+DefaultIncrease || a.State().Reason != ReasonGrow {
		t.Fatalf("x1.2 the baseline: limit %d -> %d (%s), want +%d by %s", before, got, a.State().Reason, DefaultIncrease, ReasonGrow)
	}
}

// TestAIMDLearnsNoQueue: a dependency that queues past 60 in flight, with
// demand for far more. Slow start overshoots, the cuts bring the latency
// under the tolerance, and the first steady windows that follow still
// bind over a queue: had they taught the baseline, each queue would be
// taken for the normal and the limit would grow past twice the knee's
// latency for good. It stays within the tolerance (x2: 120 in flight)
// plus one Increase.
func TestAIMDLearnsNoQueue(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(100*healthyRate, healthyLatency)
	m.latency = knee(healthyLatency, 60)
	limits := m.run(a, 100)
	t.Logf("knee at 60: %v", limits)
	if top := slices.Max(limits[20:]); top > 121 {
		t.Fatalf("the limit reached %d after the first 20 windows, want at most 121", top)
	}
}

// TestAIMDShrinksAnUnusedLimit: a limit that BaselineWindows windows in a
// row left unused falls to what their largest work in flight uses to
// MinUtilization, and not before.
func TestAIMDShrinksAnUnusedLimit(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{InitialLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(a)
	for i := range DefaultBaselineWindows - 1 {
		if got := f.window(200, 0, 10, constant(10*time.Millisecond)); got != 100 {
			t.Fatalf("%d unused windows: limit %d, want 100", i+1, got)
		}
	}
	// At most 10 in flight: 10 / 0.75.
	if got := f.window(200, 0, 10, constant(10*time.Millisecond)); got != 13 || a.State().Reason != ReasonUnused {
		t.Fatalf("after %d unused windows: limit %d (%s), want 13 by unused", DefaultBaselineWindows, got, a.State().Reason)
	}
}

// TestAIMDFindsAThrashingDependency: one server that thrashes, each job
// slower the more wait behind it, at 60% load, with 44 ms deadlines. The
// first limit (20) is far above its capacity, so every window after the
// first holds a queue, and the first window alone, whose work in flight
// grew from nothing, shows the fast service. Its drops make it congested;
// had that kept it from seeding the baseline, the first window without
// drops, at 7 in flight and 40 ms, would be taken for the dependency's
// normal, and AIMD would serve a third of the demand or less for good.
func TestAIMDFindsAThrashingDependency(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFeed(a)
	f.window(30, 90, 14, constant(1500*time.Microsecond))
	m := newModel(600, 0)
	m.now, m.primed, m.deadline = f.now, true, 44*time.Millisecond
	m.latency = func(n int) time.Duration { // n jobs: n-1 wait, each slowed by the wait
		return time.Duration(float64(n) * min(10, 1+0.8*float64(n-1)) * float64(time.Millisecond))
	}
	got := m.run(a, 60)
	// Up to 3 in flight the server keeps up (4 ms, three times the demand).
	if top := slices.Max(got[30:]); top > 3 {
		t.Fatalf("limits %v: reached %d after the first 30 windows, want at most 3", got, top)
	}
}
