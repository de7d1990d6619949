package limits

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// crowdWindow feeds src one window of 200 units of work: crowded of them
// admitted with the limit full, the rest with 20 in flight. The last
// crowdedDrops of the crowded work and the last otherDrops of the rest
// time out at 200 ms (admitted within the window); the others succeed in
// 10 ms. It returns the reason of the window's decision.
func (f *feed) crowdWindow(crowded, crowdedDrops, otherDrops int) Reason {
	const total = 200
	step := time.Second / total
	var cd, od int
	for i := range total {
		f.now = f.now.Add(step)
		s := shed.Sample{Now: f.now, InFlight: 20, Timed: true, Latency: 10 * time.Millisecond}
		if i%2 == 0 && i/2 < crowded {
			s.InFlight = f.src.Limit()
			s.Dropped, cd = cd >= crowded-crowdedDrops, cd+1
		} else {
			s.Dropped, od = od >= total-crowded-otherDrops, od+1
		}
		if s.Dropped {
			s.Latency = 200 * time.Millisecond
		}
		f.src.Observe(s)
	}
	return reasonOf(f.src)
}

// A dependency misses the deadline of a tenth of the work, as a steady
// background. When the work admitted with the limit nearly full is the
// work that fails, the slots at the top of the limit serve nothing: both
// limits cut, by the rule of their own (cut-crowd), though the drop rate
// is the usual one. The same drops spread over all the work are the
// dependency's: no cut.
func TestLimitsCutWorkThatCrowdsAtTheLimit(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			for _, tc := range []struct {
				name                             string
				crowded, crowdedDrops, otherDrop int
				cut                              bool
			}{
				{"drops crowd at the limit", 30, 20, 0, true},
				{"drops spread over the work", 30, 3, 17, false},
				{"too little crowded work to tell", 4, 4, 16, false},
			} {
				src := k.new(t)
				f := newFeed(src)
				f.dropLat = 200 * time.Millisecond
				for range 30 {
					f.window(180, 20, 100, constant(10*time.Millisecond))
				}
				before := src.Limit()
				r := f.crowdWindow(tc.crowded, tc.crowdedDrops, tc.otherDrop)
				cut := src.Limit() < before
				if cut != tc.cut || (tc.cut && r != ReasonCutCrowd) || (!tc.cut && r.IsCut()) {
					t.Errorf("%s: limit %d -> %d (%s), want cut %v", tc.name, before, src.Limit(), r, tc.cut)
				}
			}
		})
	}
}

func TestCrowded(t *testing.T) {
	for _, tc := range []struct {
		name                                  string
		samples, drops, crowded, crowdedDrops int
		want                                  bool
	}{
		{"crowded work served less than half as often", 180, 20, 30, 20, true},
		{"just under half as often", 179, 21, 41, 21, true},
		{"half as often", 180, 20, 40, 20, false},
		{"the same drop rate", 180, 20, 100, 10, false},
		{"too few crowded units", 196, 4, 4, 4, false},
		{"too few crowded drops", 198, 2, 5, 2, false},
		{"too few other units", 0, 8, 8, 8, false},
		{"no crowd level", 180, 20, 0, 0, false},
	} {
		w := WindowSummary{Fresh: tc.samples + tc.drops, FreshDrops: tc.drops, Crowded: tc.crowded, CrowdedDrops: tc.crowdedDrops}
		if got := crowded(&w); got != tc.want {
			t.Errorf("%s: crowded = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// setCrowd follows the enforced limit: the top quarter of it, rounded
// up, and nothing below a limit of 2; only timed work counts.
func TestWindowCountsCrowdedWork(t *testing.T) {
	for _, tc := range []struct {
		limit float64
		at    int // the least in-flight count that is crowded, 0 for none
	}{{0.5, 0}, {1.9, 0}, {2, 2}, {3.99, 3}, {4, 3}, {10, 8}, {100, 75}} {
		w, err := NewWindow(WindowConfig{})
		if err != nil {
			t.Fatal(err)
		}
		w.setCrowd(tc.limit)
		now := t0
		w.Record(shed.Sample{Now: now}) // opens the window
		for n := 1; n <= 101; n++ {
			now = now.Add(time.Millisecond)
			w.Record(shed.Sample{Now: now, InFlight: n, Timed: true, Latency: time.Millisecond, Dropped: n%2 == 1})
		}
		// Untimed drops do not count: the timed share of the successes
		// is unknown to the window.
		for range 10 {
			w.Record(shed.Sample{Now: now, InFlight: 101, Dropped: true})
		}
		sum, ok := w.Record(shed.Sample{Now: now.Add(time.Second), InFlight: 1, Timed: true, Latency: time.Millisecond})
		if !ok {
			t.Fatalf("limit %v: window did not close", tc.limit)
		}
		want, wantDrops := 0, 0
		if tc.at > 0 {
			for n := tc.at; n <= 101; n++ {
				want++
				wantDrops += n % 2
			}
		}
		if sum.Crowded != want || sum.CrowdedDrops != wantDrops {
			t.Errorf("limit %v: crowded %d (%d drops), want %d (%d)", tc.limit, sum.Crowded, sum.CrowdedDrops, want, wantDrops)
		}
	}
}

// A drop is recorded when its deadline passes, a success when it is
// served: with a 1 s deadline and 1 s windows, the drops of work admitted
// in one window land in the next. Here the dependency has no queue: one
// unit of work in ten misses the deadline on its own, crowded or not. A
// burst is admitted with the limit full and served like the rest (one in
// ten of it times out), but its successes close in the burst's window
// and its drops in the next one, where the crowded work is only drops:
// only work admitted since the window opened counts, so cut-crowd does
// not fire on a drop rate that did not change.
func TestCrowdIgnoresDropsThatLagTheirSuccesses(t *testing.T) {
	const deadline = time.Second
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			src := k.new(t)
			f := newFeed(src)
			f.dropLat = deadline
			for range 30 {
				f.window(180, 20, 10, constant(10*time.Millisecond))
			}
			// The burst: 100 units admitted with the limit full, all
			// served in 10 ms but the 10 that time out 1 s later; the
			// rest as usual.
			lim := src.Limit()
			step := time.Second / 300
			for i := range 300 {
				f.now = f.now.Add(step)
				s := shed.Sample{Now: f.now, InFlight: 10, Timed: true, Latency: 10 * time.Millisecond}
				switch {
				case i%3 == 0 && i/3 < 100:
					s.InFlight = lim
					if i/3 < 10 {
						continue // its drops come a deadline later
					}
				case i%10 == 1:
					s.Dropped, s.Latency = true, deadline
				}
				src.Observe(s)
			}
			after := src.Limit()
			// The next window: the burst's 10 drops, then the usual work.
			for range 10 {
				f.now = f.now.Add(time.Millisecond)
				src.Observe(shed.Sample{Now: f.now, InFlight: lim, Timed: true, Dropped: true, Latency: deadline})
			}
			f.window(180, 20, 10, constant(10*time.Millisecond))
			if r := reasonOf(src); r == ReasonCutCrowd {
				t.Errorf("limit %d -> %d -> %d (%s): the burst's crowded work dropped 10 in 100, the rest 20 in 200", lim, after, src.Limit(), r)
			}
		})
	}
}

// The mirror of TestCrowdIgnoresDropsThatLagTheirSuccesses: the
// dependency fails one request in ten at once (5 ms) and serves the rest
// in 800 ms, crowded or not; no queue. A burst at the end of a window is
// admitted with the limit full: its errors are recorded in that window,
// its successes in the next. The window's crowded work is mostly errors:
// errors are the dependency's, and neither group counts them.
func TestCrowdIgnoresFastErrors(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			src := k.new(t)
			f := newFeed(src)
			f.dropLat = 5 * time.Millisecond
			for range 30 {
				f.window(180, 20, src.Limit()/2, constant(800*time.Millisecond))
			}
			lim := src.Limit()
			// 200 units as usual over the first 0.8 s, then a burst of
			// 100 with the limit full: its 10 errors now, its 90
			// successes 800 ms later.
			step := 800 * time.Millisecond / 200
			for i := range 200 {
				f.now = f.now.Add(step)
				s := shed.Sample{Now: f.now, InFlight: lim / 2, Timed: true, Latency: 800 * time.Millisecond}
				if i%10 == 0 {
					s.Dropped, s.Latency = true, 5*time.Millisecond
				}
				src.Observe(s)
			}
			for range 10 {
				f.now = f.now.Add(20 * time.Millisecond)
				src.Observe(shed.Sample{Now: f.now, InFlight: lim, Timed: true, Dropped: true, Latency: 5 * time.Millisecond})
			}
			for range 20 { // the usual work, until the window closes
				f.now = f.now.Add(50 * time.Millisecond)
				src.Observe(shed.Sample{Now: f.now, InFlight: lim / 2, Timed: true, Latency: 800 * time.Millisecond})
			}
			if r := reasonOf(src); r == ReasonCutCrowd {
				t.Errorf("limit %d -> %d (%s) on errors at the usual rate (10 in 100 crowded, 20 in 200 others)", lim, src.Limit(), r)
			}
		})
	}
}
