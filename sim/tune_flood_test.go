package sim

import (
	"fmt"
	"math"
	"slices"
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

// TestTuneFloodWindow: a per-key quota keeps the other tenants served
// while one floods, and tune's fairness figure (Tenants), taken during
// the flood, shows it by a margin that the same share over the whole run
// (the flooded class's goodput in the flood variant) does not, diluted by
// the two thirds of the run without a flood.
func TestTuneFloodWindow(t *testing.T) {
	for _, tt := range []struct {
		quota int // index in keyQuotaCandidates: 0.5, 1, 2 or 4x the heaviest key's rate
		seed  uint64
	}{{2, 1}, {3, 1}, {4, 1}, {2, 2}, {3, 2}, {4, 2}} {
		sc := tenantsTune()
		all := keyQuotaCandidates(sc)
		res, err := Tune(sc, TuneOptions{Seed: tt.seed, Candidates: []TuneCandidate{all[0], all[tt.quota]}})
		if err != nil {
			t.Fatal(err)
		}
		fi := slices.Index(res.Variants, "tenants-flood")
		if fi < 0 || res.Flooded != "api" {
			t.Fatalf("variants %v, flooded %q", res.Variants, res.Flooded)
		}
		base, quota := res.Ranked[0], res.Ranked[1]
		if base.Candidate.Classes[0].RateLimit != nil {
			base, quota = quota, base
		}
		window := quota.Tenants - base.Tenants
		whole := quota.Variants[fi].Interactive - base.Variants[fi].Interactive
		t.Logf("%s seed %d: other tenants during the flood %.4f (none %.4f), over the run %.4f (none %.4f)",
			quota.Candidate.String(), tt.seed, quota.Tenants, base.Tenants, quota.Variants[fi].Interactive, base.Variants[fi].Interactive)
		if window < 0.12 || whole > 0.1 || window < 2*whole {
			t.Errorf("%s seed %d: the quota gains the other tenants %.3f during the flood and %.3f over the run, want >= 0.12, <= 0.1 and half",
				quota.Candidate.String(), tt.seed, window, whole)
		}
	}
}

// TestTuneFloodFigures: tune's figures of the flood variant are the
// run's: the flooded class's goodput is its other tenants' over the whole
// run, the fairness figure theirs during the flood (the trigger).
func TestTuneFloodFigures(t *testing.T) {
	sc := tenantsTune()
	c := keyQuotaCandidates(sc)[0]
	res, err := Tune(sc, TuneOptions{Seed: 3, Candidates: []TuneCandidate{c}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ParsePolicy(c.Policy)
	r, err := Run(variant(t, c.Apply(sc), "-flood"), p, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	cs, got := r.Summary.Classes[0], res.Ranked[0]
	if got.Variants[4].Interactive != cs.OtherKeysGoodputShare || got.Tenants != cs.TriggerOtherKeysGoodputShare {
		t.Errorf("flood figures %.4f and %.4f, want the run's other keys' %.4f over the run and %.4f during the flood",
			got.Variants[4].Interactive, got.Tenants, cs.OtherKeysGoodputShare, cs.TriggerOtherKeysGoodputShare)
	}
	if m, ok := r.Summary.Metric("class.api.trigger_other_keys_goodput"); !ok || m != cs.TriggerOtherKeysGoodputShare || math.IsNaN(m) {
		t.Errorf("metric class.api.trigger_other_keys_goodput %v (%v)", m, ok)
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
