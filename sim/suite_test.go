package sim

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestSuiteExpectations checks the ranges that each built-in scenario file
// states (its expect: list), in the way Vector tests its adaptive request
// concurrency: every figure a scenario documents must fall in its range.
// Only the policies that have expectations run. The fleet runs 30 million
// requests per policy; it is checked by `shedsim -suite -check`, and here
// at a small scale (TestFleetSmall). Under the race detector, which
// slows the simulator 25-fold, only the slowdown runs, with no limit and
// shedkit's Gradient.
func TestSuiteExpectations(t *testing.T) {
	var jobs []Job
	for _, name := range SuiteNames() {
		if name == "fleet" || (raceEnabled && name != "slowdown") {
			continue
		}
		sc, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, x := range sc.Expect {
			switch {
			case x.Policy == "*":
				names = append(names, DefaultPolicies...)
			case !slices.Contains(names, x.Policy):
				names = append(names, x.Policy)
			}
		}
		if len(names) == 0 {
			t.Errorf("%s states no expectation", name)
		}
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			if raceEnabled && n != "none" && n != "shedkit-gradient" {
				continue
			}
			p, err := ParsePolicy(n)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			jobs = append(jobs, Job{Scenario: sc, Policy: p, Seed: 1})
		}
	}
	results, err := RunBatch(context.Background(), jobs, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		for _, msg := range r.Check() {
			t.Error(msg)
		}
	}
}

// TestFleetSmall is the fleet scenario at a small scale: 10 replicas of a
// tenth of the capacity, one of them slowed down ten-fold.
func TestFleetSmall(t *testing.T) {
	sc, err := Builtin("fleet")
	if err != nil {
		t.Fatal(err)
	}
	sc.Service.Replicas = 10
	sc.Classes[0].Rate = 1000
	sc.Upstream.Capacity = 10
	sc.Duration = 90 * time.Second
	sc.Upstream.Events = []UpstreamEvent{{At: 30 * time.Second, For: 30 * time.Second, Slowdown: 10, Replicas: 1}}
	sc.Expect = nil
	var jobs []Job
	for _, name := range []string{"none", "static", "shedkit-gradient"} {
		p, err := ParsePolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, Job{Scenario: sc, Policy: p, Seed: 1})
	}
	rs, err := RunBatch(context.Background(), jobs, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	none, static, grad := &rs[0].Summary, &rs[1].Summary, &rs[2].Summary
	t.Logf("trigger goodput: none %.3f static %.3f shedkit-gradient %.3f", none.TriggerGoodputRatio, static.TriggerGoodputRatio, grad.TriggerGoodputRatio)
	// Round robin keeps sending the slow replica a tenth of the work:
	// without a limit it piles up there, and the backlog outlives the
	// slowdown.
	if none.TriggerGoodputRatio > 0.95 || none.Wasted < 0.05 || none.Recovery < 5 {
		t.Errorf("none: trigger goodput %.3f, wasted %.3f, recovery %vs; want the slow replica's share lost, its backlog wasted and outliving the slowdown", none.TriggerGoodputRatio, none.Wasted, none.Recovery)
	}
	for _, s := range []*Summary{static, grad} {
		if s.TriggerGoodputRatio < 0.9 || s.Recovery > 5 {
			t.Errorf("%s: trigger goodput %.3f recovery %.0fs, want >= 0.9 and <= 5s", s.Policy, s.TriggerGoodputRatio, s.Recovery)
		}
	}
}
