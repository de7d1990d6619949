package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// roundTrip writes sc and reads it back.
func roundTrip(t *testing.T, sc *Scenario) *Scenario {
	t.Helper()
	b, err := MarshalScenario(sc)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	back, err := ParseScenario(sc.Name+".yaml", b)
	if err != nil {
		t.Fatalf("%s: %v\n%s", sc.Name, err, b)
	}
	if !reflect.DeepEqual(back, sc) {
		t.Fatalf("%s: read back differs\nwrote:\n%s\ngot  %+v\nwant %+v", sc.Name, b, back, sc)
	}
	return back
}

func TestMarshalScenarioYAMLBuiltins(t *testing.T) {
	for _, name := range SuiteNames() {
		sc, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, sc)
	}
}

func TestMarshalScenarioYAMLFamilies(t *testing.T) {
	for _, fam := range FamilyNames() {
		f, _ := LookupFamily(fam)
		for i := range 20 {
			in, err := f.Draw(1, i)
			if err != nil {
				t.Fatal(err)
			}
			// Time distributions are written to the nanosecond.
			roundDist := func(d *Dist) {
				for _, p := range []*float64{&d.Value, &d.Mean, &d.Median, &d.Min, &d.Max, &d.ClampMin, &d.ClampMax} {
					*p = math.Round(*p)
				}
			}
			sc := in.Scenario
			roundDist(&sc.Upstream.ServiceTime)
			for i := range sc.Classes {
				roundDist(&sc.Classes[i].Think)
			}
			roundTrip(t, sc)
		}
	}
}

// TestMarshalScenarioYAMLEveryField sets every field, with values that
// need quoting.
func TestMarshalScenarioYAMLEveryField(t *testing.T) {
	sc := &Scenario{
		Name: "true", Description: "a: b # not a comment\nsecond line", Duration: 90 * time.Second, Interval: 500 * time.Millisecond,
		Warmup: 5 * time.Second, Sustain: 2 * time.Second, Trigger: &Span{At: 20 * time.Second, For: 10 * time.Second},
		Classes: []Class{
			{Name: "1.5", Rate: 123.456, Schedule: []RateChange{{At: 0, Rate: 0}, {At: 30 * time.Second, Factor: 2.5, For: 5 * time.Second}, {At: 40 * time.Second, Rate: 1e-7, Ramp: time.Second}},
				Cost: LogNorm(1500, 0.6), Actual: Unif(0.3, 1), Timeout: 2 * time.Second, AttemptTimeout: time.Second,
				Retry: Retry{MaxAttempts: 3, Backoff: 20 * time.Millisecond, MaxBackoff: time.Second, HonorNoRetry: true, HonorRetryAfter: true,
					Budget: &Budget{}, Throttle: &Throttle{K: 2, Window: time.Minute}},
				Protected: 0.5, Queue: 10, MaxWait: 100 * time.Millisecond, LIFO: true,
				RateLimit: &RateLimit{RPS: 50, Burst: 7, Shared: true}, Keys: &Keys{Count: 20, Zipf: 1.1, Source: `#a:b'"{}`, Surge: &KeySurge{At: 30 * time.Second, For: 15 * time.Second, Factor: 7.5}},
				KeyConcurrency: &KeyConcurrency{Limit: 12, Shared: true}},
			{Name: "closed", Users: 50, Think: Dist{Kind: Exponential, Mean: 1e9, ClampMax: 5e9}, Cost: Par(10, 1.5),
				Retry: Retry{Budget: &Budget{Ratio: -1, MinPerSecond: 5, TTL: time.Second}}},
			{Name: "c", Rate: 1e15, Cost: Bimod(100, 0.5, 10, 0.1), KeyConcurrency: &KeyConcurrency{Limit: 1}},
		},
		Gateway: &Gateway{},
		Service: Service{Replicas: 3, Balancer: PowerOfTwo, MaxCost: 10000, StaticLimit: 40, Strict: true, MaxQueue: 30,
			DemandHold: time.Second, Timeout: 300 * time.Millisecond, Retry: Retry{MaxAttempts: 2},
			NoDeadlinePropagation: true, CancelAtDeadline: true, DeadlineMargin: 1.5, StoreOutages: []Span{{At: 30 * time.Second, For: 5 * time.Second}, {At: 50 * time.Second, For: time.Second}}},
		Upstream: Upstream{Capacity: 100, Discipline: PS, MaxInFlight: 2500, ServiceTime: Dist{Kind: Constant, Value: 5e7, ClampMin: 1}, Degradation: 0.5, MaxDegradation: 4,
			CostScaling: 1, CostRef: 1000, Abandon: true, Events: []UpstreamEvent{{At: 0, For: 10 * time.Second, Slowdown: 10, Errors: 0.5, Capacity: 0.25, Replicas: 2}}},
		Policies: []string{"none", "static:limit=80"},
		Expect:   []Expect{{Policy: "none", Metric: "goodput", Min: 0, Max: math.Inf(1)}, {Policy: "static", Metric: "recovery", Min: math.Inf(-1), Max: 1.5}},
	}
	sc.Classes[2].Rate = 1
	roundTrip(t, sc)
	if _, err := MarshalScenario(&Scenario{Name: "x"}); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("an invalid scenario was written: %v", err)
	}
	if _, err := MarshalScenario(nil); err == nil {
		t.Error("a nil scenario was written")
	}
}

// FuzzScenarioYAMLRoundTrip: every scenario ParseScenario accepts is
// written back to YAML that reads back equal.
func FuzzScenarioYAMLRoundTrip(f *testing.F) {
	for _, name := range SuiteNames() {
		src, err := BuiltinSource(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte("name: r\nduration: 5s\nclasses: [{name: a, rate: 10, rate_limit: {rps: 0.1}}]\nupstream: {capacity: 1, service_time: 1ms}\n"))
	f.Add([]byte("name: k\nduration: 5s\nclasses: [{name: a, rate: 10, keys: {count: 7, zipf: 1.2}, rate_limit: {rps: 2, shared: true}}]\n" +
		"service: {replicas: 3, store_outages: [{at: 1s, for: 2s}]}\nupstream: {capacity: 1, service_time: 1ms}\n"))
	f.Add([]byte("name: c\nduration: 5s\nclasses: [{name: a, rate: 10, keys: {count: 7, zipf: 1}, key_concurrency: {limit: 3, shared: true}}, {name: b, rate: 1, key_concurrency: {limit: 1}}]\n" +
		"service: {replicas: 3, store_outages: [{at: 1s, for: 2s}]}\nupstream: {capacity: 1, service_time: 1ms}\n"))
	f.Add([]byte("name: k\nduration: 5s\nclasses: [{name: a, rate: 10, keys: {count: 7, source: header:X-Tenant}}, {name: b, rate: 1, keys: {count: 2, source: \"#x: y\"}}]\n" +
		"upstream: {capacity: 1, service_time: 1ms}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario("fuzz.yaml", data)
		if err != nil {
			return
		}
		roundTrip(t, sc)
	})
}
