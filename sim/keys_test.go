package sim

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// keyedScenario is rateScenario with its traffic spread over keys.
func keyedScenario(rate float64, rl *RateLimit, replicas int, keys *Keys) *Scenario {
	sc := rateScenario(rate, rl, replicas)
	sc.Classes[0].Keys = keys
	return sc
}

// TestKeyDist: keys are drawn with weights 1/(k+1)^Zipf.
func TestKeyDist(t *testing.T) {
	for _, k := range []Keys{{Count: 10}, {Count: 50, Zipf: 1}, {Count: 1000, Zipf: 1.5}} {
		d := newKeyDist(&k, newStream(1, "keys"))
		const n = 200_000
		counts := make([]int, k.Count)
		for range n {
			counts[d.next(0)]++
		}
		total := 0.0
		for i := range k.Count {
			total += math.Pow(float64(i+1), -k.Zipf)
		}
		for _, i := range []int{0, 1, k.Count - 1} {
			want := math.Pow(float64(i+1), -k.Zipf) / total
			got := float64(counts[i]) / n
			if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/n)+1e-4 {
				t.Errorf("%+v: key %d drawn %.4f of the time, want %.4f", k, i, got, want)
			}
		}
	}
	one, none := newKeyDist(&Keys{Count: 1}, nil), newKeyDist(nil, nil)
	if one.next(0) != 0 || none.next(0) != 0 {
		t.Error("a class of one key drew another")
	}
}

// TestKeysRateLimitStores checks per-key buckets in virtual time: per
// replica (each replica's MemoryStore lets a key through at the limit,
// so a fleet of four lets it through at four times it), shared by the
// fleet (shedredis: the limit holds for the fleet), and the shared limit
// while its store is out (each replica enforces its share).
func TestKeysRateLimitStores(t *testing.T) {
	even := &Keys{Count: 4} // 100/s per key, 25/s per key at each replica
	outage := []Span{{At: 5 * time.Second, For: 35 * time.Second}}
	tests := []struct {
		name    string
		limit   RateLimit
		keys    *Keys
		outages []Span
		lo, hi  float64 // bounds of the share of attempts rate limited
	}{
		{"per replica: four times the limit", RateLimit{RPS: 50, Burst: 10}, even, nil, 0, 0.02},
		{"shared: the limit", RateLimit{RPS: 50, Burst: 10, Shared: true}, even, nil, 0.45, 0.55},
		{"shared, store out: each replica its share", RateLimit{RPS: 50, Burst: 10, Shared: true}, even, outage, 0.45, 0.62},
		{"shared, one key", RateLimit{RPS: 50, Burst: 10, Shared: true}, nil, nil, 0.85, 0.9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.limit
			sc := keyedScenario(400, &l, 4, tc.keys)
			sc.Service.StoreOutages = tc.outages
			checkLimitedShare(t, sc, 5, tc.lo, tc.hi)
		})
	}
}

// TestKeysHotTenant: one heavy tenant among a hundred. A limit shared by
// the fleet holds it to its quota and leaves the others alone; the same
// limit kept per replica lets it through at four times its quota. The
// summary, the metrics and the table say so.
func TestKeysHotTenant(t *testing.T) {
	none, _ := ParsePolicy("none")
	// Zipf 1.5 over 100 keys at 200/s: key 0 sends about 83/s, key 1
	// 29/s, key 2 16/s, the rest less.
	keys := &Keys{Count: 100, Zipf: 1.5}
	shared := keyedScenario(200, &RateLimit{RPS: 20, Burst: 20, Shared: true}, 4, keys)
	r, err := Run(shared, none, Options{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Summary.Classes[0]
	t.Logf("shared: key 0 %.3f, others %.3f", c.HotKeyGoodputShare, c.OtherKeysGoodputShare)
	// Key 0's share of the requests after the warm-up: 1/H(100, 1.5).
	h := 0.0
	for k := 1; k <= 100; k++ {
		h += math.Pow(float64(k), -1.5)
	}
	if got := float64(c.HotKeyOffered) / float64(c.Offered); math.Abs(got-1/h) > 0.01 {
		t.Errorf("key 0 sent %.4f of the measured requests, want %.4f", got, 1/h)
	}
	if c.Keys != 100 || c.HotKeyOffered == 0 || c.HotKeyGoodput > c.HotKeyOffered {
		t.Fatalf("class summary %+v", c)
	}
	if c.HotKeyGoodputShare < 0.2 || c.HotKeyGoodputShare > 0.3 || c.OtherKeysGoodputShare < 0.88 || c.OtherKeysGoodputShare > 0.97 {
		t.Errorf("shared: key 0 got %.3f of its requests through (want about 20/83), the others %.3f (want about 0.92)", c.HotKeyGoodputShare, c.OtherKeysGoodputShare)
	}
	if m, ok := r.Summary.Metric("class.a.hot_key_goodput"); !ok || m != c.HotKeyGoodputShare {
		t.Errorf("metric class.a.hot_key_goodput %v (%v)", m, ok)
	}
	if m, ok := r.Summary.Metric("class.a.other_keys_goodput"); !ok || m != c.OtherKeysGoodputShare {
		t.Errorf("metric class.a.other_keys_goodput %v (%v)", m, ok)
	}
	if m, ok := r.Summary.Metric("class.a.trigger_other_keys_goodput"); !ok || !math.IsNaN(m) {
		t.Errorf("metric class.a.trigger_other_keys_goodput %v (%v) without a trigger, want NaN", m, ok)
	}
	again, _ := Run(shared, none, Options{Seed: 6})
	if string(AppendSummaryJSON(nil, &again.Summary)) != string(AppendSummaryJSON(nil, &r.Summary)) {
		t.Error("the same seed gave another summary")
	}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Summary{&r.Summary}); err != nil || !strings.Contains(b.String(), "(key 0 2") {
		t.Errorf("table without the hot key's goodput: %v\n%s", err, b.String())
	}
	if j := string(AppendSummaryJSON(nil, &r.Summary)); !strings.Contains(j, `"keys":100,"hot_key_offered":`) {
		t.Errorf("JSON without the keys: %s", j)
	}

	local := keyedScenario(200, &RateLimit{RPS: 20, Burst: 20}, 4, keys)
	r, err = Run(local, none, Options{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Summary.Classes[0]; c.HotKeyGoodputShare < 0.9 {
		t.Errorf("per replica: key 0 got %.3f through, want nearly all (4 x 20/s for 83/s)", c.HotKeyGoodputShare)
	}
	plain, _ := Run(rateScenario(200, nil, 1), none, Options{Seed: 6})
	if m, ok := plain.Summary.Metric("class.a.hot_key_goodput"); !ok || !math.IsNaN(m) {
		t.Errorf("hot_key_goodput of a class without keys: %v (%v), want NaN", m, ok)
	}
}

// TestKeysValidate: keys and store outages are checked, and errors name
// the field.
func TestKeysValidate(t *testing.T) {
	shared := &RateLimit{RPS: 10, Shared: true}
	tests := []struct {
		name string
		edit func(sc *Scenario)
		want string
	}{
		{"no keys", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{} }, "classes[0].keys.count: must be in [1, 100000], got 0"},
		{"too many keys", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{Count: MaxKeys + 1} }, "classes[0].keys.count"},
		{"negative zipf", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{Count: 2, Zipf: -1} }, "classes[0].keys.zipf: must be in [0, 10], got -1"},
		{"key source too long", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{Count: 2, Source: strings.Repeat("x", 129)} }, "classes[0].keys.source: 129 bytes, at most 128"},
		{"key source not a header", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{Count: 2, Source: "header:"} }, "classes[0].keys.source: not a header name"},
		{"NaN zipf", func(sc *Scenario) { sc.Classes[0].Keys = &Keys{Count: 2, Zipf: math.NaN()} }, "classes[0].keys.zipf"},
		{"too many buckets", func(sc *Scenario) {
			sc.Service.Replicas = 200
			sc.Classes[0].RateLimit = shared
			sc.Classes[0].Keys = &Keys{Count: MaxKeys}
		}, "classes[0].keys.count: rate limits need 20100000 buckets"},
		{"too many buckets, all classes", func(sc *Scenario) {
			sc.Service.Replicas = 9
			sc.Classes[0].RateLimit, sc.Classes[0].Keys = shared, &Keys{Count: 60_000}
			sc.Classes = append(sc.Classes, Class{Name: "b", Rate: 1, RateLimit: shared, Keys: &Keys{Count: 50_000}})
		}, "classes[1].keys.count: rate limits need 1100000 buckets"},
		{"shared and not", func(sc *Scenario) {
			sc.Classes[0].RateLimit = shared
			sc.Classes = append(sc.Classes, Class{Name: "b", Rate: 1, RateLimit: &RateLimit{RPS: 1}})
		}, "classes[1].rate_limit.shared: must be the same for every class (true in classes[0])"},
		{"hot key of a class without keys", func(sc *Scenario) {
			sc.Expect = []Expect{{Policy: "none", Metric: "class.a.hot_key_goodput", Min: 0, Max: 1}}
		}, `expect[0].metric: unknown metric "class.a.hot_key_goodput"`},
		{"outage of no store", func(sc *Scenario) { sc.Service.StoreOutages = []Span{{At: time.Second, For: time.Second}} }, "service.store_outages: no class has a shared rate limit"},
		{"outage past the end", func(sc *Scenario) {
			sc.Classes[0].RateLimit = shared
			sc.Service.StoreOutages = []Span{{At: 30 * time.Second, For: 20 * time.Second}}
		}, "service.store_outages[0]: must start at or after 0s"},
		{"outages overlap", func(sc *Scenario) {
			sc.Classes[0].RateLimit = shared
			sc.Service.StoreOutages = []Span{{At: time.Second, For: 5 * time.Second}, {At: 3 * time.Second, For: time.Second}}
		}, "service.store_outages[1]: must start at or after 6s"},
		{"empty outage", func(sc *Scenario) {
			sc.Classes[0].RateLimit = shared
			sc.Service.StoreOutages = []Span{{At: time.Second}}
		}, "service.store_outages[0]"},
	}
	for _, tc := range tests {
		sc := rateScenario(10, nil, 2)
		tc.edit(sc)
		err := sc.Validate()
		if err == nil || !errors.Is(err, ErrInvalidScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q and ErrInvalidScenario", tc.name, err, tc.want)
		}
	}
	ok := rateScenario(10, shared, 2)
	ok.Classes[0].Keys = &Keys{Count: 3, Zipf: 0.8}
	ok.Service.StoreOutages = []Span{{At: time.Second, For: time.Second}, {At: 2 * time.Second, For: time.Second}}
	ok.Expect = []Expect{{Policy: "none", Metric: "class.a.other_keys_goodput", Min: 0.5, Max: 1}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid keys, outages and expectation: %v", err)
	}
}

// TestRateStoreOutage: a shared limit is decided by the fleet's bucket of
// the key, but during a store outage (end excluded) by the replica's own,
// at its share of the rate and the burst, rounded up as shedredis's
// fallback is; a class without a limit passes.
func TestRateStoreOutage(t *testing.T) {
	sc := rateScenario(100, &RateLimit{RPS: 50, Burst: 10, Shared: true}, 4)
	sc.Classes[0].Keys = &Keys{Count: 2}
	sc.Classes = append(sc.Classes, Class{Name: "b", Rate: 1})
	sc.Service.StoreOutages = []Span{{At: 10 * time.Second, For: 10 * time.Second}}
	n, err := sc.normalize()
	if err != nil {
		t.Fatal(err)
	}
	s := newRateStore(n)
	for _, tc := range []struct {
		when   time.Duration
		shared bool
	}{{5 * time.Second, true}, {10 * time.Second, false}, {19 * time.Second, false}, {20 * time.Second, true}} {
		b, ok := s.allow(epoch.Add(tc.when), 2, 0, 1, inSpans(n.Service.StoreOutages, tc.when))
		if !ok || b == nil {
			t.Fatalf("at %v: the first request of a key was refused", tc.when)
		}
		if got := b == s.shared[0].b[1]; got != tc.shared {
			t.Errorf("at %v: decided by the fleet's bucket %v, want %v", tc.when, got, tc.shared)
		}
		if !tc.shared && (b != s.local[2][0].b[1] || float64(b.Limit()) != 12.5 || b.Burst() != 3) {
			t.Errorf("at %v: fallback bucket %v/s burst %d, want replica 2's at 12.5/s burst 3", tc.when, b.Limit(), b.Burst())
		}
	}
	if b, ok := s.allow(epoch.Add(time.Second), 0, 1, 0, false); b != nil || !ok {
		t.Error("a class without a rate limit was limited")
	}
	if newRateStore(&Scenario{Classes: []Class{{Name: "a"}}, Service: Service{Replicas: 2}}) != nil {
		t.Error("a store for no rate limit")
	}
}

// TestKeysTune: tune draws a Shared limit for the fleet (the multiple of
// the peak, not its share per replica) and keeps it shared; a class
// spread over keys draws a quota per tenant for the fleet, or keeps its
// own with KeepRateLimits; the snippet says which limits need a shared
// KeyStore, and drops the one-key caveat when every limited class has
// keys.
func TestKeysTune(t *testing.T) {
	sc := tinyTune()
	sc.Service.Replicas = 2
	sc.Classes[1].RateLimit = &RateLimit{RPS: 1, Shared: true}
	cs, err := TuneSpace(sc, 40, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drawn := 0
	for _, c := range cs[1:] {
		if l := c.Classes[1].RateLimit; l != nil && *l != (RateLimit{RPS: 1, Burst: 1, Shared: true}) {
			drawn++
			if f := l.RPS / 150; !l.Shared || f < 0.49 || f > 2.01 {
				t.Errorf("candidate %s: rate limit %+v, want shared at 0.5 to 2 x the peak of 150/s", c.String(), *l)
			}
		}
	}
	if drawn == 0 {
		t.Error("no shared rate limit drawn")
	}
	sc.Classes[1].Keys = &Keys{Count: 50, Zipf: 1}
	quotas, _ := TuneSpace(sc, 20, 1, TuneSpaceOptions{})
	hot := 150 * sc.Classes[1].Keys.hotShare() // the heaviest key's rate, for the fleet
	for _, c := range quotas[1:] {
		if l := c.Classes[1].RateLimit; l != nil && (!l.Shared || l.RPS < 0.49*hot || l.RPS > 4.01*hot) {
			t.Errorf("candidate %s: quota %+v, want shared at 0.5 to 4 x the heaviest key's %.3g/s", c.String(), *l, hot)
		}
	}
	kept, _ := TuneSpace(sc, 20, 1, TuneSpaceOptions{KeepRateLimits: true})
	for _, c := range append(kept, quotas[0]) {
		if l := c.Classes[1].RateLimit; l == nil || *l != (RateLimit{RPS: 1, Burst: 1, Shared: true}) {
			t.Fatalf("candidate %s: the baseline, or a class with keys under KeepRateLimits, keeps its quota per tenant", c.String())
		}
	}
	src, err := kept[0].GoSnippet(sc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(src, "// The rates are for the whole fleet: set nethttp.Config.KeyStore to a") || strings.Contains(src, "as one key") {
		t.Errorf("snippet:\n%s", src)
	}

	// A scenario that takes the store away keeps a shared limit in every
	// candidate, or the candidate would have no store to fail.
	sc.Classes[1].Keys = nil
	sc.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 2 * time.Second}}
	cs, err = TuneSpace(sc, 40, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if l := c.Classes[1].RateLimit; l == nil || !l.Shared {
			t.Errorf("candidate %s: no shared limit for the store's outages", c.String())
		}
		if err := c.Apply(sc).Validate(); err != nil {
			t.Errorf("candidate %s: %v", c.String(), err)
		}
	}
}

// TestKeysOutageCharged: what the fleet's bucket admits is charged
// to each replica's share too (as shedredis does), so a replica does not
// start each outage with whatever its bucket refilled since the last
// one. A tenant at its quota still gets part of a burst per outage, as
// from shedredis: its shares are charged only at their own refill rate.
// Without the charge, ten outages let through 1056 here.
func TestKeysOutageCharged(t *testing.T) {
	none, _ := ParsePolicy("none")
	admitted := func(outages []Span) int64 {
		sc := rateScenario(100, &RateLimit{RPS: 10, Burst: 100, Shared: true}, 4)
		sc.Duration, sc.Warmup = 60*time.Second, 10*time.Second
		sc.Service.StoreOutages = outages
		r, err := Run(sc, none, Options{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		return r.Summary.Admitted
	}
	var outages []Span
	for at := 10 * time.Second; at < 60*time.Second; at += 5 * time.Second {
		outages = append(outages, Span{At: at, For: time.Second})
	}
	up, flaky := admitted(nil), admitted(outages)
	t.Logf("admitted %d with the store up, %d with ten outages", up, flaky)
	if up < 480 || up > 520 || flaky > up+10*30 {
		t.Errorf("admitted %d with the store up (want about 10/s x 50 s), %d with ten outages (want at most 30 more each, under a third of the burst of 100)", up, flaky)
	}
}

// TestKeysNormalizeCopies: normalizing copies the keys and the outages,
// so that a caller's later edits do not change a validated scenario.
func TestKeysNormalizeCopies(t *testing.T) {
	sc := keyedScenario(10, &RateLimit{RPS: 5, Shared: true}, 2, &Keys{Count: 3})
	sc.Service.StoreOutages = []Span{{At: time.Second, For: time.Second}}
	n, err := sc.normalize()
	if err != nil {
		t.Fatal(err)
	}
	sc.Classes[0].Keys.Count = 9
	sc.Service.StoreOutages[0].At = 3 * time.Second
	if n.Classes[0].Keys.Count != 3 || n.Service.StoreOutages[0].At != time.Second {
		t.Errorf("normalized scenario shares the caller's keys or outages: %+v, %v", n.Classes[0].Keys, n.Service.StoreOutages)
	}
}

// TestKeySurge: during a surge, key 0 sends Factor times its share and
// the other keys send as before; the class's rate grows by key 0's extra
// alone, and the surge is checked.
func TestKeySurge(t *testing.T) {
	none, _ := ParsePolicy("none")
	// 10 keys, Zipf 1: key 0 sends 1/H(10) = 0.341 of 200/s, 68.3/s.
	keys := &Keys{Count: 10, Zipf: 1}
	base := keyedScenario(200, nil, 1, keys)
	base.Duration = 30 * time.Second
	surge := keyedScenario(200, nil, 1, &Keys{Count: 10, Zipf: 1, Surge: &KeySurge{At: 10 * time.Second, For: 10 * time.Second, Factor: 5}})
	surge.Duration = base.Duration
	p0 := keys.hotShare()
	if math.Abs(p0-0.3414) > 1e-3 {
		t.Fatalf("hot share %.4f, want 1/H(10) = 0.3414", p0)
	}
	measured := (base.Duration - base.Warmup).Seconds()
	tests := []struct {
		sc            *Scenario
		hot, hotExtra float64 // expected requests of key 0 after the warm-up
		others        float64
		name          string
	}{
		{base, 200 * p0 * measured, 0, 200 * (1 - p0) * measured, "no surge"},
		{surge, 200 * p0 * measured, 4 * 200 * p0 * 10, 200 * (1 - p0) * measured, "surge x5 for 10s"},
	}
	for _, tc := range tests {
		r, err := Run(tc.sc, none, Options{Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		c := r.Summary.Classes[0]
		hot, others := float64(c.HotKeyOffered), float64(c.Offered-c.HotKeyOffered)
		want := tc.hot + tc.hotExtra
		t.Logf("%s: key 0 %v (want %.0f), others %v (want %.0f)", tc.name, hot, want, others, tc.others)
		if math.Abs(hot-want) > 4*math.Sqrt(want) || math.Abs(others-tc.others) > 4*math.Sqrt(tc.others) {
			t.Errorf("%s: key 0 sent %v, want %.0f; the others %v, want %.0f", tc.name, hot, want, others, tc.others)
		}
	}
	bad := []struct {
		edit func(cl *Class)
		want string
	}{
		{func(cl *Class) { cl.Keys.Surge.Factor = 1 }, "classes[0].keys.surge.factor: must be in (1, 1000], got 1"},
		{func(cl *Class) { cl.Keys.Surge.Factor = math.NaN() }, "classes[0].keys.surge.factor"},
		{func(cl *Class) { cl.Keys.Surge.For = 0 }, "classes[0].keys.surge: must start at or after 0s"},
		{func(cl *Class) { cl.Keys.Surge.At = 25 * time.Second }, "end by the duration (30s); got at 25s for 10s"},
		{func(cl *Class) { cl.Keys.Count = 1 }, "classes[0].keys.surge: needs keys.count >= 2"},
		{func(cl *Class) { cl.Rate, cl.Users = 0, 10 }, "classes[0].keys.surge: needs an open-loop class"},
	}
	for _, b := range bad {
		sc := cloneScenario(surge, "", Span{})
		b.edit(&sc.Classes[0])
		if err := sc.Validate(); err == nil || !errors.Is(err, ErrInvalidScenario) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("error %v, want one containing %q and ErrInvalidScenario", err, b.want)
		}
	}
	if surge.Classes[0].Keys.Surge.Factor != 5 {
		t.Error("cloneScenario shares the surge")
	}
	y := "name: s\nduration: 30s\nclasses: [{name: a, rate: 10, keys: {count: 3, zipf: 1, surge: {at: 10s, for: 5s, factor: 8}}}]\nupstream: {capacity: 1, service_time: 1ms}\n"
	sc, err := ParseScenario("s.yaml", []byte(y))
	if err != nil || *sc.Classes[0].Keys.Surge != (KeySurge{At: 10 * time.Second, For: 5 * time.Second, Factor: 8}) {
		t.Errorf("parsed surge: %v, %+v", err, sc)
	}
}
