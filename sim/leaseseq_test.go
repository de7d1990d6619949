package sim

import (
	"slices"
	"testing"
	"time"
)

// The tests of this file hold the simulated leases to the calls
// shedredis.Concurrency and ConcurrencyMiddleware make for a request:
//
//	Acquire: one script (EVALSHA), within Timeout; on a timeout the
//	  decision falls back to the replica's share, and the script may
//	  still run in Redis.
//	the handler runs
//	Release (deferred, before net/http sends the response): one script
//	  (ZREM), within Timeout, skipped while the breaker is open.
//	every LeaseTTL/3, while the replica holds a lease or keeps an orphan:
//	  SCRIPT LOAD (only with a lease held), then one pipeline (ZREM of
//	  the orphans, the renewal script per key), both within
//	  max(Timeout, LeaseTTL/10); after a renewal that succeeded, one more
//	  pipeline (ZREM) of the leases released while it was out, which it
//	  may have written back.
//
// Each call's budget is a context deadline: a call the client gave up on
// still runs in Redis when it gets there.

// clientLatencies runs e and returns the latency of each client request
// answered OK, in the order they ended.
func clientLatencies(t *testing.T, e *engine) []time.Duration {
	t.Helper()
	type end struct {
		slot    int32
		arrival int64
	}
	seen := map[end]bool{}
	var lat []time.Duration
	e.afterEvent = func() {
		for _, k := range e.tasks {
			if k.kind != layerClient || k.state != stDone || k.res != resOK || seen[end{k.slot, k.arrival}] {
				continue
			}
			seen[end{k.slot, k.arrival}] = true
			lat = append(lat, time.Duration(e.now-k.arrival))
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	return lat
}

// TestStoreLeaseReleaseInLatency: ConcurrencyMiddleware releases the lease
// in a deferred call that returns before net/http sends the buffered
// response, so each response waits for the release's round trip: a
// request whose work takes 200 ms, with a 1 ms round trip to the store,
// is answered 202 ms after it was sent (acquire, work, release).
func TestStoreLeaseReleaseInLatency(t *testing.T) {
	sc := storedLeases(1, 200*time.Millisecond, 3*time.Second, Span{})
	sc.Service.StoreOutages = nil
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	lat := clientLatencies(t, e)
	if len(lat) < 10 {
		t.Fatalf("%d requests answered", len(lat))
	}
	for i, d := range lat {
		if d != 202*time.Millisecond {
			t.Fatalf("request %d answered in %v, want 202ms: 1ms to acquire, 200ms of work, 1ms to release before the response", i, d)
		}
	}
}

// TestStoreLeaseReleaseTimeoutInLatency: a release slower than the time
// budget holds the response for the whole budget (Timeout), as the
// middleware's deferred Release returns only then; while the breaker is
// open the release is skipped and the response does not wait.
func TestStoreLeaseReleaseTimeoutInLatency(t *testing.T) {
	sc := storedLeases(1, 200*time.Millisecond, 3*time.Second, Span{})
	sc.Service.StoreOutages = nil
	sc.Service.Store.Latency = Const(float64(6 * time.Millisecond))
	sc.Service.Store.BreakerFailures = 1000
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range clientLatencies(t, e) {
		// Acquire times out (5 ms, then the local share grants the
		// lease), 200 ms of work, release times out (5 ms).
		if d != 210*time.Millisecond {
			t.Fatalf("request %d answered in %v, want 210ms: two calls of 5ms (the budget) around 200ms of work", i, d)
		}
	}
}

// TestStoreLeaseRenewalTwoRoundTrips: Concurrency.renewCall sends SCRIPT
// LOAD and then the pipeline of renewal scripts, one after the other,
// within one budget of max(Timeout, LeaseTTL/10). With a 3 ms round trip
// and a 5 ms budget each renewal of a held lease takes 6 ms and fails,
// though each acquisition and release (one round trip) succeeds; three
// failed renewals in a row open the breaker while the request runs.
func TestStoreLeaseRenewalTwoRoundTrips(t *testing.T) {
	sc := storedLeases(1, time.Second, 30*time.Millisecond, Span{})
	sc.Service.StoreOutages = nil
	sc.Service.Replicas = 1
	sc.Service.Store.Latency = Const(float64(3 * time.Millisecond))
	sc.Service.Store.BreakerFailures = 3
	sc.Duration = time.Second
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Duration(-1)
	e.afterEvent = func() {
		if opened < 0 && e.store.breakers[storeLease-1].state == brOpen {
			opened = time.Duration(e.now)
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	// The request takes its lease at 13 ms; renewals start at 20, 30
	// and 40 ms, and the third fails when its budget ends, at 45 ms.
	if opened != 45*time.Millisecond {
		t.Errorf("lease breaker opened at %v, want 45ms: renewals take two round trips (6ms) over a 5ms budget", opened)
	}
}

// TestStoreLeaseRenewalCleanup: a lease released while its replica's
// renewal is out may be written back by the renewal (its removal ran
// first); Concurrency.renew then removes it again in one more call (the
// leases it renewed that were released meanwhile). Here the renewal
// starts at 1 s (two 1 ms round trips), the request ends at 1000.5 ms and
// its release lands at 1001.5 ms, before the renewal's write at 1002 ms:
// the lease counts again with no request behind it until the cleanup
// answers at 1003 ms, and the store sees that call.
func TestStoreLeaseRenewalCleanup(t *testing.T) {
	sc := storedLeases(1, 989500*time.Microsecond, 3*time.Second, Span{})
	sc.Service.StoreOutages = nil
	sc.Service.Replicas = 1
	sc.Duration, sc.Interval = 1500*time.Millisecond, 500*time.Millisecond
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var back []time.Duration // when the fleet counts a lease no request holds
	e.afterEvent = func() {
		n := 0
		for _, k := range e.tasks {
			if k.kind == layerService && k.state != stDone && k.leaseRec != 0 && e.book.recs[k.leaseRec-1].held {
				n++
			}
		}
		if e.now > int64(time.Second) && int(e.leases.classes[0].fleet[0]) > n {
			back = append(back, time.Duration(e.now))
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	// The release's own round trip (1000.5 to 1001.5 ms), then the
	// renewal's write back (1002 to 1003 ms).
	if len(back) == 0 || back[len(back)-1] != 1002*time.Millisecond {
		t.Errorf("the fleet counted a lease with no request at %v, want last at 1002ms: the renewal writes the released lease back and a cleanup call removes it at 1003ms", back)
	}
	// Acquisitions at 10 ms and 1011.5 ms (the next request, whose
	// release comes after the end), one release, one renewal (one call
	// of two round trips) at 1 s, its cleanup at 1002 ms.
	if want := int64(2 + 1 + 1 + 1); e.store.calls != want {
		t.Errorf("%d store calls, want %d: acquisitions, a release, a renewal and its cleanup", e.store.calls, want)
	}
}

// TestStoreLeaseTimedOutAcquireLands: an acquisition whose round trip
// (6 ms) exceeds the time budget (5 ms) falls back to the replica's share,
// but the script still runs in Redis when the call gets there and adds
// the lease, which then counts for the fleet while its request runs
// (Concurrency.renew writes it again, or removes it as an orphan). The
// request arrives at 10 ms, is granted locally at 15 ms, and the store
// counts its lease from 16 ms, long before replica 0's first renewal at
// 500 ms.
func TestStoreLeaseTimedOutAcquireLands(t *testing.T) {
	sc := storedLeases(1, 400*time.Millisecond, 3*time.Second, Span{})
	sc.Service.StoreOutages = nil
	sc.Service.Store.Latency = Const(float64(6 * time.Millisecond))
	sc.Service.Store.BreakerFailures = 1000
	sc.Duration, sc.Interval = 450*time.Millisecond, 450*time.Millisecond
	checked := 0
	for _, s := range leaseSamples(t, sc, 1) {
		if s.at >= 16*time.Millisecond && s.at < 400*time.Millisecond && s.inFlight == 1 {
			checked++
			if s.fleet != 1 {
				t.Fatalf("at %v the fleet counts %d leases, want 1: the timed-out acquisition ran in the store at 16ms", s.at, s.fleet)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no sample with the request in flight")
	}
}

// TestStoreLeaseTimedOutRenewalLands: a renewal that timed out on the
// client still runs in Redis when its pipeline gets there, and writes
// every lease of its snapshot, also one released meanwhile. Here each
// renewal of a held lease takes two 3 ms round trips, over its 5 ms
// budget. The renewal of 210 ms lands at 216 ms, after the release that
// started at 211 ms removed the lease at 214 ms: the lease counts again
// with no request behind it. Concurrency.renew, seeing the renewal fail,
// keeps the released lease as an orphan, and the next renewal (at 220 ms,
// one round trip: no lease held) removes it at 223 ms.
func TestStoreLeaseTimedOutRenewalLands(t *testing.T) {
	sc := storedLeases(1, 198*time.Millisecond, 30*time.Millisecond, Span{})
	sc.Service.StoreOutages = nil
	sc.Service.Replicas = 1
	sc.Service.Store.Latency = Const(float64(3 * time.Millisecond))
	sc.Service.Store.BreakerFailures = 1000
	sc.Duration, sc.Interval = 300*time.Millisecond, 300*time.Millisecond
	var stray []time.Duration // when the fleet counts a lease no request holds or releases
	for _, s := range leaseSamples(t, sc, 1) {
		if s.at > 200*time.Millisecond && s.at < 230*time.Millisecond && s.fleet > s.inFlight+s.releasing {
			stray = append(stray, s.at)
		}
	}
	t.Logf("stray lease at %v", stray)
	if len(stray) == 0 || stray[0] != 216*time.Millisecond || stray[len(stray)-1] >= 223*time.Millisecond {
		t.Errorf("the fleet counted a lease with no request at %v, want from 216ms (the timed-out renewal lands) to before 223ms (the next renewal removes the orphan)", stray)
	}
}

// TestStoreLeaseBookConsistent: with round trips around the time budget
// (many calls time out and land late, renewals and their cleanups
// overlap releases, and a renewal with its cleanup, 10 ms at most,
// outlasts the 6.7 ms between ticks), an outage and a breaker that
// opens, the fleet's
// counts equal the leases the store holds and each replica's orphan
// count its orphans at every event, and once the traffic has stopped
// every lease is gone from the store and from the book.
func TestStoreLeaseBookConsistent(t *testing.T) {
	sc := leaseScenario(KeyConcurrency{Limit: 3, Shared: true})
	sc.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 2 * time.Second}}
	sc.Service.Store = &StoreModel{Latency: Exp(float64(3 * time.Millisecond)), BreakerFailures: 8, LeaseTTL: 20 * time.Millisecond}
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "static"), 5)
	if err != nil {
		t.Fatal(err)
	}
	bad, missed := 0, false
	e.afterEvent = func() {
		missed = missed || slices.Contains(e.book.missed, true)
		fleet := make([]int32, len(e.leases.classes[0].fleet))
		orphans := make([]int32, len(e.book.orphans))
		for _, rs := range e.book.byReplica {
			for _, i := range rs {
				l := &e.book.recs[i]
				if l.inStore {
					fleet[l.key]++
				}
				if l.orphan {
					orphans[l.replica]++
				}
			}
		}
		if !slices.Equal(fleet, e.leases.classes[0].fleet) || !slices.Equal(orphans, e.book.orphans) {
			if bad++; bad <= 3 {
				t.Errorf("at %v: fleet counts %v, leases in the store %v; orphan counts %v, orphans %v",
					time.Duration(e.now), e.leases.classes[0].fleet, fleet, e.book.orphans, orphans)
			}
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	late := 0
	for _, l := range e.book.recs {
		if l.abandoned || l.inDoubt {
			late++
		}
	}
	if n := len(e.book.recs) - len(e.book.free); n != 0 || late == 0 || !missed {
		t.Errorf("%d lease records left at the end; %d records ever abandoned or in doubt, a tick missed %v (want both)", n, late, missed)
	}
}
