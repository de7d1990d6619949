package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestKeyConcurrencyYAML checks key_concurrency in scenario files: its
// fields, the round trip through MarshalScenario, and the errors that
// name the field, with its line and column.
func TestKeyConcurrencyYAML(t *testing.T) {
	for _, kc := range []string{"{limit: 20, shared: true}", "{limit: 3}"} {
		src := strings.Replace(validYAML, "rate: 100", "rate: 100\n    keys: {count: 5}\n    key_concurrency: "+kc, 1)
		sc, err := ParseScenario("f.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		want := KeyConcurrency{Limit: 20, Shared: true}
		if kc == "{limit: 3}" {
			want = KeyConcurrency{Limit: 3}
		}
		if k := sc.Classes[0].KeyConcurrency; k == nil || *k != want {
			t.Fatalf("%s: key concurrency %+v, want %+v", kc, k, want)
		}
		y, err := MarshalScenario(sc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(y), "key_concurrency: "+kc) {
			t.Errorf("written as:\n%s", y)
		}
		roundTrip(t, sc)
	}
	checkClassFieldErrors(t, "key_concurrency", []fieldCase{
		{"{limit: 0}", `f.yaml:6:30: classes[0].key_concurrency.limit: must be in [1, 1000000], got 0`},
		{"{limit: -2}", `f.yaml:6:30: classes[0].key_concurrency.limit: must be in [1, 1000000], got -2`},
		{"{limit: 1000001}", `f.yaml:6:30: classes[0].key_concurrency.limit: must be in [1, 1000000], got 1000001`},
		{"{shared: true}", `f.yaml:6:22: classes[0].key_concurrency.limit: must be in [1, 1000000], got 0`},
		{"{limit: 1.5}", `f.yaml:6:30: classes[0].key_concurrency.limit: want an integer, got "1.5"`},
		{"{limit: 2, shared: yes please}", `f.yaml:6:41: classes[0].key_concurrency.shared: want true or false`},
		{"{limit: 2, max: 3}", `f.yaml:6:33: classes[0].key_concurrency.max: unknown field "max" (known: limit, shared)`},
		{"20", `f.yaml:6:22: classes[0].key_concurrency: want a mapping (key: value lines), got "20"`},
	})
}

// TestKeyConcurrencyValidate: a key concurrency limit is checked, its
// counts bounded, a shared one is a store that outages may take away and
// a per-replica one is not; errors name the field.
func TestKeyConcurrencyValidate(t *testing.T) {
	shared := &KeyConcurrency{Limit: 4, Shared: true}
	tests := []struct {
		name string
		edit func(sc *Scenario)
		want string // "" for a valid scenario
	}{
		{"no limit", func(sc *Scenario) { sc.Classes[0].KeyConcurrency = &KeyConcurrency{Shared: true} }, "classes[0].key_concurrency.limit: must be in [1, 1000000], got 0"},
		{"limit too large", func(sc *Scenario) { sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: MaxKeyConcurrency + 1} }, "classes[0].key_concurrency.limit"},
		{"second class", func(sc *Scenario) {
			sc.Classes = append(sc.Classes, Class{Name: "b", Rate: 1, KeyConcurrency: &KeyConcurrency{Limit: -1}})
		}, "classes[1].key_concurrency.limit: must be in [1, 1000000], got -1"},
		{"too many counts", func(sc *Scenario) {
			sc.Service.Replicas = 200
			sc.Classes[0].KeyConcurrency, sc.Classes[0].Keys = shared, &Keys{Count: MaxKeys}
		}, "classes[0].key_concurrency: needs 20100000 counts"},
		{"outage of a per-replica limit", func(sc *Scenario) {
			sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 4}
			sc.Service.StoreOutages = []Span{{At: time.Second, For: time.Second}}
		}, "service.store_outages: no class has a shared rate limit (rate_limit.shared) or a shared key concurrency"},
		{"outage of a shared limit", func(sc *Scenario) {
			sc.Classes[0].KeyConcurrency = shared
			sc.Service.StoreOutages = []Span{{At: time.Second, For: time.Second}}
		}, ""},
		{"one key, per replica", func(sc *Scenario) { sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 1} }, ""},
		{"the largest limit", func(sc *Scenario) { sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: MaxKeyConcurrency} }, ""},
	}
	for _, tc := range tests {
		sc := rateScenario(10, nil, 2)
		tc.edit(sc)
		err := sc.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q and ErrInvalidScenario", tc.name, err, tc.want)
		}
	}
}

// TestKeyConcurrencyCopied: normalizing and cloneScenario copy the key
// concurrency, so that a caller's later edits change neither.
func TestKeyConcurrencyCopied(t *testing.T) {
	sc := rateScenario(10, nil, 2)
	sc.Classes[0].KeyConcurrency = &KeyConcurrency{Limit: 3, Shared: true}
	n, err := sc.normalize()
	if err != nil {
		t.Fatal(err)
	}
	c := cloneScenario(sc, "copy", Span{})
	sc.Classes[0].KeyConcurrency.Limit = 9
	if n.Classes[0].KeyConcurrency.Limit != 3 || c.Classes[0].KeyConcurrency.Limit != 3 {
		t.Errorf("the normalized scenario (%+v) or the clone (%+v) shares the caller's key concurrency",
			n.Classes[0].KeyConcurrency, c.Classes[0].KeyConcurrency)
	}
}
