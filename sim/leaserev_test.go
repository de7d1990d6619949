package sim

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestStoreLeaseFallbackJoinsAtRenewal: a lease taken in fallback (the
// store out) counts on its replica's share only, and joins the fleet's
// count at the first renewal that succeeds after the store is back, as
// shedredis.Concurrency's renewer writes it; not before the outage ends,
// and not later than a renewal period after it.
func TestStoreLeaseFallbackJoinsAtRenewal(t *testing.T) {
	out := Span{At: 0, For: time.Second}
	sc := storedLeases(1, 3*time.Second, 3*time.Second, out)
	sc.Service.Store.BreakerFailures = 100 // no open breaker to skip the renewal
	var joined time.Duration = -1
	sawFallback := false
	for _, s := range leaseSamples(t, sc, 1) {
		switch {
		case s.at < out.End() && s.inFlight == 1 && s.fleet == 0:
			sawFallback = true
		case s.at < out.End() && s.fleet != 0:
			t.Fatalf("at %v, in the outage, the fleet counts %d leases", s.at, s.fleet)
		case joined < 0 && s.fleet == 1 && s.inFlight == 1:
			joined = s.at
		}
	}
	t.Logf("joined the fleet's count at %v", joined)
	// Renewals every LeaseTTL/3 = 1 s at each replica, one round trip.
	if !sawFallback || joined < out.End() || joined > out.End()+time.Second+2*time.Millisecond {
		t.Errorf("held in fallback in the outage %v; joined the fleet's count at %v, want within a renewal period of %v", sawFallback, joined, out.End())
	}
}

// TestStoreLeaseOrphansKeepRenewing: a lease taken in fallback whose
// release fails (the store out) is an orphan, as shedredis's Release
// records it, whether or not the store counts it; the renewer keeps it
// (and so keeps calling the store at every tick, with no lease held)
// until a renewal succeeds and removes it. So once the store is back,
// each replica that released leases in the outage calls the store again
// within a renewal period, even when no request comes any more.
func TestStoreLeaseOrphansKeepRenewing(t *testing.T) {
	sc := storedLeases(0, 100*time.Millisecond, 3*time.Second, Span{At: 2 * time.Second, For: 2 * time.Second})
	sc.Classes[0].Rate = 0
	sc.Classes[0].Schedule = []RateChange{{At: 2 * time.Second, Rate: 20, For: time.Second}}
	sc.Service.Store.BreakerFailures = 1000 // no open breaker to skip the calls
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var atEnd int64 = -1
	e.afterEvent = func() {
		if atEnd < 0 && e.now >= int64(4*time.Second) {
			atEnd = e.store.calls
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	if after := e.store.calls - atEnd; after < 2 {
		t.Errorf("%d store calls after the outage: the orphans of the failed releases are never removed (want a renewal at each replica)", after)
	}
	if n := len(e.book.recs) - len(e.book.free); n != 0 {
		t.Errorf("%d lease records left at the end", n)
	}
}

// TestStoreLeaseDeterminismPolicies: with leases and a rate limit kept in
// a modelled store (random round trips, some over the time budget, two
// outages, a breaker that opens), every policy gives the same bytes
// whatever the number of workers.
func TestStoreLeaseDeterminismPolicies(t *testing.T) {
	sc := leaseScenario(KeyConcurrency{Limit: 3, Shared: true})
	sc.Classes[0].RateLimit = &RateLimit{RPS: 200, Shared: true}
	sc.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 3 * time.Second}, {At: 14 * time.Second, For: 500 * time.Millisecond}}
	sc.Service.Store = &StoreModel{Latency: Exp(float64(2 * time.Millisecond)), BreakerFailures: 3, LeaseTTL: 600 * time.Millisecond}
	var jobs []Job
	for _, name := range defaultPolicies {
		jobs = append(jobs, Job{Scenario: sc, Policy: mustPolicy(t, name), Seed: 7})
	}
	a, err := RunBatch(context.Background(), jobs, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunBatch(context.Background(), jobs, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(outputs(t, a), outputs(t, b)) {
		t.Fatal("one worker and four give different bytes")
	}
}
