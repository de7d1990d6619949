package limits

import (
	"testing"
	"time"
)

// A baseline learned over a queue that the limit admitted comes down as
// soon as a window shows it: the limit binds, the work in flight fell (so
// the window holds the slow rest of earlier work) and the latency is still
// clearly below the baseline. Without the limit binding, a fall in the
// work in flight is the callers' doing, and the baseline stays.
func TestBaselineLearnedOverAQueueComesDown(t *testing.T) {
	ms := time.Millisecond
	window := func(lat time.Duration, inFlight, peak int) *WindowSummary {
		return &WindowSummary{Samples: 200, Latency: lat, Mean: lat, Median: lat,
			MeanInFlight: float64(inFlight), MaxInFlight: peak}
	}
	for _, tc := range []struct {
		name  string
		peak  int // of the fast window, under a limit of 100
		want  time.Duration
		moved bool
	}{
		{"the limit binds", 100, 22360 * time.Microsecond, true},
		{"the limit does not bind", 60, 50 * ms, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDetector(DefaultTolerance, DefaultSignificance, 0, 0, DefaultMinUtilization, DefaultBaselineWindows, WindowConfig{MinSamples: DefaultMinSamples})
			for range 30 {
				s := d.read(window(50*ms, 100, 100), 100)
				d.learn(&s)
			}
			// The work in flight fell to 40 and the latency to 10 ms.
			s := d.read(window(10*ms, 40, tc.peak), 100)
			d.learn(&s)
			if got := time.Duration(d.base.value()); !near(got, tc.want) {
				t.Fatalf("baseline %v, want %v (moved half-way on the log: %v)", got, tc.want, tc.moved)
			}
		})
	}
}

// The first window, whose work in flight grew from nothing, holds only the
// fast part of its work: its median seeds the baseline for comparison, but
// the first steady window replaces it rather than being averaged with it.
func TestSeedGivesWayToTheFirstSteadyWindow(t *testing.T) {
	ms := time.Millisecond
	d := newDetector(DefaultTolerance, DefaultSignificance, 0, 0, DefaultMinUtilization, DefaultBaselineWindows, WindowConfig{MinSamples: DefaultMinSamples})
	for _, w := range []struct {
		lat      time.Duration
		inFlight int
	}{{900 * ms, 20}, {1000 * ms, 20}} {
		s := d.read(&WindowSummary{Samples: 50, Latency: w.lat, Mean: w.lat, Median: w.lat,
			MeanInFlight: float64(w.inFlight), MaxInFlight: w.inFlight}, 40)
		d.learn(&s)
	}
	if got := time.Duration(d.base.value()); !near(got, time.Second) {
		t.Fatalf("baseline %v, want the first steady window's 1s", got)
	}
}
