package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestStressVariantsFloodBusiest: the flood surges the heaviest key of one
// class, the open-loop class of keys with the most requests scheduled in
// the stress window (the first on a tie), and leaves every other class
// as it was.
func TestStressVariantsFloodBusiest(t *testing.T) {
	own := &KeySurge{At: time.Second, For: time.Second, Factor: 2}
	tests := []struct {
		name string
		edit func(sc *Scenario)
		want int
	}{
		{"the second busier", func(sc *Scenario) { sc.Classes[1].Rate = 200 }, 1},
		{"the first busier", func(sc *Scenario) { sc.Classes[0].Rate = 200 }, 0},
		{"a tie: the first", func(sc *Scenario) {}, 0},
		{"busier over the run, not in the window", func(sc *Scenario) {
			sc.Classes[1].Rate = 300 // 100/s in the window [10s, 20s): 7,000 requests to 4,500
			sc.Classes[1].Schedule = []RateChange{{At: 9 * time.Second, Rate: 100}, {At: 21 * time.Second, Rate: 300}}
		}, 0},
		{"the busier of one key", func(sc *Scenario) { sc.Classes[0].Rate, sc.Classes[0].Keys = 400, nil }, 1},
		{"the busier closed-loop", func(sc *Scenario) {
			sc.Classes[0] = Class{Name: "interactive", Users: 500, Timeout: time.Second, Keys: &Keys{Count: 20}}
		}, 1},
		{"the other keeps its own surge", func(sc *Scenario) { sc.Classes[1].Rate, sc.Classes[0].Keys.Surge = 200, own }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := tinyTune()
			for i := range sc.Classes {
				sc.Classes[i].Keys = &Keys{Count: 20, Zipf: 1}
			}
			tt.edit(sc)
			v := variant(t, sc, "-flood")
			want := KeySurge{At: v.Trigger.At, For: v.Trigger.For, Factor: TuneFlood}
			for i, cl := range v.Classes {
				switch {
				case i == tt.want && (cl.Keys.Surge == nil || *cl.Keys.Surge != want):
					t.Errorf("class %s: surge %+v, want %+v", cl.Name, cl.Keys.Surge, want)
				case i != tt.want && !sameKeys(cl.Keys, sc.Classes[i].Keys):
					t.Errorf("class %s flooded too: surge %s, was %s", cl.Name, surgeOf(cl.Keys), surgeOf(sc.Classes[i].Keys))
				}
			}
			if got := floodedClass(v); got != tt.want {
				t.Errorf("floodedClass = %d, want %d", got, tt.want)
			}
		})
	}
}

func sameKeys(a, b *Keys) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Count == b.Count && a.Zipf == b.Zipf && (a.Surge == nil) == (b.Surge == nil) && (a.Surge == nil || *a.Surge == *b.Surge)
}

func surgeOf(k *Keys) string {
	if k == nil || k.Surge == nil {
		return "none"
	}
	return fmt.Sprintf("%+v", *k.Surge)
}
