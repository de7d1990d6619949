package sim

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// tenantsTune is one class of 10 tenants, the heaviest sending half of
// its 100/s (Zipf 1.5), on an upstream with room for a 3x spike of the
// class but not for the heaviest tenant's flood (TuneFlood x its share:
// 4.5x the class).
func tenantsTune() *Scenario {
	return &Scenario{
		Name: "tenants", Duration: 30 * time.Second, Warmup: 5 * time.Second,
		Classes:  []Class{{Name: "api", Rate: 100, Timeout: time.Second, Keys: &Keys{Count: 10, Zipf: 1.5}}},
		Upstream: Upstream{Capacity: 10, ServiceTime: Dist{Kind: LogNormal, Median: float64(20 * time.Millisecond), Sigma: 0.5}, Degradation: 0.5},
	}
}

// keyQuotaCandidates returns the baseline (no rate limit) and one
// candidate per quota of tuneKeyRateFactors for class 0 of sc, each with
// its default burst, all else equal: what the tune of a keyed class
// chooses between.
func keyQuotaCandidates(sc *Scenario) []TuneCandidate {
	cl := &sc.Classes[0]
	out := []TuneCandidate{{Policy: "shedkit-gradient", Classes: []TuneClass{{}}}}
	for _, f := range tuneKeyRateFactors {
		rps := keyRate(cl.Rate, cl.Keys.Count, cl.Keys.hotShare(), f)
		out = append(out, TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{RateLimit: &RateLimit{RPS: rps, Burst: DefaultBurst(rps)}}}})
	}
	return out
}

// TestTuneKeyQuota: with a flooding tenant, tune recommends a per-key
// quota that leaves the heaviest tenant's ordinary traffic alone and
// keeps the other tenants' goodput under the flood above the baseline's;
// the same candidates on the class as one key (no keys, no flood) give
// no rate limit, since there a quota of a tenant's size throttles the
// whole class.
func TestTuneKeyQuota(t *testing.T) {
	keyed := tenantsTune()
	cands := keyQuotaCandidates(keyed)
	res, err := Tune(keyed, TuneOptions{Seed: 1, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Variants, []string{"tenants", "tenants-slowdown", "tenants-spike", "tenants-retry-storm", "tenants-flood"}) {
		t.Fatalf("variants %v", res.Variants)
	}
	base := res.Ranked[slices.IndexFunc(res.Ranked, func(r TuneRanked) bool { return r.Candidate.Classes[0].RateLimit == nil })]
	for i, r := range res.Ranked {
		t.Logf("%d: %-40s worst %+v, tenants %.4f", i+1, r.Candidate.String(), r.Worst, r.Tenants)
	}
	w := res.Ranked[0]
	hot := keyed.Classes[0].Rate * keyed.Classes[0].Keys.hotShare()
	switch l := w.Candidate.Classes[0].RateLimit; {
	case l == nil:
		t.Errorf("no per-key limit recommended for a flooding tenant: %s", w.Candidate.String())
	case l.RPS < hot:
		t.Errorf("the recommended quota %g/s holds the heaviest tenant (%g/s) below its ordinary rate", l.RPS, hot)
	}
	if w.Tenants < base.Tenants+0.03 || w.Tenants < 0.99 || w.Worst.Interactive < base.Worst.Interactive-0.005 {
		t.Errorf("the winner's other tenants got %.3f under the flood (baseline %.3f), its worst goodput %.3f (baseline %.3f)",
			w.Tenants, base.Tenants, w.Worst.Interactive, base.Worst.Interactive)
	}

	plain := tenantsTune()
	plain.Classes[0].Keys = nil
	res, err = Tune(plain, TuneOptions{Seed: 1, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Variants) != 4 || !math.IsNaN(res.Ranked[0].Tenants) {
		t.Errorf("a scenario without keys has a flood: %v %v", res.Variants, res.Ranked[0].Tenants)
	}
	if w := res.Ranked[0]; w.Candidate.Classes[0].RateLimit != nil {
		t.Errorf("without keys, a quota of a tenant's size won: %s (worst %+v)", w.Candidate.String(), w.Worst)
	}
}

// TestStressVariantsFlood: the flood variant surges the heaviest key of
// the open-loop class spread over keys during the stress window, and is
// absent when no such class exists.
func TestStressVariantsFlood(t *testing.T) {
	sc := tinyTune()
	sc.Classes[1].Keys = &Keys{Count: 50, Zipf: 1, Surge: &KeySurge{At: time.Second, For: time.Second, Factor: 2}}
	v := variant(t, sc, "-flood")
	win := *v.Trigger
	if want := (KeySurge{At: win.At, For: win.For, Factor: TuneFlood}); v.Classes[1].Keys.Surge == nil || *v.Classes[1].Keys.Surge != want || v.Classes[0].Keys != nil {
		t.Errorf("flood: class keys %+v %+v, want a surge %+v of batch's", v.Classes[0].Keys, v.Classes[1].Keys, want)
	}
	if sc.Classes[1].Keys.Surge.Factor != 2 {
		t.Error("the flood changed the scenario's own surge")
	}
	if slow := variant(t, sc, "-slowdown"); *slow.Classes[1].Keys.Surge != *sc.Classes[1].Keys.Surge {
		t.Error("another variant lost the scenario's own surge")
	}
	for _, edit := range []func(sc *Scenario){
		func(sc *Scenario) {},
		func(sc *Scenario) { sc.Classes[1].Keys = &Keys{Count: 1} },
		func(sc *Scenario) { sc.Classes[1] = Class{Name: "batch", Users: 10, Keys: &Keys{Count: 5}} },
	} {
		sc := tinyTune()
		edit(sc)
		vs, err := StressVariants(sc)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 4 || strings.HasSuffix(vs[3].Name, "-flood") {
			t.Errorf("%d variants without an open-loop class of keys", len(vs))
		}
	}
}

// TestTuneSpaceKeyRateLimits: a class spread over keys draws none or a
// per-key quota (tuneKeyRateFactors of its heaviest key's peak rate, at
// least the mean key's, per replica), and the draws of the other
// settings and classes stay as they are without keys.
func TestTuneSpaceKeyRateLimits(t *testing.T) {
	sc, plain, cs := keyedSpaces(t)
	hot := 150 * sc.Classes[0].Keys.hotShare()
	var quotas []float64
	for _, f := range tuneKeyRateFactors {
		quotas = append(quotas, math.Max(f*hot, 1.5)/2) // mean key: 150/100
	}
	seen := map[float64]bool{}
	for i, c := range cs {
		if p := plain[i]; c.Policy != p.Policy || c.Classes[1].Queue != p.Classes[1].Queue || !sameLimit(c.Classes[1].RateLimit, p.Classes[1].RateLimit) {
			t.Fatalf("candidate %d: %s with keys, %s without: the other draws changed", i, c.String(), p.String())
		}
		l := c.Classes[0].RateLimit
		if l == nil {
			continue
		}
		k := slices.IndexFunc(quotas, func(q float64) bool { return math.Abs(l.RPS-q) < 0.005*q })
		if k < 0 {
			t.Errorf("candidate %s: quota %g/s per replica is none of %v", c.String(), l.RPS, quotas)
			continue
		}
		seen[tuneKeyRateFactors[k]] = true
		if err := c.Apply(sc).Validate(); err != nil {
			t.Errorf("candidate %s: %v", c.String(), err)
		}
	}
	if len(seen) != len(tuneKeyRateFactors) {
		t.Errorf("quotas drawn: %v, want every factor of %v", seen, tuneKeyRateFactors)
	}
}

// keyedSpaces returns tinyTune on two replicas with its first class
// spread over 100 keys, and the 60 candidates TuneSpace draws with seed 1
// without the keys and with them.
func keyedSpaces(t *testing.T) (sc *Scenario, plain, keyed []TuneCandidate) {
	t.Helper()
	sc = tinyTune()
	sc.Service.Replicas = 2
	plain, err := TuneSpace(sc, 60, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Classes[0].Keys = &Keys{Count: 100, Zipf: 1.2}
	if keyed, err = TuneSpace(sc, 60, 1, TuneSpaceOptions{}); err != nil {
		t.Fatal(err)
	}
	return sc, plain, keyed
}

func sameLimit(a, b *RateLimit) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// TestTuneSnippetKeyHeader: the snippet sets shedhttp.Options.KeyHeader
// when the scenario's keys came from a trusted header (keys.source, as
// shedsim fit writes it), and otherwise (the address, Classify, not said,
// classes that disagree) keeps the comment that says how the key must be
// taken. The compile test in package cli builds both.
func TestTuneSnippetKeyHeader(t *testing.T) {
	const byHeader, asRecorded = "from the header the recording took it", "as it was when recorded"
	keyHeaderLine := regexp.MustCompile(`\n\t\tKeyHeader: +"X-Tenant",\n`)
	two := func(a, b string) *Scenario {
		sc := tenantsTune()
		sc.Classes[0].Keys.Source = a
		sc.Classes = append(sc.Classes, Class{Name: "batch", Rate: 10, Keys: &Keys{Count: 3, Source: b}})
		return sc
	}
	for _, c := range []struct {
		name    string
		sc      *Scenario
		header  bool
		comment string
	}{
		{"a header", tenantsOf("header:X-Tenant"), true, byHeader},
		{"the address", tenantsOf("addr"), false, asRecorded},
		{"Classify", tenantsOf("classify"), false, asRecorded},
		{"not said", tenantsOf(""), false, asRecorded},
		{"a source of a driver's own", tenantsOf("jwt:sub"), false, asRecorded},
		{"two classes, one header", two("header:X-Tenant", "header:X-Tenant"), true, byHeader},
		{"two classes, one says none", two("header:X-Tenant", ""), true, byHeader},
		{"two classes, two headers", two("header:X-Tenant", "header:X-Api-Key"), false, asRecorded},
		{"two classes, a header and the address", two("header:X-Tenant", "addr"), false, asRecorded},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.sc.Validate(); err != nil {
				t.Fatal(err)
			}
			cands := TuneCandidate{Policy: "shedkit-gradient", Classes: make([]TuneClass, len(c.sc.Classes))}
			cands.Classes[0].RateLimit = &RateLimit{RPS: 20, Burst: 2}
			src, err := cands.GoSnippet(c.sc)
			if err != nil {
				t.Fatal(err)
			}
			if got := keyHeaderLine.MatchString(src); got != c.header || strings.Count(src, "KeyHeader:") != btoi(c.header) {
				t.Errorf("KeyHeader set: %v, want %v:\n%s", got, c.header, src)
			}
			if !strings.Contains(src, c.comment) {
				t.Errorf("snippet lacks %q:\n%s", c.comment, src)
			}
		})
	}
}

// tenantsOf is tenantsTune with its keys taken from src.
func tenantsOf(src string) *Scenario {
	sc := tenantsTune()
	sc.Classes[0].Keys.Source = src
	return sc
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
