package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// slowTenantsTune is tenantsTune with requests five times slower: the
// heaviest of 10 tenants (half of 100/s) holds about 6 requests in
// flight, the class 11, on an upstream of 20 that has room for a 3x
// spike's first moments but not for the heaviest tenant's flood
// (TuneFlood x its share: 45 in flight).
func slowTenantsTune() *Scenario {
	sc := tenantsTune()
	sc.Upstream = Upstream{Capacity: 40, ServiceTime: Dist{Kind: LogNormal, Median: float64(100 * time.Millisecond), Sigma: 0.5}, Degradation: 0.5}
	return sc
}

// keyCapCandidates returns the baseline (no cap) and one candidate per
// cap of tuneKeyConcurrencyFactors for class 0 of sc, as drawKeyConcurrency
// derives them, all else equal: what the tune of a keyed class chooses
// between.
func keyCapCandidates(t *testing.T, sc *Scenario) []TuneCandidate {
	n, err := sc.normalize()
	if err != nil {
		t.Fatal(err)
	}
	cl := &n.Classes[0]
	in := keyInFlight(n, cl, cl.Rate, cl.Keys.hotShare())
	out := []TuneCandidate{{Policy: "shedkit-gradient", Classes: []TuneClass{{}}}}
	for _, f := range tuneKeyConcurrencyFactors {
		k := &KeyConcurrency{Limit: keyCap(f * in), Shared: n.Service.Replicas > 1}
		out = append(out, TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{KeyConcurrency: k}}})
	}
	return out
}

// TestTuneKeyConcurrency: when one tenant floods with slow requests, tune
// recommends a cap on each tenant's requests in flight that keeps the
// other tenants served during the flood and costs no goodput on the
// fitted (healthy) scenario; a cap at the heaviest tenant's mean
// concurrency (Little's law without room for its bursts), which costs
// healthy goodput, does not win. On an upstream with room for the flood
// whatever wins costs the other tenants nothing.
func TestTuneKeyConcurrency(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		sc := slowTenantsTune()
		cands := keyCapCandidates(t, sc)
		n, _ := sc.normalize()
		little := int(math.Ceil(keyInFlight(n, &n.Classes[0], 100, n.Classes[0].Keys.hotShare())))
		cands = append(cands, TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{KeyConcurrency: &KeyConcurrency{Limit: little}}}})
		res := tuneRanked(t, sc, seed, cands)
		base := noCap(res)
		w := res.Ranked[0]
		k := w.Candidate.Classes[0].KeyConcurrency
		t.Logf("seed %d: %s wins: other tenants during the flood %.4f (no cap %.4f), healthy goodput %.4f (no cap %.4f)",
			seed, w.Candidate.String(), w.Tenants, base.Tenants, w.Variants[0].Interactive, base.Variants[0].Interactive)
		switch {
		case k == nil:
			t.Errorf("seed %d: no cap recommended for a tenant flooding with slow requests", seed)
		case k.Limit == little:
			t.Errorf("seed %d: the cap at the heaviest tenant's mean concurrency (%d) won", seed, k.Limit)
		}
		if w.Tenants < base.Tenants+0.1 || w.Variants[0].Interactive < base.Variants[0].Interactive-0.005 {
			t.Errorf("seed %d: the winner's other tenants got %.3f under the flood (no cap %.3f), its healthy goodput %.4f (no cap %.4f)",
				seed, w.Tenants, base.Tenants, w.Variants[0].Interactive, base.Variants[0].Interactive)
		}

		roomy := slowTenantsTune()
		roomy.Upstream.Capacity = 100
		res = tuneRanked(t, roomy, seed, keyCapCandidates(t, roomy))
		base, w = noCap(res), res.Ranked[0]
		t.Logf("seed %d, room for the flood: %s wins, healthy goodput %.4f (no cap %.4f), other tenants during the flood %.4f (no cap %.4f)",
			seed, w.Candidate.String(), w.Variants[0].Interactive, base.Variants[0].Interactive, w.Tenants, base.Tenants)
		if w.Tenants < base.Tenants-0.005 || w.Variants[0].Interactive < base.Variants[0].Interactive-0.005 {
			t.Errorf("seed %d, room for the flood: %s costs goodput: healthy %.4f (no cap %.4f), other tenants %.4f (no cap %.4f)",
				seed, w.Candidate.String(), w.Variants[0].Interactive, base.Variants[0].Interactive, w.Tenants, base.Tenants)
		}
	}
}

// noCap returns the ranked candidate without a cap.
func noCap(res *TuneResult) TuneRanked {
	return res.Ranked[slices.IndexFunc(res.Ranked, func(r TuneRanked) bool { return r.Candidate.Classes[0].KeyConcurrency == nil })]
}

// tuneRanked tunes sc over cands with seed, and logs the ranking.
func tuneRanked(t *testing.T, sc *Scenario, seed uint64, cands []TuneCandidate) *TuneResult {
	t.Helper()
	res, err := Tune(sc, TuneOptions{Seed: seed, Candidates: cands})
	if err != nil {
		t.Fatal(err)
	}
	if res.Flooded != "api" {
		t.Fatalf("flooded %q, variants %v", res.Flooded, res.Variants)
	}
	for i, r := range res.Ranked {
		t.Logf("%d: %-32s feasible %v, healthy %.4f, worst %+v, tenants %.4f", i+1, r.Candidate.String(), r.Feasible, r.Variants[0].Interactive, r.Worst, r.Tenants)
	}
	return res
}

// TestTuneSpaceKeyConcurrency: a class spread over keys draws none or a
// cap (keyCap of tuneKeyConcurrencyFactors of its heaviest key's
// concurrency), for the fleet with several replicas; the draws of every
// other setting stay as they are without keys, a class without keys
// draws none, and KeepRateLimits keeps the scenario's own cap.
func TestTuneSpaceKeyConcurrency(t *testing.T) {
	sc, plain, cs := keyedSpaces(t)
	n, _ := sc.normalize()
	in := keyInFlight(n, &n.Classes[0], 150, n.Classes[0].Keys.hotShare())
	var caps []int
	for _, f := range tuneKeyConcurrencyFactors {
		caps = append(caps, keyCap(f*in))
	}
	seen := map[int]bool{}
	for i, c := range cs {
		p := plain[i]
		if c.Policy != p.Policy || c.Classes[1].Queue != p.Classes[1].Queue || !sameLimit(c.Classes[1].RateLimit, p.Classes[1].RateLimit) || c.Classes[1].KeyConcurrency != nil || p.Classes[0].KeyConcurrency != nil {
			t.Fatalf("candidate %d: %s with keys, %s without: the other draws changed", i, c.String(), p.String())
		}
		k := c.Classes[0].KeyConcurrency
		if k == nil {
			continue
		}
		if !slices.Contains(caps, k.Limit) || !k.Shared {
			t.Errorf("candidate %s: cap %+v is none of %v for the fleet", c.String(), *k, caps)
		}
		seen[k.Limit] = true
		if err := c.Apply(sc).Validate(); err != nil {
			t.Errorf("candidate %s: %v", c.String(), err)
		}
	}
	if len(seen) != len(caps) {
		t.Errorf("caps drawn: %v, want every one of %v", seen, caps)
	}
	sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 7}
	kept, err := TuneSpace(sc, 20, 1, TuneSpaceOptions{KeepRateLimits: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kept {
		if k := c.Classes[0].KeyConcurrency; k == nil || *k != (KeyConcurrency{Limit: 7}) || c.Apply(sc).Classes[0].KeyConcurrency.Limit != 7 {
			t.Fatalf("KeepRateLimits: candidate %s does not keep the scenario's cap", c.String())
		}
	}
}

// TestTuneSnippetKeyConcurrency: a candidate with a cap prints a
// shedredis.ConcurrencyMiddleware with its limit and the scenario's
// replicas (the compile test in package cli builds it), says where the
// tenant comes from, and its scenario's YAML has the key_concurrency; a
// candidate without one prints no shedredis at all.
func TestTuneSnippetKeyConcurrency(t *testing.T) {
	sc := tenantsOf("header:X-Tenant")
	sc.Service.Replicas = 4
	c := TuneCandidate{Policy: "shedkit-gradient", Classes: []TuneClass{{KeyConcurrency: &KeyConcurrency{Limit: 8, Shared: true}}}}
	src, err := c.GoSnippet(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"shedredis.NewConcurrency(shedredis.Config{Client: client, Replicas: 4,",
		"shedredis.ConcurrencyMiddleware(shedredis.MiddlewareConfig{",
		`{"api", 8},`, "Replicas (4) is the fleet", `r.Header.Get("X-Tenant")`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("snippet lacks %q:\n%s", want, src)
		}
	}
	y, err := MarshalScenario(c.Apply(sc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "key_concurrency: {limit: 8, shared: true}") {
		t.Errorf("the tuned scenario lacks the cap:\n%s", y)
	}
	c.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 8}
	if src, _ := c.GoSnippet(sc); !strings.Contains(src, "The simulator kept these caps per replica") {
		t.Errorf("a per-replica cap of 4 replicas is not said to be one:\n%s", src)
	}
	c.Classes[0].KeyConcurrency = nil
	if src, _ := c.GoSnippet(sc); strings.Contains(src, "shedredis") || strings.Contains(src, "net/http") {
		t.Errorf("a snippet without a cap has shedredis:\n%s", src)
	}
}
