package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// storeWaits runs sc under "none" and returns, for each upstream job, the
// replica that sent it, when its request reached the client and how
// long it waited before its job started: with an upstream that never
// queues, the store's calls alone.
type storeWait struct {
	replica   int32
	at, waitd time.Duration
}

func storeWaits(t *testing.T, sc *Scenario, seed uint64) ([]storeWait, Summary) {
	t.Helper()
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), seed)
	if err != nil {
		t.Fatal(err)
	}
	var ws []storeWait
	e.onJob = func(j *task) {
		c := e.tasks[j.anc[1].slot] // the client: no gateway
		ws = append(ws, storeWait{j.replica, time.Duration(c.arrival), time.Duration(j.arrival - c.arrival)})
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	return ws, e.result("none", seed).Summary
}

// sequentialUser is one closed-loop user with a constant think time, so
// that no two of its requests overlap, sent round robin to replicas that
// share the rate limit (and the key concurrency when both) of its class.
func sequentialUser(replicas int, both bool) *Scenario {
	c := Class{Name: "u", Users: 1, Think: Const(float64(10 * time.Millisecond)), Timeout: time.Second,
		RateLimit: &RateLimit{RPS: 1e6, Shared: true}}
	if both {
		c.KeyConcurrency = &KeyConcurrency{Limit: 100, Shared: true}
	}
	return &Scenario{
		Name: "store", Duration: 20 * time.Second,
		Classes:  []Class{c},
		Service:  Service{Replicas: replicas},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(time.Millisecond))},
	}
}

// TestStoreLatency: each decision of a Shared limit waits the store's
// round trip before the request goes on, one call per decision (two
// with a shared key concurrency too, as shedredis's two clients make);
// without a Store model it waits nothing.
func TestStoreLatency(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store *StoreModel
		both  bool
		want  time.Duration
	}{
		{"no model", nil, false, 0},
		{"no latency", &StoreModel{}, true, 0},
		{"2ms rate limit", &StoreModel{Latency: Const(float64(2 * time.Millisecond))}, false, 2 * time.Millisecond},
		{"2ms both", &StoreModel{Latency: Const(float64(2 * time.Millisecond))}, true, 4 * time.Millisecond},
		{"over the budget", &StoreModel{Latency: Const(float64(7 * time.Millisecond)), BreakerFailures: 1 << 30}, false, DefaultStoreTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sequentialUser(2, tc.both)
			sc.Service.Store = tc.store
			ws, _ := storeWaits(t, sc, 1)
			if len(ws) < 1000 {
				t.Fatalf("%d jobs", len(ws))
			}
			for _, w := range ws {
				if w.waitd != tc.want {
					t.Fatalf("request at %v waited %v before its job, want %v", w.at, w.waitd, tc.want)
				}
			}
		})
	}
}

// TestStoreBreaker: during an outage every call costs the time budget
// and fails; without a breaker every decision pays it; with shedredis's
// breaker only the first BreakerFailures calls of each replica do, then
// none until BreakerOpen has passed, then one probe, until a probe
// succeeds after the outage.
func TestStoreBreaker(t *testing.T) {
	outage := Span{At: 10 * time.Second, For: 3 * time.Second}
	for _, tc := range []struct {
		name     string
		failures int
		want     func(inOutage int) int // calls that pay the budget, per replica
	}{
		{"no breaker", 1 << 30, func(n int) int { return n }},
		{"default breaker", 0, func(int) int { return DefaultStoreBreakerFailures + 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sequentialUser(2, false)
			sc.Service.StoreOutages = []Span{outage}
			sc.Service.Store = &StoreModel{BreakerFailures: tc.failures}
			ws, _ := storeWaits(t, sc, 1)
			paid, inOutage := map[int32]int{}, map[int32]int{}
			last := map[int32]time.Duration{} // the last failed call's answer
			for _, w := range ws {
				in := w.at >= outage.At && w.at < outage.End()
				if in {
					inOutage[w.replica]++
				}
				switch w.waitd {
				case 0:
					continue
				case DefaultStoreTimeout:
				default:
					t.Fatalf("request at %v waited %v", w.at, w.waitd)
				}
				if !in {
					t.Fatalf("request at %v paid the budget outside the outage", w.at)
				}
				paid[w.replica]++
				if tc.failures == 0 && paid[w.replica] > DefaultStoreBreakerFailures && w.at-last[w.replica] <= DefaultStoreBreakerOpen {
					t.Errorf("replica %d probed at %v, %v after its last failure", w.replica, w.at, w.at-last[w.replica])
				}
				last[w.replica] = w.at + w.waitd
			}
			for r := range int32(2) {
				if want := tc.want(inOutage[r]); paid[r] != want || want == 0 {
					t.Errorf("replica %d: %d calls paid the budget, want %d", r, paid[r], want)
				}
			}
		})
	}
}

// TestStoreBreakerUnit follows one breaker through gobreaker's states.
func TestStoreBreakerUnit(t *testing.T) {
	m := &StoreModel{BreakerFailures: 2, BreakerOpen: 100}
	var b breaker
	g := b.gen
	for range 3 { // allow changes state in other states: ask it each time
		if !b.allow(0) {
			t.Fatal("a closed breaker refused a call")
		}
	}
	b.done(g, false, 1, m)
	b.done(g, false, 2, m) // opens
	b.done(g, false, 3, m) // a call of the old generation: ignored
	if b.state != brOpen || b.until != 102 || b.failures != 0 {
		t.Fatalf("state %d until %d with %d failures, want open until 102 with none", b.state, b.until, b.failures)
	}
	if b.allow(102) {
		t.Fatal("an open breaker let a call through before BreakerOpen passed")
	}
	if !b.allow(103) || b.allow(103) {
		t.Fatal("a half-open breaker did not let exactly one probe through")
	}
	b.done(b.gen, true, 104, m)
	if b.state != brClosed || b.failures != 0 {
		t.Fatalf("a successful probe left state %d", b.state)
	}
}

// TestStoreDefaultUnchanged: a scenario with shared limits and outages
// but no Store gives the figures it gave before the model existed.
func TestStoreDefaultUnchanged(t *testing.T) {
	sc := leaseScenario(KeyConcurrency{Limit: 8, Shared: true})
	sc.Classes[0].RateLimit = &RateLimit{RPS: 150, Shared: true}
	sc.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 5 * time.Second}}
	r, err := Run(sc, mustPolicy(t, "static"), Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	// The summary of this run before Service.Store existed (commit
	// 88053bc; re-taken when the replicas' retries came to fit the
	// attempt before them, as retrybudget.Transport's do): rate limits,
	// leases and their fallbacks all at work.
	const want = "{Scenario:leases Policy:static Seed:7 Logical:5406 Goodput:4508 Timeouts:20 Failed:887 Attempts:7662 Admitted:4639 Rejected:663 RateLimited:2360 ClientRetries:2256 GatewayRetries:0 ServiceRetries:52 Jobs:4700 Ideal:4626.064555172687 GoodputRatio:0.9744784030217063 TriggerGoodputRatio:0.7254724813922893 Throughput:161 HealthyThroughput:294.6666666666667 Recovery:0 P50:0.023855104 P99:0.281018368 AdmittedP50:0.024379392 AdmittedP99:0.415236096 HealthyP99:0.126877696 TriggerP99:0.448790528 Amplification:1.4173140954495005 UpstreamAmplification:0.8694043655197928 Wasted:0.2133760778065276 RejectedShare:0.086530931871574 MeanLimit:20 MeanInFlight:7.331588604857143 UpstreamMeanJobs:7.577624961392857 UpstreamThroughput:167.85714285714286 UpstreamSojourn:0.04519632059680851 Classes:[{Name:a Offered:5406 Goodput:4508 Timeouts:20 Failed:887 RateLimited:2360 GoodputShare:0.8338882722900481 TriggerGoodputShare:0.2578512396694215 P50:0.023855104 P99:0.281018368 Keys:5 HotKeyOffered:2340 HotKeyGoodput:1895 HotKeyGoodputShare:0.8098290598290598 OtherKeysGoodputShare:0.8522504892367906 TriggerOtherKeysGoodputShare:0.3342776203966006}]}"
	if got := fmt.Sprintf("%+v", r.Summary); got != want {
		t.Errorf("summary changed:\n got %s\nwant %s", got, want)
	}
}

// TestStoreYAML reads and writes the store section back, and checks its
// validation.
func TestStoreYAML(t *testing.T) {
	base := "name: s\nduration: 10s\nclasses:\n  - {name: a, rate: 10, rate_limit: {rps: 5, shared: true}}\nupstream: {capacity: 2, service_time: 1ms}\nservice:\n  replicas: 2\n"
	sc, err := ParseScenario("s.yaml", []byte(base+"  store: {latency: {dist: exponential, mean: 2ms}, timeout: 10ms, breaker_failures: 3, breaker_open: 2s, lease_ttl: 30s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := StoreModel{Latency: Exp(float64(2 * time.Millisecond)), Timeout: 10 * time.Millisecond, BreakerFailures: 3, BreakerOpen: 2 * time.Second, LeaseTTL: 30 * time.Second}
	if sc.Service.Store == nil || *sc.Service.Store != want {
		t.Fatalf("store %+v, want %+v", sc.Service.Store, want)
	}
	out, err := MarshalScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseScenario("s.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if back.Service.Store == nil || *back.Service.Store != want {
		t.Fatalf("read back %+v, want %+v\n%s", back.Service.Store, want, out)
	}
	c := cloneScenario(sc, "", Span{})
	if c.Service.Store == sc.Service.Store || *c.Service.Store != want {
		t.Error("cloneScenario shares or loses the store")
	}
	for _, tc := range []struct{ yaml, field string }{
		{"  store: {timeout: -1ms}\n", "service.store.timeout"},
		{"  store: {breaker_failures: -1}\n", "service.store.breaker_failures"},
		{"  store: {breaker_open: -1s}\n", "service.store.breaker_open"},
		{"  store: {lease_ttl: -1s}\n", "service.store.lease_ttl"},
		{"  store: {timeout: 10ms, lease_ttl: 39ms}\n", "service.store.lease_ttl"},
		{"  store: {latency: {dist: exponential, mean: 0ms}}\n", "service.store.latency.mean"},
		{"  store: {restarts: true}\n", "service.store.restarts"}, // no outage to restart after
	} {
		_, err := ParseScenario("s.yaml", []byte(base+tc.yaml))
		if !errors.Is(err, ErrInvalidScenario) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.field)
		}
	}
	noShared := strings.Replace(base, ", shared: true", "", 1) + "  store: {}\n"
	if _, err := ParseScenario("s.yaml", []byte(noShared)); !errors.Is(err, ErrInvalidScenario) || !strings.Contains(err.Error(), "service.store") {
		t.Errorf("a store with no shared limit: error %v", err)
	}
}

// TestStoreRateTimedOutCallLands: a rate-limit call that times out on
// the client still runs in Redis. shedredis.Store.Decide gives its
// go-redis call (redis_rate's GCRA script) a context deadline of
// Config.Timeout; the command is already on the wire, so Redis runs the
// script when it gets there and takes the token, while the client,
// seeing the deadline, decides on the replica's share and charges that
// too. One tenant sends a request every ~100 ms to one replica; its
// limit refills one token in 100 s, so it has its burst of 5 tokens and
// no more. For the first second each round trip takes 7 ms, over the
// 5 ms budget (the breaker never opens): the replica's share admits 5
// requests, and each of their scripts, landing 2 ms after the client
// gave up, takes one of the fleet's 5 tokens. Then Redis answers in
// 1 ms: its bucket is empty, so it admits nothing more.
func TestStoreRateTimedOutCallLands(t *testing.T) {
	const burst = 5
	recovers := time.Second
	sc := sequentialUser(1, false)
	sc.Classes[0].Think = Const(float64(100 * time.Millisecond))
	sc.Classes[0].RateLimit = &RateLimit{RPS: 0.01, Burst: burst, Shared: true}
	sc.Service.Store = &StoreModel{Latency: Const(float64(7 * time.Millisecond)), BreakerFailures: 1 << 30}
	sc.Duration, sc.Interval = 2*time.Second, time.Second
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	e.afterEvent = func() {
		if e.now >= int64(recovers) {
			e.store.m.Latency = Const(float64(time.Millisecond)) // Redis is fast again
		}
	}
	var slow, fast int // requests admitted, by when their work started
	e.onJob = func(j *task) {
		if time.Duration(j.arrival) < recovers {
			slow++
		} else {
			fast++
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	if slow != burst {
		t.Errorf("%d requests admitted while the calls timed out, want %d: the replica's share of the burst", slow, burst)
	}
	if fast != 0 {
		t.Errorf("%d requests admitted once Redis answered, want 0: the timed-out scripts took the fleet's %d tokens", fast, burst)
	}
}
