package sim

import (
	"slices"
	"testing"
	"time"
)

// TestTuneSpace checks the bounds of the draw.
func TestTuneSpace(t *testing.T) {
	sc := tinyTune()
	cs, err := TuneSpace(sc, 50, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 50 || cs[0].Policy != "shedkit-gradient" || cs[0].Budget != nil {
		t.Fatalf("%d candidates, first %v", len(cs), cs[0].String())
	}
	seen := map[string]bool{}
	for _, c := range cs {
		share := 0.0
		for _, k := range c.Classes {
			share += k.Protected
		}
		if share > 1+1e-9 || seen[c.String()] || c.Budget != nil {
			t.Errorf("candidate %s: shares %v, duplicate %v", c.String(), share, seen[c.String()])
		}
		seen[c.String()] = true
		if err := c.Apply(sc).Validate(); err != nil {
			t.Errorf("candidate %s: %v", c.String(), err)
		}
	}
	sc.Classes[0].Retry.MaxAttempts = 2
	cs, _ = TuneSpace(sc, 5, 1)
	if cs[1].Budget == nil || cs[1].Apply(sc).Classes[0].Retry.Budget == nil || cs[1].Apply(sc).Classes[1].Retry.Budget != nil {
		t.Errorf("a retrying class got no budget, or a class without retries got one: %s", cs[1].String())
	}
}

// TestTuneDeterministic: the same seed gives the same ranking and
// figures, whatever the number of workers.
func TestTuneDeterministic(t *testing.T) {
	opt := TuneOptions{Seed: 3, Budget: 6, Workers: 1}
	a, err := Tune(tinyTune(), opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Workers = 2
	b, err := Tune(tinyTune(), opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Ranked {
		x, y := a.Ranked[i], b.Ranked[i]
		if x.Candidate.String() != y.Candidate.String() || !slices.Equal(x.Variants, y.Variants) {
			t.Fatalf("rank %d: %s %v vs %s %v", i+1, x.Candidate.String(), x.Variants, y.Candidate.String(), y.Variants)
		}
	}
}

// TestTuneBadConfigNeverWins puts a configuration that protects batch and
// starves interactive among good ones: it must not win on any seed.
func TestTuneBadConfigNeverWins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three tunes")
	}
	bad := TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{Protected: 0.01}, {Protected: 0.95, Queue: 128, MaxWait: 400 * time.Millisecond}}}
	good := TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{Protected: 0.5}, {}}}
	for seed := uint64(1); seed <= 3; seed++ {
		cs, err := TuneSpace(tinyTune(), 6, seed)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Tune(tinyTune(), TuneOptions{Seed: seed, Candidates: append([]TuneCandidate{bad, good}, cs...)})
		if err != nil {
			t.Fatal(err)
		}
		if w := res.Ranked[0]; w.Candidate.String() == bad.String() {
			t.Errorf("seed %d: the bad configuration won: %+v", seed, w)
		}
		i := slices.IndexFunc(res.Ranked, func(r TuneRanked) bool { return r.Candidate.String() == bad.String() })
		t.Logf("seed %d: the bad configuration ranks %d of %d (worst %+v)", seed, i+1, len(res.Ranked), res.Ranked[i].Worst)
	}
}
