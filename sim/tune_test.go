package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTuneSpace checks the bounds of the draw.
func TestTuneSpace(t *testing.T) {
	sc := tinyTune()
	cs, err := TuneSpace(sc, 50, 1, TuneSpaceOptions{})
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
	cs, _ = TuneSpace(sc, 5, 1, TuneSpaceOptions{})
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
		cs, err := TuneSpace(tinyTune(), 6, seed, TuneSpaceOptions{})
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

// TestTuneSpaceRateLimits checks the rate limits TuneSpace draws: none or
// a multiple of the class's peak arrival rate, per replica, with a burst
// of tuneBurstSeconds of it, each burst drawn, the same for a seed; the
// scenario's own with KeepRateLimits, without changing the draws of the
// other settings.
func TestTuneSpaceRateLimits(t *testing.T) {
	sc := tinyTune()
	sc.Classes[1].Schedule = []RateChange{{At: 10 * time.Second, Rate: 400, For: 5 * time.Second}}
	sc.Service.Replicas = 2
	cs, err := TuneSpace(sc, 60, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peaks := []float64{150, 400}
	counts := map[string]int{}
	for _, c := range cs[1:] {
		for i, k := range c.Classes {
			l := k.RateLimit
			if l == nil {
				counts["none"]++
				continue
			}
			// Within the rounding to three significant digits.
			f := l.RPS * 2 / peaks[i]
			k := slices.IndexFunc(tuneRateFactors, func(x float64) bool { return math.Abs(f-x) < 0.01*x })
			b := slices.IndexFunc(tuneBurstSeconds, func(s float64) bool { return l.Burst == max(int(math.Round(s*l.RPS)), 1) })
			if k < 0 || b < 0 {
				t.Errorf("candidate %s: class %d: rate limit %+v is %g x the peak per replica, burst %g s", c.String(), i, *l, f, float64(l.Burst)/l.RPS)
				continue
			}
			counts[fmt.Sprint(tuneRateFactors[k])]++
			counts[fmt.Sprint(tuneBurstSeconds[b], "s")]++
		}
		if err := c.Apply(sc).Validate(); err != nil {
			t.Errorf("candidate %s: %v", c.String(), err)
		}
	}
	if counts["none"] < 20 || counts["0.5"] == 0 || counts["2"] == 0 || counts["0.05s"] == 0 || counts["0.1s"] == 0 || counts["0.2s"] == 0 || counts["1s"] == 0 {
		t.Errorf("draws by factor and burst: %v", counts)
	}
	again, _ := TuneSpace(sc, 60, 1, TuneSpaceOptions{})
	for i := range cs {
		if cs[i].String() != again[i].String() {
			t.Fatalf("candidate %d: %s, then %s with the same seed", i, cs[i].String(), again[i].String())
		}
	}
	if cs[0].Classes[0].RateLimit != nil || cs[0].Classes[1].RateLimit != nil {
		t.Errorf("baseline %s: the scenario has no rate limit", cs[0].String())
	}

	sc.Classes[0].RateLimit = &RateLimit{RPS: 100}
	kept, err := TuneSpace(sc, 60, 1, TuneSpaceOptions{KeepRateLimits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range kept {
		if l := c.Classes[0].RateLimit; l == nil || *l != (RateLimit{RPS: 100, Burst: 10}) || c.Classes[1].RateLimit != nil {
			t.Fatalf("kept candidate %s: want the scenario's rate limit (100/10) and none", c.String())
		}
		if a := c.Apply(sc); a.Classes[0].RateLimit == c.Classes[0].RateLimit {
			t.Fatal("Apply shares the candidate's rate limit")
		}
		if i < 10 && (c.Policy != cs[i].Policy || c.Classes[1].Queue != cs[i].Classes[1].Queue || c.Classes[0].Protected != cs[i].Classes[0].Protected) {
			t.Errorf("candidate %d: %s with rate limits kept, %s drawn: the other draws changed", i, c.String(), cs[i].String())
		}
	}

	sc.Classes[0] = Class{Name: "interactive", Users: 20, RateLimit: &RateLimit{RPS: 7, Burst: 3}}
	cs, err = TuneSpace(sc, 10, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if l := c.Classes[0].RateLimit; l == nil || *l != (RateLimit{RPS: 7, Burst: 3}) {
			t.Errorf("candidate %s: a closed-loop class keeps its own rate limit", c.String())
		}
	}
}

// TestTuneSnippetRateLimits: the Go snippet sets the candidate's rate
// limits as the middleware's shedhttp.Options.RateLimits, and imports
// shedhttp only then (the compile test in package cli builds it).
func TestTuneSnippetRateLimits(t *testing.T) {
	sc := tinyTune()
	c := TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{}, {RateLimit: &RateLimit{RPS: 112.5}}}}
	src, err := c.GoSnippet(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"github.com/shedkit/shedkit/middleware/shedhttp"`, "func newHTTPOptions(limiter *shed.Limiter) shedhttp.Options {",
		"RateLimits: map[string]shedhttp.RateLimit{", `"batch": {Rate: 112.5, Burst: 11},`} {
		if !strings.Contains(src, want) {
			t.Errorf("snippet lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, `"interactive": {`) {
		t.Errorf("a class without a rate limit has one:\n%s", src)
	}
	c.Classes[1].RateLimit = &RateLimit{RPS: 112.5, Burst: 113} // a drawn burst of 1 s
	if src, _ := c.GoSnippet(sc); !strings.Contains(src, `"batch": {Rate: 112.5, Burst: 113},`) || !strings.Contains(c.String(), " rl=112.5/113") {
		t.Errorf("candidate %s: the snippet lacks the drawn burst:\n%s", c.String(), src)
	}
	c.Classes[1].RateLimit = nil
	if src, _ := c.GoSnippet(sc); strings.Contains(src, "shedhttp") {
		t.Errorf("snippet without rate limits mentions shedhttp:\n%s", src)
	}
}

// TestTuneFeasible checks both do-no-harm constraints: the healthy
// goodput against the best candidate's, and the first class's goodput on
// the scenario itself against the baseline's (what happened matters
// more than what might: a better worst case does not excuse fewer
// answers on the recorded day).
func TestTuneFeasible(t *testing.T) {
	const best, baseline = 0.95, 0.875
	tests := []struct {
		name                 string
		goodput, interactive float64
		want                 bool
	}{
		{"as good as both", 0.95, 0.875, true},
		{"within the slack of the baseline", 0.95, 0.866, true},
		{"a point and more below the baseline", 0.95, 0.85, false},
		{"healthy goodput too low", 0.90, 0.90, false},
		{"no interactive traffic", 0.95, math.NaN(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := TuneRanked{Variants: []TuneFigures{{Goodput: tt.goodput, Interactive: tt.interactive}}}
			if got := feasible(&r, best, baseline); got != tt.want {
				t.Errorf("feasible = %v, want %v", got, tt.want)
			}
		})
	}
}
