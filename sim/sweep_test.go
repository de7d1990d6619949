package sim

import (
	"math"
	"testing"
	"time"
)

// A scenario without a trigger has no trigger_goodput: it must not turn
// every configuration's score into NaN.
func TestRankIgnoresUndefinedMetrics(t *testing.T) {
	withTrigger, _ := Builtin("spike")
	withTrigger.Duration = 30 * time.Second
	withTrigger.Trigger = &Span{At: 15 * time.Second, For: 10 * time.Second}
	withTrigger.Classes[0].Schedule = []RateChange{{At: 15 * time.Second, Factor: 3, For: 10 * time.Second}}
	without, _ := Builtin("steady")
	without.Duration = 20 * time.Second
	obj, err := ParseObjective("max:trigger_goodput")
	if err != nil {
		t.Fatal(err)
	}
	var byConfig [][]*Result
	for _, p := range []string{"static:limit=50", "static:limit=100"} {
		pol, err := ParsePolicy(p)
		if err != nil {
			t.Fatal(err)
		}
		var rs []*Result
		for _, sc := range []*Scenario{withTrigger, without} {
			r, err := Run(sc, pol, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		byConfig = append(byConfig, rs)
	}
	ranked := Rank(byConfig, obj)
	for _, rk := range ranked {
		if math.IsNaN(rk.Score) {
			t.Fatalf("%s scored NaN: %v", rk.Policy, rk.Values)
		}
		if !math.IsNaN(rk.Values[1]) {
			t.Fatalf("steady has no trigger, yet %s has trigger_goodput %v there", rk.Policy, rk.Values[1])
		}
	}
	if ranked[0].Policy != "static:limit=100" {
		t.Fatalf("ranking %v, want static:limit=100 first", ranked)
	}
}
