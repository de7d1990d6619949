package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// peakSlot is the resolution of leaseWatch's peaks.
const peakSlot = 100 * time.Millisecond

// leaseWatch checks a run's key concurrency limits after every event. It
// counts the requests in flight at the service afresh from the engine's
// slots (live service tasks, whatever their lease says) and checks them
// against the limits, and the engine's counts against the leases those
// requests hold: a lease released twice, or never, makes them differ.
// It keeps class 0's peaks, per slot of peakSlot: the most requests of
// one key in flight in the fleet, and in one replica.
type leaseWatch struct {
	t      *testing.T
	e      *engine
	fails  int
	byKey  [][]int // by class, then key: requests in flight in the fleet
	inRep  [][]int // by class, then replica x keys + key: in one replica
	fleet  [][]int // by class, then key: leases that count in the fleet
	local  [][]int // by class, then replica x keys + key: leases that count in the replica
	keys   []int   // by class
	outage bool    // the store has outages: a Shared limit may be exceeded

	peakFleet, peakReplica []int // by slot
}

func watchLeases(t *testing.T, e *engine) *leaseWatch {
	w := &leaseWatch{t: t, e: e, outage: len(e.sc.Service.StoreOutages) > 0}
	n := len(e.replicas)
	for i := range e.sc.Classes {
		k := e.sc.Classes[i].keyCount()
		w.keys = append(w.keys, k)
		w.byKey = append(w.byKey, make([]int, k))
		w.fleet = append(w.fleet, make([]int, k))
		w.inRep = append(w.inRep, make([]int, n*k))
		w.local = append(w.local, make([]int, n*k))
	}
	slots := int(e.sc.Duration/peakSlot) + 1
	w.peakFleet, w.peakReplica = make([]int, slots), make([]int, slots)
	e.afterEvent = w.check
	return w
}

// count recounts the requests in flight and the leases they hold.
func (w *leaseWatch) count() {
	for c := range w.keys {
		clear(w.byKey[c])
		clear(w.inRep[c])
		clear(w.fleet[c])
		clear(w.local[c])
	}
	for _, t := range w.e.tasks {
		if t.kind != layerService || t.state == stDone || t.state == stReleasing {
			continue // stReleasing: its handler returned and released the lease
		}
		c, k, i := int(t.class), int(t.key), int(t.replica)*w.keys[t.class]+int(t.key)
		w.byKey[c][k]++
		w.inRep[c][i]++
		if t.lease&leaseInFleet != 0 {
			w.fleet[c][k]++
		}
		if t.lease&leaseInReplica != 0 {
			w.local[c][i]++
		}
		if t.lease == 0 && w.e.sc.Classes[c].KeyConcurrency != nil {
			w.failf("a request of class %d, key %d in flight at replica %d without a lease", c, k, t.replica)
		}
	}
}

func (w *leaseWatch) failf(format string, args ...any) {
	if w.fails++; w.fails <= 5 {
		w.t.Errorf("at %v: "+format, append([]any{time.Duration(w.e.now)}, args...)...)
	}
}

// check is the engine's afterEvent.
func (w *leaseWatch) check() {
	w.count()
	slot := int(w.e.now / int64(peakSlot))
	for c, cl := range w.e.leases.classes {
		if cl.limit == 0 {
			continue
		}
		for k := range w.keys[c] {
			if c == 0 {
				w.peakFleet[slot] = max(w.peakFleet[slot], w.byKey[c][k])
			}
			if cl.shared && int(cl.fleet[k]) != w.fleet[c][k] {
				w.failf("class %d, key %d: fleet count %d, leases held %d", c, k, cl.fleet[k], w.fleet[c][k])
			}
			if cl.shared && !w.outage && w.byKey[c][k] > int(cl.limit) {
				w.failf("class %d, key %d: %d in flight in the fleet, limit %d", c, k, w.byKey[c][k], cl.limit)
			}
			w.checkReplicas(c, k, slot)
		}
	}
}

// checkReplicas checks the counts of class c's key k in each replica.
func (w *leaseWatch) checkReplicas(c, k, slot int) {
	cl := &w.e.leases.classes[c]
	for r := range w.e.replicas {
		i := r*w.keys[c] + k
		if c == 0 {
			w.peakReplica[slot] = max(w.peakReplica[slot], w.inRep[c][i])
		}
		n := 0
		if cl.replica != nil {
			n = int(cl.replica[r][k])
		}
		switch {
		case n != w.local[c][i]:
			w.failf("class %d, key %d, replica %d: count %d, leases held %d", c, k, r, n, w.local[c][i])
		case !cl.shared && w.inRep[c][i] > int(cl.limit):
			w.failf("class %d, key %d, replica %d: %d in flight, limit %d", c, k, r, w.inRep[c][i], cl.limit)
		case cl.shared && n > int(cl.share):
			w.failf("class %d, key %d, replica %d: %d leases taken in fallback, share %d", c, k, r, n, cl.share)
		}
	}
}

// peak returns the most of class 0's requests of one key in flight from
// from to to (slots of peakSlot): in the fleet, and in one replica.
func (w *leaseWatch) peak(from, to time.Duration) (fleet, replica int) {
	for s := int(from / peakSlot); s < int(to/peakSlot) && s < len(w.peakFleet); s++ {
		fleet, replica = max(fleet, w.peakFleet[s]), max(replica, w.peakReplica[s])
	}
	return fleet, replica
}

// runWatched runs sc under policy with seed, its key concurrency watched.
func runWatched(t *testing.T, sc *Scenario, policy string, seed uint64) (*leaseWatch, Summary) {
	t.Helper()
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, policy), seed)
	if err != nil {
		t.Fatal(err)
	}
	w := watchLeases(t, e)
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	return w, e.result(policy, seed).Summary
}

// leaseScenario has everything that ends a service request early or
// late: a limiter that rejects and queues (under "static"), queue
// timeouts, client attempt timeouts with retries (new requests), service
// timeouts with retries (the same request, the lease held), an upstream
// slowdown with errors. Its open-loop traffic stops at 20 s, and every
// request has ended by the run's end at 30 s.
func leaseScenario(kc KeyConcurrency) *Scenario {
	return &Scenario{
		Name: "leases", Duration: 30 * time.Second, Warmup: 2 * time.Second,
		Classes: []Class{{Name: "a", Rate: 300, Schedule: []RateChange{{At: 20 * time.Second, Rate: 0}},
			Keys: &Keys{Count: 5, Zipf: 1}, Timeout: time.Second, AttemptTimeout: 300 * time.Millisecond,
			Retry: Retry{MaxAttempts: 3}, Queue: 20, MaxWait: 50 * time.Millisecond, KeyConcurrency: &kc}},
		Service: Service{Replicas: 4, Timeout: 400 * time.Millisecond, Retry: Retry{MaxAttempts: 2}},
		Upstream: Upstream{Capacity: 5, ServiceTime: Exp(float64(30 * time.Millisecond)),
			Events: []UpstreamEvent{{At: 8 * time.Second, For: 4 * time.Second, Slowdown: 5, Errors: 0.2}}},
	}
}

// TestKeyConcurrencyInvariant: at no event does a key hold more requests
// in flight than its limit (in the fleet with Shared, in each replica
// without; during store outages each replica keeps to its share of what
// it took in fallback), the engine's counts always equal the leases that
// the requests in flight hold, and once the traffic has stopped every
// count is back to zero: each lease was released once, on every path.
func TestKeyConcurrencyInvariant(t *testing.T) {
	tests := []struct {
		name   string
		kc     KeyConcurrency
		policy string
		edit   func(sc *Scenario)
	}{
		{"shared, limiter and retries", KeyConcurrency{Limit: 2, Shared: true}, "static", nil},
		{"per replica, limiter and retries", KeyConcurrency{Limit: 2}, "static", nil},
		{"shared, store outages", KeyConcurrency{Limit: 3, Shared: true}, "static", func(sc *Scenario) {
			sc.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 5 * time.Second}, {At: 15 * time.Second, For: 3 * time.Second}}
		}},
		{"shared, gateway and rate limit", KeyConcurrency{Limit: 2, Shared: true}, "none", func(sc *Scenario) {
			sc.Gateway = &Gateway{Timeout: 200 * time.Millisecond, Retry: Retry{MaxAttempts: 2}}
			sc.Classes[0].RateLimit = &RateLimit{RPS: 30, Burst: 5, Shared: true}
		}},
		{"per replica, two classes, one without keys", KeyConcurrency{Limit: 4}, "shedkit-gradient", func(sc *Scenario) {
			sc.Classes = append(sc.Classes, Class{Name: "b", Rate: 100, Schedule: []RateChange{{At: 20 * time.Second, Rate: 0}},
				KeyConcurrency: &KeyConcurrency{Limit: 3, Shared: true}})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := leaseScenario(tc.kc)
			if tc.edit != nil {
				tc.edit(sc)
			}
			w, s := runWatched(t, sc, tc.policy, 11)
			t.Logf("%d attempts, %d admitted, %d rate limited, %d rejected, %d timed out", s.Attempts, s.Admitted, s.RateLimited, s.Rejected, s.Timeouts)
			if s.RateLimited == 0 || s.Goodput == 0 {
				t.Errorf("%d rate limited, goodput %d: want both the limit and success seen", s.RateLimited, s.Goodput)
			}
			w.count()
			for c, cl := range w.e.leases.classes {
				for k := range w.keys[c] {
					if w.byKey[c][k] != 0 || (cl.fleet != nil && cl.fleet[k] != 0) {
						t.Errorf("class %d, key %d: at the end %d in flight, fleet count %v", c, k, w.byKey[c][k], cl.fleet)
					}
					for r := range cl.replica {
						if cl.replica[r][k] != 0 {
							t.Errorf("class %d, key %d, replica %d: count %d at the end", c, k, r, cl.replica[r][k])
						}
					}
				}
			}
		})
	}
}

// TestKeyConcurrencyClosedLoop: closed-loop users of one key, as many as
// the fleet's limit allows and more, keep the counts equal to the leases
// held at every event.
func TestKeyConcurrencyClosedLoop(t *testing.T) {
	sc := &Scenario{
		Name: "users", Duration: 20 * time.Second,
		Classes: []Class{{Name: "u", Users: 30, Think: Exp(float64(20 * time.Millisecond)), Timeout: 500 * time.Millisecond,
			KeyConcurrency: &KeyConcurrency{Limit: 6, Shared: true}}},
		Service:  Service{Replicas: 3, StoreOutages: []Span{{At: 8 * time.Second, For: 4 * time.Second}}},
		Upstream: Upstream{Capacity: 4, ServiceTime: Exp(float64(40 * time.Millisecond))},
	}
	w, s := runWatched(t, sc, "static", 3)
	if fleet, _ := w.peak(0, sc.Duration); fleet == 0 || s.RateLimited == 0 {
		t.Errorf("peak %d in flight, %d rate limited", fleet, s.RateLimited)
	}
}

// oneTenant is one key sending 400/s of requests of 100 ms to 4
// replicas (round robin, 100/s each) whose upstreams have room for
// everything: 40 in flight in the fleet, 10 in each replica, when
// nothing limits them.
func oneTenant(kc *KeyConcurrency) *Scenario {
	return &Scenario{
		Name: "tenant", Duration: 30 * time.Second, Warmup: 2 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 400, KeyConcurrency: kc}},
		Service:  Service{Replicas: 4},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
}

// TestKeyConcurrencySharedOrNot: with a limit of 5 per replica a key
// holds up to 4 x 5 in a fleet of 4; shared, 5. Refused requests are
// counted as rate limited, not shed, and the rest are admitted.
func TestKeyConcurrencySharedOrNot(t *testing.T) {
	tests := []struct {
		shared            bool
		fleet             int     // the peak in the fleet
		admittedPerSecond float64 // at most: the limit / 100 ms
	}{
		{false, 20, 200},
		{true, 5, 50},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("shared=%v", tc.shared), func(t *testing.T) {
			sc := oneTenant(&KeyConcurrency{Limit: 5, Shared: tc.shared})
			w, s := runWatched(t, sc, "none", 1)
			fleet, replica := w.peak(0, sc.Duration)
			rate := float64(s.Admitted) / (sc.Duration - sc.Warmup).Seconds()
			t.Logf("peak %d in flight in the fleet, %d in a replica; %.1f admitted per second", fleet, replica, rate)
			if fleet != tc.fleet || replica > 5 {
				t.Errorf("peak %d in the fleet and %d in a replica, want %d and at most 5", fleet, replica, tc.fleet)
			}
			// Each freed lease waits for the key's next arrival at its
			// replica (10 ms on average per replica, 2.5 ms for the fleet).
			if rate > tc.admittedPerSecond || rate < 0.85*tc.admittedPerSecond {
				t.Errorf("%.1f admitted per second, want at most %v and near it", rate, tc.admittedPerSecond)
			}
			if s.Rejected != 0 || s.RateLimited == 0 || s.Admitted+s.RateLimited != s.Attempts || s.Classes[0].RateLimited != s.RateLimited {
				t.Errorf("attempts %d: admitted %d, rate limited %d (class %d), rejected %d: want the 429s counted as rate limited",
					s.Attempts, s.Admitted, s.RateLimited, s.Classes[0].RateLimited, s.Rejected)
			}
		})
	}
}

// TestKeyConcurrencyOutage: a shared limit of 10 in a fleet of 4 falls
// back during a store outage to each replica's share, ceil(10/4) = 3, so
// the fleet holds 12; once the store is back the leases taken in
// fallback count in the fleet (the renewer writes them back), so no new
// lease is granted until the count is under 10 again. Were they
// forgotten, the fleet would take 10 more at once and hold 22.
func TestKeyConcurrencyOutage(t *testing.T) {
	sc := oneTenant(&KeyConcurrency{Limit: 10, Shared: true})
	sc.Service.StoreOutages = []Span{{At: 10 * time.Second, For: 10 * time.Second}}
	w, _ := runWatched(t, sc, "none", 2)
	const ms = time.Millisecond
	for _, tc := range []struct {
		name               string
		from, to           time.Duration
		fleetMin, fleetMax int // bounds of the peak in the fleet
		replica            int // the most in a replica
	}{
		{"store up", 2 * time.Second, 10 * time.Second, 10, 10, 10},
		// The leases taken before the outage end within its first 100 ms.
		{"store out", 10*time.Second + 100*ms, 20 * time.Second, 12, 12, 3},
		// The leases taken in fallback end during the first 100 ms; new
		// ones come as the fleet's count falls under 10, at any replica.
		{"the first 100 ms back", 20 * time.Second, 20*time.Second + 100*ms, 10, 12, 10},
		{"store back", 20*time.Second + 100*ms, 30 * time.Second, 10, 10, 10},
	} {
		fleet, replica := w.peak(tc.from, tc.to)
		t.Logf("%s: peak %d in the fleet, %d in a replica", tc.name, fleet, replica)
		if fleet < tc.fleetMin || fleet > tc.fleetMax || replica > tc.replica {
			t.Errorf("%s (%v to %v): peak %d in flight in the fleet and %d in a replica, want [%d, %d] and at most %d",
				tc.name, tc.from, tc.to, fleet, replica, tc.fleetMin, tc.fleetMax, tc.replica)
		}
	}
}

// TestKeyConcurrencyRetryAfter: a key at its limit is answered as
// shedredis.ConcurrencyMiddleware answers, 429 with Retry-After 1 s and
// "do not retry": clients that honour Retry-After do not retry within a
// 1 s deadline, clients that honour "do not retry" make one attempt, and
// naive clients retry.
func TestKeyConcurrencyRetryAfter(t *testing.T) {
	run := func(r Retry) Summary {
		sc := oneTenant(&KeyConcurrency{Limit: 2, Shared: true})
		sc.Duration, sc.Classes[0].Rate, sc.Classes[0].Retry = 10*time.Second, 100, r
		res, err := Run(sc, mustPolicy(t, "none"), Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	naive := run(Retry{MaxAttempts: 3})
	polite := run(Retry{MaxAttempts: 3, HonorRetryAfter: true})
	final := run(Retry{MaxAttempts: 3, HonorNoRetry: true})
	if naive.ClientRetries == 0 || polite.ClientRetries != 0 || final.Amplification != 1 || polite.RateLimited == 0 {
		t.Errorf("retries: naive %d, honouring Retry-After %d (%d 429s), honouring no-retry amplification %.3f",
			naive.ClientRetries, polite.ClientRetries, polite.RateLimited, final.Amplification)
	}
}

// TestKeyConcurrencyBeforeRateLimit: the lease is taken before the rate
// limit, as shedredis.ConcurrencyMiddleware runs outside the shedkit
// middleware: a request refused for its key's concurrency takes no token
// of the key's bucket, and the rate limit's observer (the middleware's
// Options.Observer, inside) never sees it. Here the key's cap lets about
// 10/s through of 400/s, under the bucket's 50/s: the bucket refuses
// nothing. Taken the other way round, it would refuse about 350/s.
func TestKeyConcurrencyBeforeRateLimit(t *testing.T) {
	sc := oneTenant(&KeyConcurrency{Limit: 1})
	sc.Service.Replicas = 1
	sc.Classes[0].RateLimit = &RateLimit{RPS: 50, Burst: 5}
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	bucket := 0
	e.replicas[0].rateObs = shed.ObserverFunc(func(ev shed.Event) {
		if ev.Kind == shed.EventRejected && ev.Reason == shed.ReasonRateLimited {
			bucket++
		}
	})
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	s := e.result("none", 1).Summary
	t.Logf("%d attempts, %d admitted, %d 429s, %d of them by the bucket", s.Attempts, s.Admitted, s.RateLimited, bucket)
	if bucket != 0 || float64(s.RateLimited) < 0.9*float64(s.Attempts) {
		t.Errorf("%d of %d attempts refused, %d by the rate limit: want most refused, none by the rate limit", s.RateLimited, s.Attempts, bucket)
	}
}

// TestKeyConcurrencySurge: one tenant among fifty floods the fleet with
// slow requests. Four replicas, each with its own upstream of 10 servers;
// requests take 100 ms and clients wait 1 s. Fifty keys (Zipf 1) send
// 200/s: 50/s and 5 busy servers per replica, half the capacity. From
// 10 s to 30 s the heaviest key (1/H(50) = 22% of the traffic, 44/s)
// sends ten times its share, 444/s: 600/s in all, 15 servers' worth per
// replica of 10. The queues grow by 50/s per replica, their wait passes
// the clients' deadline within two seconds, and the other tenants' requests
// time out with the heavy one's while the upstreams work through requests
// nobody waits for. No limiter ("none"), so that the cap alone protects
// them: a fleet-wide cap of 8 requests in flight per key holds the heavy
// key to about 80/s (8 / 100 ms), the upstreams stay near 60% busy, and
// the others keep their goodput. A rate limit would need to know the
// requests' duration to do the same.
func TestKeyConcurrencySurge(t *testing.T) {
	run := func(kc *KeyConcurrency) ClassSummary {
		sc := &Scenario{
			Name: "flood", Duration: 40 * time.Second, Warmup: 5 * time.Second,
			Trigger: &Span{At: 10 * time.Second, For: 20 * time.Second},
			Classes: []Class{{Name: "api", Rate: 200, Timeout: time.Second, KeyConcurrency: kc,
				Keys: &Keys{Count: 50, Zipf: 1, Surge: &KeySurge{At: 10 * time.Second, For: 20 * time.Second, Factor: 10}}}},
			Service:  Service{Replicas: 4},
			Upstream: Upstream{Capacity: 10, ServiceTime: Const(float64(100 * time.Millisecond))},
		}
		r, err := Run(sc, mustPolicy(t, "none"), Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary.Classes[0]
	}
	without, with := run(nil), run(&KeyConcurrency{Limit: 8, Shared: true})
	t.Logf("during the surge, the other keys' goodput: %.3f without a cap, %.3f with; the heavy key's over the run: %.3f, %.3f",
		without.TriggerOtherKeysGoodputShare, with.TriggerOtherKeysGoodputShare, without.HotKeyGoodputShare, with.HotKeyGoodputShare)
	if with.TriggerOtherKeysGoodputShare < 0.97 || without.TriggerOtherKeysGoodputShare > 0.3 {
		t.Errorf("the other keys' goodput during the surge: %.3f with a cap of 8 per key (want >= 0.97), %.3f without (want <= 0.3)",
			with.TriggerOtherKeysGoodputShare, without.TriggerOtherKeysGoodputShare)
	}
}
