package limits

import (
	"testing"
	"time"
)

// TestWindowTrace: every window reaches Trace once, with the limit it ran
// under, the limit it left (as State reports it) and the signals that
// decided, read against what was learned before the window.
func TestWindowTrace(t *testing.T) {
	ms := time.Millisecond
	var got []WindowTrace
	keep := func(w WindowTrace) { got = append(got, w) }
	t.Run("gradient", func(t *testing.T) {
		got = nil
		g, f := learned(t, GradientConfig{Trace: keep})
		if n := uint64(len(got)); n != g.State().Windows {
			t.Fatalf("%d traces for %d windows", n, g.State().Windows)
		}
		before := g.State().Limit
		f.window(200, 0, 1000, constant(30*ms))
		w, st := got[len(got)-1], g.State()
		if w.Reason != ReasonCutLatency || w.Limit != before || w.Next != st.Limit || w.Next >= w.Limit {
			t.Fatalf("trace %+v after a slow window, state %+v", w, st)
		}
		if !near(w.Baseline, 10*ms) || !near(w.Window.Median, 30*ms) || !w.LatencyCongested || w.DropsCongested || !(w.Ratio > w.Threshold) || !w.Binding {
			t.Fatalf("signals of a slow window: %+v", w)
		}
	})
	t.Run("aimd", func(t *testing.T) {
		got = nil
		a, err := NewAIMD(AIMDConfig{Trace: keep})
		if err != nil {
			t.Fatal(err)
		}
		f := newFeed(a)
		for range 30 {
			f.window(200, 0, 100, constant(10*ms))
		}
		before := a.State().Limit
		f.window(100, 100, 1000, constant(10*ms))
		w := got[len(got)-1]
		if len(got) != 31 || w.Reason != ReasonCutDrops || w.Limit != before || w.Next != a.State().Limit || !w.DropsCongested || w.Window.Drops != 100 {
			t.Fatalf("%d traces; after half the work dropped: %+v", len(got), w)
		}
	})
}
