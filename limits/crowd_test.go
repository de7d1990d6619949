package limits

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// crowdWindow feeds src one window of 200 units of work: crowded of them
// admitted with the limit full, the rest with 20 in flight. crowdedDrops
// of the crowded work and otherDrops of the rest time out at 200 ms; the
// others succeed in 10 ms. It returns the reason of the window's
// decision.
func (f *feed) crowdWindow(crowded, crowdedDrops, otherDrops int) Reason {
	const total = 200
	step := time.Second / total
	var cd, od int
	for i := range total {
		f.now = f.now.Add(step)
		s := shed.Sample{Now: f.now, InFlight: 20, Timed: true, Latency: 10 * time.Millisecond}
		if i%2 == 0 && i/2 < crowded {
			s.InFlight = f.src.Limit()
			s.Dropped, cd = cd < crowdedDrops, cd+1
		} else {
			s.Dropped, od = od < otherDrops, od+1
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
		w := WindowSummary{Samples: tc.samples, Drops: tc.drops, TimedDrops: tc.drops, Crowded: tc.crowded, CrowdedDrops: tc.crowdedDrops}
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
