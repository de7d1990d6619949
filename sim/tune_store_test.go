package sim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// storeTune is tenantsTune on three replicas whose tenants' limits are
// kept for the fleet in a modelled store (Service.Store), with no outage.
func storeTune() *Scenario {
	sc := slowTenantsTune()
	sc.Service.Replicas = 3
	sc.Classes[0].RateLimit = &RateLimit{RPS: 1000, Shared: true}
	sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 50, Shared: true}
	sc.Service.Store = &StoreModel{Latency: Exp(float64(time.Millisecond))}
	return sc
}

// TestTuneKeepsStore: tune searches the configurations of a scenario
// whose limits live in a modelled store without failing on the candidates
// that draw no shared limit, and the scenario it writes back keeps the
// store whenever one of its limits is kept there.
func TestTuneKeepsStore(t *testing.T) {
	sc := storeTune()
	res, err := Tune(sc, TuneOptions{Budget: 12, Seed: 3, Workers: 2})
	if err != nil {
		t.Fatalf("tune of a scenario with a store: %v", err)
	}
	kept := 0
	for _, r := range res.Ranked {
		out := r.Candidate.Apply(sc)
		if stored := slices.ContainsFunc(out.Classes, usesStore); stored != (out.Service.Store != nil) {
			t.Fatalf("%s: a shared limit %v, a store %v", r.Candidate.String(), stored, out.Service.Store != nil)
		} else if stored {
			kept++
		}
		y, err := MarshalScenario(out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseScenario("tuned.yaml", y); err != nil {
			t.Fatalf("%s: the tuned YAML does not read back: %v", r.Candidate.String(), err)
		}
		if out.Service.Store != nil && !strings.Contains(string(y), "store:") {
			t.Fatalf("%s: the YAML has no store:\n%s", r.Candidate.String(), y)
		}
	}
	if kept == 0 {
		t.Error("no candidate keeps a limit in the store")
	}
}
