package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestStoreRestartNoScript: after a restart the store's script cache is
// empty. shedredis runs its scripts with go-redis's Script.Run: EVALSHA,
// and on NOSCRIPT the script's source with EVAL, one more round trip
// within the same context deadline (Config.Timeout). The first call of
// each script after the restart pays it; the EVAL puts the script back
// in the cache, so the calls after it take one round trip again, even
// when the EVAL that loaded it timed out on the client. One user sends a
// request every 10 ms to one replica; the store is out from 1 s to 2 s
// (every call there costs the 5 ms budget) and the breaker never opens.
func TestStoreRestartNoScript(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		restarts bool
		both     bool // a shared key concurrency too: two scripts per request
		latency  time.Duration
		want     []time.Duration // waits of the first requests after the outage
	}{
		{"partition", false, false, 2 * ms, []time.Duration{2 * ms, 2 * ms}},
		{"restart", true, false, 2 * ms, []time.Duration{4 * ms, 2 * ms, 2 * ms}},
		{"restart, two scripts", true, true, 2 * ms, []time.Duration{8 * ms, 4 * ms, 4 * ms}},
		// EVALSHA answers NOSCRIPT at 3 ms, the EVAL is sent and the
		// budget ends at 5 ms: the call fails, and its EVAL loads the
		// script at 6 ms all the same.
		{"restart, EVAL over the budget", true, false, 3 * ms, []time.Duration{DefaultStoreTimeout, 3 * ms, 3 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Span{At: time.Second, For: time.Second}
			sc := sequentialUser(1, tc.both)
			sc.Duration, sc.Interval = 3*time.Second, time.Second
			sc.Service.StoreOutages = []Span{out}
			sc.Service.Store = &StoreModel{Latency: Const(float64(tc.latency)), BreakerFailures: 1 << 30, Restarts: tc.restarts}
			ws, _ := storeWaits(t, sc, 1)
			var got []time.Duration
			for _, w := range ws {
				if w.at >= out.End() && len(got) < len(tc.want) {
					got = append(got, w.waitd)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d requests after the outage, want at least %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("the first requests after the outage waited %v for the store, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestStoreRestartReleaseNoScript: the release of a lease is a script
// too (ZREM through Script.Run): after a restart the first release pays
// NOSCRIPT's extra round trip, and the response waits for it. The first
// request after the outage takes 2+2 ms to acquire (NOSCRIPT), 1 ms of
// work, 2+2 ms to release (NOSCRIPT): 9 ms; the next ones 2+1+2 ms.
func TestStoreRestartReleaseNoScript(t *testing.T) {
	const ms = time.Millisecond
	out := Span{At: time.Second, For: time.Second}
	sc := storedLeases(1, ms, 3*time.Second, out)
	sc.Service.Replicas = 1
	sc.Duration, sc.Interval = 3*time.Second, time.Second
	sc.Service.Store.Latency = Const(float64(2 * ms))
	sc.Service.Store.BreakerFailures = 1 << 30
	sc.Service.Store.Restarts = true
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, a := range clientAnswers(t, e) {
		if a.at >= out.End() && len(got) < 3 {
			got = append(got, a.latency)
		}
	}
	if want := []time.Duration{9 * ms, 5 * ms, 5 * ms}; !slices.Equal(got, want) {
		t.Errorf("the first requests after the outage were answered in %v, want %v", got, want)
	}
}

// clientAnswer is a client request answered OK: when it was sent and
// how long its answer took.
type clientAnswer struct{ at, latency time.Duration }

// clientAnswers runs e and returns the client requests answered OK, in
// the order they ended.
func clientAnswers(t *testing.T, e *engine) []clientAnswer {
	t.Helper()
	type end struct {
		slot    int32
		arrival int64
	}
	seen := map[end]bool{}
	var as []clientAnswer
	e.afterEvent = func() {
		for _, k := range e.tasks {
			if k.kind != layerClient || k.state != stDone || k.res != resOK || seen[end{k.slot, k.arrival}] {
				continue
			}
			seen[end{k.slot, k.arrival}] = true
			as = append(as, clientAnswer{time.Duration(k.arrival), time.Duration(e.now - k.arrival)})
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	return as
}

// TestStoreRestartYAML reads and writes back service.store.restarts.
func TestStoreRestartYAML(t *testing.T) {
	src := "name: s\nduration: 10s\nclasses:\n  - {name: a, rate: 10, rate_limit: {rps: 5, shared: true}}\nupstream: {capacity: 2, service_time: 1ms}\n" +
		"service:\n  replicas: 2\n  store_outages: [{at: 1s, for: 1s}]\n  store: {restarts: true}\n"
	sc, err := ParseScenario("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := MarshalScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseScenario("s.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !sc.Service.Store.Restarts || !back.Service.Store.Restarts {
		t.Errorf("restarts read %v, read back %v, want true\n%s", sc.Service.Store.Restarts, back.Service.Store.Restarts, out)
	}
}

// TestStoreCallCutByCaller: shedredis bounds a decision's call by the
// request's context (Concurrency.Acquire by ConcurrencyMiddleware's
// r.Context(), Store.Decide by AllowRequest's). The context ends when the
// caller stops waiting (its timeout closes the request); go-redis then
// returns the context's error at once, the guard reports it as the
// caller's (the breaker counts it neither way), and:
//   - Acquire keeps the lease as an orphan and returns the error: the
//     middleware answers 503 and the handler never runs; the script,
//     on its way, still adds the lease in Redis, where it counts for the
//     fleet until the next renewal removes it;
//   - Decide decides on the replica's share, and the shedkit limiter
//     then refuses the request at once (shed.Limiter.Acquire with an
//     ended context), so it never reaches the upstream either.
//
// One user's requests give up after 30 ms (the replicas see no deadline,
// so only the caller's leaving stops them); the store answers in 50 ms
// (within its 100 ms budget) or 150 ms (over it: with the default
// breaker, five such failures would open it).
func TestStoreCallCutByCaller(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name    string
		lease   bool
		latency time.Duration
	}{
		{"lease, answer after the caller left", true, 50 * ms},
		{"lease, answer over the budget", true, 150 * ms},
		{"rate limit, answer after the caller left", false, 50 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sequentialUser(1, false)
			sc.Duration, sc.Interval = 12*time.Second, time.Second
			sc.Classes[0].Timeout = 30 * ms
			// Without a deadline the limiter would not refuse the late
			// request for it: only the caller's leaving can stop it.
			sc.Service.NoDeadlinePropagation = true
			if tc.lease {
				sc.Classes[0].RateLimit = nil
				sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 1000, Shared: true}
			}
			sc.Service.Store = &StoreModel{Latency: Const(float64(tc.latency)), Timeout: 100 * ms, LeaseTTL: 30 * time.Second}
			e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
			if err != nil {
				t.Fatal(err)
			}
			jobs, opened := 0, false
			var before, after int32 = -1, -1 // the fleet's count before the first renewal (10 s), 200 ms after it
			e.onJob = func(*task) { jobs++ }
			e.afterEvent = func() {
				opened = opened || e.store.breakers[0].state == brOpen || e.store.breakers[1].state == brOpen
				if !tc.lease {
					return
				}
				switch f := e.leases.classes[0].fleet[0]; {
				case e.now < int64(10*time.Second):
					before = f
				case e.now >= int64(10*time.Second+200*ms) && after < 0:
					after = f
				}
			}
			if err := e.run(); err != nil {
				t.Fatal(err)
			}
			if jobs != 0 {
				t.Errorf("%d requests reached the upstream after their caller had left during the store call, want 0", jobs)
			}
			if opened {
				t.Error("calls cut short by their caller opened the breaker")
			}
			if tc.lease && (before < 200 || after > 6) {
				t.Errorf("the fleet counted %d leases before the first renewal and %d after it, want >= 200 (the cut acquisitions' scripts ran) then <= 6 (the renewal removed them as orphans; those of the 200 ms since remain)", before, after)
			}
		})
	}
}

// TestStoreCallCutUnit follows two calls through an empty script cache,
// cut short by their callers: the first is cut after its EVAL was sent,
// which still lands (and loads the script); the second, made before
// that EVAL lands, gets NOSCRIPT too and is cut before its EVAL is sent,
// so it does nothing in the store. Neither counts for the breaker: a
// half-open breaker's probe place is free again after a cut probe.
func TestStoreCallCutUnit(t *testing.T) {
	const ms = int64(time.Millisecond)
	m := &StoreModel{Latency: Const(float64(2 * ms)), Timeout: 5 * time.Millisecond, BreakerFailures: 1, BreakerOpen: time.Second, Restarts: true}
	s := &storeCalls{m: m, outages: []Span{{At: 0, For: 1}}, rng: []*rand.Rand{newStream(1, "store/0")}, breakers: make([]breaker, 2)}
	a := s.call(10, 0, storeRate, scriptAllow, 3*ms)
	if !a.cut || a.ok || a.wait != 3*ms || a.lands != 4*ms || !a.late() {
		t.Errorf("first call %+v, want cut at 3ms, its EVAL landing at 4ms", a)
	}
	b := s.call(11, 0, storeRate, scriptAllow, ms)
	if !b.cut || b.wait != ms || b.lands != -1 || b.late() {
		t.Errorf("second call %+v, want cut at 1ms, never landing", b)
	}
	if s.cached[scriptAllow] != 10+4*ms {
		t.Errorf("script cached from %d, want %d: the first call's EVAL", s.cached[scriptAllow], 10+4*ms)
	}
	s.answered(3*ms, 0, storeRate, a.gen, a.ok, a.cut)
	if br := s.breakers[storeRate-1]; br.state != brClosed || br.failures != 0 {
		t.Errorf("a cut call counted for the breaker: %+v", br)
	}
	br := &s.breakers[storeLease-1]
	br.open(0, m)
	if !br.allow(int64(time.Second) + 1) {
		t.Fatal("no probe after BreakerOpen")
	}
	s.answered(int64(time.Second)+2, 0, storeLease, br.gen, false, true)
	if br.state != brHalfOpen || !br.allow(int64(time.Second)+3) {
		t.Errorf("a cut probe left the breaker in state %d, probing %v: want half-open, a new probe let through", br.state, br.probing)
	}
}
