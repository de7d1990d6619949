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
// shedkit's Gradient; make test runs the whole of it without -race too.
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
				names = append(names, defaultPolicies...)
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

// TestNoPeerDominates: in no built-in scenario (the fleet aside, for time)
// does a peer policy (no limit, or go-concurrency-limits' Gradient2, Vegas
// or AIMD at their defaults) dominate a shedkit policy over the run: at
// least as much goodput and at most the admitted p99, one of them clearly.
// Where a peer has a lower p99 it admitted less. The static limit is left
// out: it is set at the capacity that the scenario's author knows. (The
// same holds against failsafe-go, in bench/results/suite-all.txt.)
func TestNoPeerDominates(t *testing.T) {
	if raceEnabled {
		t.Skip("about 40 simulations; run without -race (make test does)")
	}
	// Policies by canonical name, as results name them.
	parse := func(names ...string) []Policy {
		var ps []Policy
		for _, n := range names {
			p, err := ParsePolicy(n)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	mine := parse("shedkit-gradient", "shedkit-aimd")
	peers := parse("none", "gcl-gradient2", "gcl-vegas", "gcl-aimd")
	var scenarios []string
	var jobs []Job
	for _, name := range SuiteNames() {
		if name == "fleet" {
			continue
		}
		scenarios = append(scenarios, name)
		sc, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append(slices.Clone(mine), peers...) {
			jobs = append(jobs, Job{Scenario: sc, Policy: p, Seed: 1})
		}
	}
	results, err := RunBatch(context.Background(), jobs, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ scenario, policy string }
	got := map[key]*Summary{}
	for i := range results {
		got[key{results[i].Scenario.Name, results[i].Policy}] = &results[i].Summary
	}
	summary := func(scenario string, p Policy) *Summary {
		s, ok := got[key{scenario, p.Name()}]
		if !ok {
			t.Fatalf("%s: no result for %s", scenario, p.Name())
		}
		return s
	}
	for _, name := range scenarios {
		for _, m := range mine {
			s := summary(name, m)
			for _, p := range peers {
				// Differences under half a point of goodput or 2% of
				// p99 are ties.
				o := summary(name, p)
				better := o.GoodputRatio > s.GoodputRatio+0.005 || o.AdmittedP99 < 0.98*s.AdmittedP99
				notWorse := o.GoodputRatio >= s.GoodputRatio-0.005 && o.AdmittedP99 <= 1.02*s.AdmittedP99
				if better && notWorse {
					t.Errorf("%s: %s (goodput %.3f, admitted p99 %v) dominates %s (%.3f, %v)",
						name, p.Name(), o.GoodputRatio, o.AdmittedP99, m.Name(), s.GoodputRatio, s.AdmittedP99)
				}
			}
		}
	}
}
