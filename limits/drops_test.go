package limits

import (
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestDropCut: drops beyond the background cut both limits in proportion
// to their excess share, by Backoff at least and, beyond it, by half at
// most; a Backoff below one half is honoured.
func TestDropCut(t *testing.T) {
	for _, tc := range []struct {
		backoff, background float64
		n, drops            int
		want                float64
	}{
		{0.9, 0, 95, 5, 0.9},
		{0.9, 0, 70, 30, 0.7},
		{0.9, 0.1, 60, 40, 0.7},
		{0.9, 0, 20, 80, 0.5},
		{0.3, 0, 80, 20, 0.3},
	} {
		d := detector{bg: dropBackground{drops: tc.background, total: 1}}
		s := signals{n: tc.n, drops: tc.drops}
		if got := d.dropCut(&s, tc.backoff); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("backoff %v, background %v, %d of %d dropped: cut x%v, want x%v",
				tc.backoff, tc.background, tc.drops, tc.n+tc.drops, got, tc.want)
		}
	}
}

// TestDrain: once a cut leaves the work in flight above the limit, the
// drops that follow are of work admitted before it and hold either limit;
// once the work in flight is within the limit, they cut it again. Both
// cut by the excess share of the drops: a quarter here.
func TestDrain(t *testing.T) {
	ms := time.Millisecond
	eachLimit(t, func(t *testing.T, src shed.LimitSource, state func() (float64, float64, Reason)) {
		f := newFeed(src)
		for range 30 {
			f.window(200, 0, 100, constant(10*ms))
		}
		before, _, _ := state()
		f.window(150, 50, 1000, constant(10*ms))
		cut, _, r := state()
		if r != ReasonCutDrops || math.Abs(cut-0.75*before) > 1e-9 {
			t.Fatalf("a quarter of the work dropped: limit %.2f -> %.2f (%s), want x0.75 by cut-drops", before, cut, r)
		}
		feed := func(inFlight int) {
			for i := range 200 {
				f.now = f.now.Add(5 * ms)
				s := shed.Sample{Now: f.now, InFlight: inFlight, Dropped: i%4 == 0}
				s.Timed, s.Latency = !s.Dropped, 10*ms
				src.Observe(s)
			}
		}
		feed(int(cut) + 50)
		if lim, _, r := state(); lim != cut || r != ReasonDrain {
			t.Fatalf("drops above the cut limit: %.2f -> %.2f (%s), want held by drain", cut, lim, r)
		}
		feed(int(cut))
		if lim, _, r := state(); lim >= cut || r != ReasonCutDrops {
			t.Fatalf("drops within the limit: %.2f -> %.2f (%s), want cut by drops", cut, lim, r)
		}
	})
}

// TestLearningDrops: while the background is learned, drops cut either
// limit only when clearly above the tolerance for the window's work. Four
// slow drops in ten are not: they neither cut the limit nor teach the
// background (excused). Forty in a hundred are, and cut.
func TestLearningDrops(t *testing.T) {
	ms := time.Millisecond
	eachLimit(t, func(t *testing.T, src shed.LimitSource, state func() (float64, float64, Reason)) {
		f := newFeed(src)
		f.dropLat = 50 * ms // timeouts, five times the successes
		for w := range 5 {
			before, _, _ := state()
			f.window(6, 4, 12, constant(10*ms))
			lim, bg, r := state()
			if lim < before || bg != 0 || r.IsCut() {
				t.Fatalf("window %d, 4 of 10 dropped: limit %.2f -> %.2f (%s), background %.2f; want no cut and no background", w, before, lim, r, bg)
			}
		}
		before, _, _ := state()
		f.window(60, 40, 1000, constant(10*ms))
		if lim, _, r := state(); lim >= before || r != ReasonCutDrops {
			t.Fatalf("40 of 100 dropped: limit %.2f -> %.2f (%s), want cut by drops", before, lim, r)
		}
	})
}

// eachLimit runs f on a Gradient and an AIMD at their defaults, each with
// a reader of its limit, its background and the reason of its last window.
func eachLimit(t *testing.T, f func(t *testing.T, src shed.LimitSource, state func() (float64, float64, Reason))) {
	t.Run("gradient", func(t *testing.T) {
		g := newGradient(t, GradientConfig{})
		f(t, g, func() (float64, float64, Reason) { st := g.State(); return st.Limit, st.Background, st.Reason })
	})
	t.Run("aimd", func(t *testing.T) {
		a, err := NewAIMD(AIMDConfig{})
		if err != nil {
			t.Fatal(err)
		}
		f(t, a, func() (float64, float64, Reason) { st := a.State(); return st.Limit, st.Background, st.Reason })
	})
}
