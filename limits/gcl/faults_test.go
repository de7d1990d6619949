package gcl

// Each test here demonstrates one fault of go-concurrency-limits v1.0.0
// that the package documentation lists. They call the library directly;
// adapter_test.go shows what the adapter does about them.

import (
	"math"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"
)

const ms = int64(time.Millisecond)

// WindowedLimit discards every sample faster than 100 ms: its threshold
// is 1e8 ns, commented as 100 microseconds.
func TestFaultWindowedLimitIgnoresSamplesUnder100ms(t *testing.T) {
	for _, tc := range []struct {
		rtt  int64
		want int
	}{
		{99 * ms, 10}, // ignored: a drop that never reaches AIMD
		{100 * ms, 9}, // seen: AIMD backs off 10 -> 9
		{150 * ms, 9},
	} {
		w := limit.NewDefaultWindowedLimit("x", limit.NewDefaultAIMDLimit("x", nil), nil)
		w.OnSample(0, tc.rtt, 20, true)
		if got := w.EstimatedLimit(); got != tc.want {
			t.Errorf("drop of %d ms: limit %d, want %d", tc.rtt/ms, got, tc.want)
		}
	}
}

// WindowedLimit closes a window only on a sample whose in-flight count
// exceeds the window size (10): at 10 or fewer in flight its delegate never
// hears anything, drops included.
func TestFaultWindowedLimitNeedsMoreThan10InFlight(t *testing.T) {
	w := limit.NewDefaultWindowedLimit("x", limit.NewDefaultAIMDLimit("x", nil), nil)
	for i := range int64(1000) {
		w.OnSample(i*int64(time.Second), 150*ms, 10, true)
	}
	if got := w.EstimatedLimit(); got != 10 {
		t.Fatalf("1000 drops at 10 in flight over 1000 s: limit %d, want unchanged 10", got)
	}
}

// WindowedLimit passes on the drop flag of the sample that closes the
// window, not whether the window had a drop: a drop in the middle of a
// window is lost.
func TestFaultWindowedLimitLosesDropsInsideWindow(t *testing.T) {
	w := limit.NewDefaultWindowedLimit("x", limit.NewDefaultAIMDLimit("x", nil), nil)
	sec := int64(time.Second)
	w.OnSample(0, 150*ms, 20, false) // closes the first window: AIMD 10 -> 11
	w.OnSample(sec/2, 150*ms, 20, true)
	w.OnSample(2*sec, 150*ms, 20, false) // closes the window that holds the drop
	if got := w.EstimatedLimit(); got != 12 {
		t.Fatalf("limit %d, want 12: the window with a drop still increased it", got)
	}
}

// DefaultLimiter closes a window only when it holds more than windowSize
// timed successes: under steady timeouts (every request dropped) its limit
// never moves.
func TestFaultDefaultLimiterIgnoresWindowsOfDrops(t *testing.T) {
	l, err := limiter.NewDefaultLimiter(limit.NewDefaultAIMDLimit("x", nil), 1, 1, 1, 10, strategy.NewSimpleStrategy(10), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		ls, ok := l.Acquire(t.Context())
		if !ok {
			t.Fatal("rejected")
		}
		ls.OnDropped()
	}
	if got := l.EstimatedLimit(); got != 10 {
		t.Fatalf("after 1000 drops the limit is %d, want unchanged 10", got)
	}
}

// Gradient2 ignores drops: under steady timeouts at a stable latency the
// limit climbs to its maximum.
func TestFaultGradient2ClimbsUnderSteadyDrops(t *testing.T) {
	g := limit.NewDefaultGradient2Limit("x", nil, nil)
	for range 1000 {
		g.OnSample(0, 10*ms, g.EstimatedLimit(), true)
	}
	if got := g.EstimatedLimit(); got != 200 {
		t.Fatalf("after 1000 drops the limit is %d, want the maximum 200", got)
	}
}

// Gradient2 ramps up by queueSize x smoothing = 0.8 per update: from 20,
// 10 windows without congestion reach 28.
func TestFaultGradient2SlowRampUp(t *testing.T) {
	g := limit.NewDefaultGradient2Limit("x", nil, nil)
	for range 10 {
		g.OnSample(0, 10*ms, g.EstimatedLimit(), false)
	}
	if got := g.EstimatedLimit(); got != 28 {
		t.Fatalf("after 10 updates the limit is %d, want 28", got)
	}
}

// Gradient2's default floor is 20 in flight: at 20x the latency it still
// admits 20.
func TestFaultGradient2FloorOf20(t *testing.T) {
	g := limit.NewDefaultGradient2Limit("x", nil, nil)
	for range 20 {
		g.OnSample(0, 10*ms, g.EstimatedLimit(), false)
	}
	low := math.MaxInt
	for range 100 {
		g.OnSample(0, 200*ms, g.EstimatedLimit(), false)
		low = min(low, g.EstimatedLimit())
	}
	if low != 20 {
		t.Fatalf("lowest limit at 20x latency: %d, want the floor 20", low)
	}
}

// A zero rtt (possible in virtual time, or with a coarse clock) turns
// Gradient2's limit into NaN, which converts to an arbitrary integer.
func TestFaultGradient2ZeroRTT(t *testing.T) {
	g := limit.NewDefaultGradient2Limit("x", nil, nil)
	g.OnSample(0, 0, 10, false)
	if got := g.EstimatedLimit(); got >= 20 && got <= 200 {
		t.Fatalf("limit %d after a zero rtt: the fault is fixed upstream?", got)
	}
}

// Vegas forgets its no-load latency every 15 to 30 x limit samples (a
// random point drawn from math/rand's global source) and re-bases on the
// next sample, congested or not.
func TestFaultVegasRebasesOnCongestedLatency(t *testing.T) {
	v := limit.NewDefaultVegasLimit("x", nil, nil)
	for range 100 {
		v.OnSample(0, 1*ms, v.EstimatedLimit(), false)
	}
	if got := v.RTTNoLoad(); got != 1*ms {
		t.Fatalf("no-load rtt %d", got)
	}
	for range 5000 {
		v.OnSample(0, 10*ms, v.EstimatedLimit(), false)
	}
	if got := v.RTTNoLoad(); got != 10*ms {
		t.Fatalf("no-load rtt %v after 5000 samples at 10 ms, want 10ms (re-based)", time.Duration(got))
	}
}

// The library's AIMD has no maximum and ignores latency.
func TestFaultAIMDNoMaximumNoLatency(t *testing.T) {
	a := limit.NewDefaultAIMDLimit("x", nil)
	for range 5000 {
		a.OnSample(0, int64(time.Hour), a.EstimatedLimit(), false)
	}
	if got := a.EstimatedLimit(); got != 5010 {
		t.Fatalf("limit %d after 5000 one-hour samples, want 5010", got)
	}
}

// Vegas draws the probe point from math/rand's global source: identical
// inputs re-base at different samples, so runs (and simulations) are not
// reproducible.
func TestFaultVegasProbeIsRandom(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		v := limit.NewDefaultVegasLimit("x", nil, nil)
		v.OnSample(0, 1*ms, 1, false)
		for i := range 2000 {
			// One in flight: Vegas holds its limit (20), so only the probe
			// changes the no-load rtt.
			v.OnSample(0, 2*ms, 1, false)
			if v.RTTNoLoad() == 2*ms {
				seen[i] = true
				break
			}
		}
	}
	if len(seen) < 2 {
		t.Fatalf("20 identical runs re-based at %v: the probe is deterministic now?", seen)
	}
}

// DefaultLimiter allocates on every acquire + release (and serializes them
// on one limiter-wide mutex).
func TestFaultDefaultLimiterAllocates(t *testing.T) {
	l, err := limiter.NewDefaultLimiter(limit.NewDefaultGradient2Limit("x", nil, nil), 1e9, 1e9, 1e5, 100, strategy.NewSimpleStrategy(20), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	allocs := testing.AllocsPerRun(100, func() {
		ls, ok := l.Acquire(ctx)
		if !ok {
			t.Fatal("rejected")
		}
		ls.OnSuccess()
	})
	if allocs < 1 {
		t.Fatalf("%v allocations per acquire + release", allocs)
	}
	t.Logf("%v allocations per acquire + release", allocs)
}

// The library's ProbeDisabled is mapped back to the default multiplier by
// its constructor: Vegas still re-bases within 30 x 20 samples (with the
// jitter, 15 to 30 x 20). Tuning.NoProbe passes math.MaxInt32 instead.
func TestFaultVegasProbeDisabledStillProbes(t *testing.T) {
	rebased := func(probe int) bool {
		v := limit.NewVegasLimitWithRegistry("x", 20, nil, 1000, 1.0, nil, nil, nil, nil, nil, probe, nil, nil)
		v.OnSample(0, 1*ms, 1, false)
		for range 700 {
			v.OnSample(0, 2*ms, 1, false)
		}
		return v.RTTNoLoad() == 2*ms
	}
	if !rebased(limit.ProbeDisabled) {
		t.Fatal("ProbeDisabled no longer probes: Tuning.NoProbe may use it")
	}
	s, err := NewVegasTuned(Config{PerSample: true}, Tuning{NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	v := s.Core().(*limit.VegasLimit)
	v.OnSample(0, 1*ms, 1, false)
	for range 700 {
		v.OnSample(0, 2*ms, 1, false)
	}
	if v.RTTNoLoad() != 1*ms {
		t.Errorf("Tuning.NoProbe: Vegas re-based its no-load rtt to %d ns", int64(v.RTTNoLoad()))
	}
}
