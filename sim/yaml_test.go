package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const validYAML = `name: t
duration: 60s
classes:
  - name: a
    rate: 100
upstream:
  capacity: 10
  service_time: {dist: lognormal, median: 50ms, sigma: 0.5}
`

// fieldCase is a value of a class's field and the start of the error it
// must give (file, line, column, path, message).
type fieldCase struct{ value, want string }

// checkClassFieldErrors gives validYAML's class field: value for each
// case, on the line after its rate (line 6), and checks that parsing
// fails with ErrInvalidScenario and the case's error.
func checkClassFieldErrors(t *testing.T, field string, cases []fieldCase) {
	t.Helper()
	for _, tc := range cases {
		src := strings.Replace(validYAML, "rate: 100", "rate: 100\n    "+field+": "+tc.value, 1)
		_, err := ParseScenario("f.yaml", []byte(src))
		if err == nil || !errors.Is(err, ErrInvalidScenario) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %s: error %v, want prefix %q and ErrInvalidScenario", field, tc.value, err, tc.want)
		}
	}
}

func TestParseScenarioErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top field", "nmae: x\n", `f.yaml:1:1: nmae: unknown field "nmae"`},
		{"unknown nested field", strings.Replace(validYAML, "rate: 100", "rate: 100\n    retry: {max_atempts: 3}", 1), `f.yaml:6:13: classes[0].retry.max_atempts: unknown field "max_atempts" (known: backoff, budget,`},
		{"duplicate key", strings.Replace(validYAML, "rate: 100", "rate: 100\n    rate: 200", 1), `f.yaml:6:5: classes[0].rate: field given twice`},
		{"bad duration", strings.Replace(validYAML, "duration: 60s", "duration: sixty", 1), `f.yaml:2:11: duration: want a duration such as 250ms, 1.5s or 2m, got "sixty"`},
		{"number for duration", strings.Replace(validYAML, "duration: 60s", "duration: 60", 1), `f.yaml:2:11: duration: want a duration`},
		{"bad number", strings.Replace(validYAML, "rate: 100", "rate: lots", 1), `f.yaml:5:11: classes[0].rate: want a finite number, got "lots"`},
		{"bad int", strings.Replace(validYAML, "capacity: 10", "capacity: 1.5", 1), `f.yaml:7:13: upstream.capacity: want an integer, got "1.5"`},
		{"list expected", strings.Replace(validYAML, "classes:\n  - name: a\n    rate: 100", "classes: {name: a}", 1), `f.yaml:3:10: classes: want a list, got a mapping`},
		{"mapping expected", strings.Replace(validYAML, "  - name: a\n    rate: 100", "  - a", 1), `f.yaml:4:5: classes[0]: want a mapping (key: value lines), got "a"`},
		{"missing sigma", strings.Replace(validYAML, ", sigma: 0.5", "", 1), `f.yaml:8:17: upstream.service_time.sigma: a lognormal distribution needs sigma`},
		{"wrong dist param", strings.Replace(validYAML, "median: 50ms, sigma: 0.5", "median: 50ms, sigma: 0.5, max: 1s", 1), `f.yaml:8:66: upstream.service_time.max: not a parameter of a lognormal distribution (it takes median, mean, sigma)`},
		{"no dist", strings.Replace(validYAML, "{dist: lognormal, median: 50ms, sigma: 0.5}", "{median: 50ms}", 1), `f.yaml:8:17: upstream.service_time.dist: a distribution needs dist`},
		{"unknown dist", strings.Replace(validYAML, "dist: lognormal", "dist: gaussian", 1), `f.yaml:8:24: upstream.service_time.dist: want one of constant, exponential, lognormal, uniform, pareto, bimodal, got "gaussian"`},
		{"invalid value", strings.Replace(validYAML, "capacity: 10", "capacity: 0", 1), `f.yaml:7:13: upstream.capacity: must be in [1, 1000000], got 0`},
		{"missing required", strings.Replace(validYAML, "duration: 60s\n", "", 1), `f.yaml: duration: must be > 0, got 0s`},
		{"event past the end", validYAML + "  events:\n    - {at: 50s, for: 20s, slowdown: 3}\n", `f.yaml:10:7: upstream.events[0]: needs at >= 0, for > 0 and at+for <= duration (1m0s), got at 50s for 20s`},
		{"overlapping schedule", strings.Replace(validYAML, "rate: 100", "rate: 100\n    schedule:\n      - {at: 10s, factor: 2, for: 10s}\n      - {at: 15s, rate: 5}", 1), `f.yaml:8:14: classes[0].schedule[1].at: 15s is before the end of the previous change (20s)`},
		{"rate and factor", strings.Replace(validYAML, "rate: 100", "rate: 100\n    schedule:\n      - {at: 10s, factor: 2, rate: 5}", 1), `f.yaml:7:9: classes[0].schedule[0]: a change sets exactly one of rate and factor`},
		{"class name with a tab", strings.Replace(validYAML, "name: a", `name: "a\tb"`, 1), `f.yaml:4:11: classes[0].name: "a\tb": control or format character U+0009 at byte 1`},
		{"open and closed loop", strings.Replace(validYAML, "rate: 100", "rate: 100\n    users: 5", 1), `f.yaml:6:12: classes[0].users: a class is either open-loop`},
		{"bad discipline", strings.Replace(validYAML, "capacity: 10", "capacity: 10\n  discipline: lifo", 1), `f.yaml:8:15: upstream.discipline: want one of fifo, ps, got "lifo"`},
		{"negative max in flight", strings.Replace(validYAML, "capacity: 10", "capacity: 10\n  max_in_flight: -1", 1), `f.yaml:8:18: upstream.max_in_flight: must be >= 0, got -1`},
		{"bad balancer", validYAML + "service: {replicas: 2, balancer: random}\n", `f.yaml:9:34: service.balancer: want one of round_robin, least_in_flight, power_of_two, got "random"`},
		{"unknown policy", validYAML + "policies: [none, magic]\n", `f.yaml:9:18: policies[1]: unknown policy "magic"`},
		{"unknown metric", validYAML + "expect:\n  - {policy: none, metric: speed, min: 1}\n", `f.yaml:10:28: expect[0].metric: unknown metric "speed"`},
		{"bad key source", strings.Replace(validYAML, "rate: 100", "rate: 100\n    keys: {count: 2, source: header:X/Tenant}", 1), `f.yaml:6:30: classes[0].keys.source: not a header name after header:`},
		{"key source with a line break", strings.Replace(validYAML, "rate: 100", "rate: 100\n    keys: {count: 2, source: \"addr\\nx\"}", 1), `f.yaml:6:30: classes[0].keys.source: byte 0x0a at 4: only visible ASCII`},
		{"bad bool", strings.Replace(validYAML, "rate: 100", "rate: 100\n    lifo: yes", 1), `f.yaml:6:11: classes[0].lifo: want true or false, got "yes"`},
		{"malformed yaml", "name: x\n  duration: [\n", `f.yaml:2: malformed YAML:`},
		{"empty", "", `f.yaml: empty scenario`},
		{"queue without wait", strings.Replace(validYAML, "rate: 100", "rate: 100\n    queue: 5", 1), `f.yaml:6:12: classes[0].queue: a queue needs max_wait`},
		{"shares", strings.Replace(validYAML, "rate: 100", "rate: 100\n    protected: 0.7\n  - name: b\n    protected: 0.7", 1), `f.yaml:4:3: classes: protected shares sum to 1.400, more than 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !errors.Is(err, ErrInvalidScenario) {
				t.Errorf("error %v does not match ErrInvalidScenario", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error:\n  %s\nwant prefix:\n  %s", err, tc.want)
			}
		})
	}
}

// fullYAML sets fields of every section of a scenario, for
// TestParseScenarioFields.
const fullYAML = `name: full
description: every field
duration: 100s
interval: 2s
warmup: 20s
sustain: 4s
trigger: {at: 40s, for: 20s}
classes:
  - name: interactive
    rate: 1_000
    schedule:
      - {at: 40s, factor: 3, for: 20s}
      - {at: 70s, rate: 500, ramp: 10s}
    cost: {dist: uniform, min: 1, max: 9}
    actual: {dist: constant, value: 0.5}
    timeout: 800ms
    attempt_timeout: 400ms
    retry: {max_attempts: 3, backoff: 5ms, max_backoff: 50ms, honor_no_retry: true, honor_retry_after: true, budget: {ratio: 0.1, min_per_second: 5, ttl: 5s}, throttle: {k: 1.5, window: 1m}}
    protected: 0.6
    queue: 10
    max_wait: 50ms
    lifo: true
  - name: users
    users: 50
    think: {dist: exponential, mean: 200ms}
gateway: {timeout: 500ms, retry: {max_attempts: 2}}
service: {replicas: 3, balancer: least_in_flight, max_cost: 1000, static_limit: 40, strict: true, max_queue: 7, demand_hold: 2s, timeout: 300ms, retry: {max_attempts: 2}, cancel_at_deadline: true}
upstream:
  capacity: 20
  service_time: {dist: lognormal, mean: 50ms, sigma: 1, clamp_max: 2s}
  degradation: 0.3
  max_degradation: 4
  cost_scaling: 0.5
  cost_ref: 5
  shared: true
  abandon: true
  events:
    - {at: 40s, for: 20s, slowdown: 2, errors: 0.1, capacity: 0.5}
policies: [none, "static:limit=30"]
expect:
  - {policy: none, metric: trigger_p99, max: 1500ms}
  - {policy: "*", metric: class.interactive.goodput, min: 0.5}
`

func TestParseScenarioFields(t *testing.T) {
	sc, err := ParseScenario("full.yaml", []byte(fullYAML))
	if err != nil {
		t.Fatal(err)
	}
	c := sc.Classes[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"interval", sc.Interval, 2 * time.Second},
		{"trigger", *sc.Trigger, Span{40 * time.Second, 20 * time.Second}},
		{"rate", c.Rate, 1000.0},
		{"schedule", c.Schedule[1], RateChange{At: 70 * time.Second, Rate: 500, Ramp: 10 * time.Second}},
		{"cost", c.Cost, Unif(1, 9)},
		{"retry", c.Retry.MaxAttempts, 3},
		{"budget", *c.Retry.Budget, Budget{Ratio: 0.1, MinPerSecond: 5, TTL: 5 * time.Second}},
		{"throttle", *c.Retry.Throttle, Throttle{K: 1.5, Window: time.Minute}},
		{"lifo", c.LIFO, true},
		{"users", sc.Classes[1].Users, 50},
		{"think", sc.Classes[1].Think, Exp(float64(200 * time.Millisecond))},
		{"gateway", sc.Gateway.Timeout, 500 * time.Millisecond},
		{"balancer", sc.Service.Balancer, LeastInFlight},
		{"service", sc.Service.MaxQueue, 7},
		{"cancel at deadline", sc.Service.CancelAtDeadline, true},
		{"abandon", sc.Upstream.Abandon, true},
		{"lognormal by mean", math32(sc.Upstream.ServiceTime.MeanValue()), math32(float64(50 * time.Millisecond))},
		{"clamp", sc.Upstream.ServiceTime.ClampMax, float64(2 * time.Second)},
		{"event", sc.Upstream.Events[0], UpstreamEvent{At: 40 * time.Second, For: 20 * time.Second, Slowdown: 2, Errors: 0.1, Capacity: 0.5}},
		{"policies", sc.Policies[1], "static:limit=30"},
		{"expect duration", sc.Expect[0].Max, 1.5},
		{"expect class", sc.Expect[1].Metric, "class.interactive.goodput"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	// It runs.
	p, _ := ParsePolicy("shedkit-gradient")
	if _, err := Run(sc, p, Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
}

func math32(f float64) float32 { return float32(f) }

func TestBuiltinsParse(t *testing.T) {
	for _, n := range SuiteNames() {
		sc, err := Builtin(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if sc.Name != n {
			t.Errorf("builtin %s is named %q", n, sc.Name)
		}
		if sc.Description == "" {
			t.Errorf("builtin %s has no description", n)
		}
	}
	if _, err := Builtin("nope"); err == nil {
		t.Error("Builtin(nope) did not fail")
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(validYAML))
	for _, n := range SuiteNames() {
		src, _ := BuiltinSource(n)
		f.Add(src)
	}
	f.Add([]byte("name: [\n"))
	f.Add([]byte("classes: [{name: a, schedule: [{at: 1s, factor: -1}]}]\n"))
	f.Add([]byte("name: r\nduration: 5s\nclasses: [{name: a, rate: 10, rate_limit: {rps: 1e-3, burst: 2147483647}}]\nupstream: {capacity: 1, service_time: 1ms}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("error %v does not match ErrInvalidScenario", err)
			}
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario does not validate: %v", err)
		}
	})
}

func TestParseHeavyTailedDists(t *testing.T) {
	const head = "name: d\nduration: 10s\nclasses: [{name: a, rate: 1}]\nupstream: {capacity: 1, service_time: "
	sc, err := ParseScenario("d.yaml", []byte(head+"{dist: pareto, median: 20ms, alpha: 1.5, clamp_max: 5s}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sc.Upstream.ServiceTime, (Dist{Kind: Pareto, Median: 20e6, Alpha: 1.5, ClampMax: 5e9}); got != want {
		t.Errorf("pareto: got %+v, want %+v", got, want)
	}
	sc, err = ParseScenario("d.yaml", []byte(head+"{dist: bimodal, median: 10ms, sigma: 0.3, ratio: 20, share: 0.1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sc.Upstream.ServiceTime, Bimod(10e6, 0.3, 20, 0.1); got != want {
		t.Errorf("bimodal: got %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ dist, want string }{
		{"{dist: pareto, median: 20ms}", "a pareto distribution needs alpha"},
		{"{dist: pareto, median: 20ms, alpha: 0}", "alpha: must be in [0.1, 100]"},
		{"{dist: pareto, median: 20ms, alpha: 2, sigma: 1}", "not a parameter of a pareto distribution"},
		{"{dist: bimodal, median: 10ms, sigma: 0.3, ratio: 0.5, share: 0.1}", "ratio: must be in [1, 1e6]"},
		{"{dist: bimodal, median: 10ms, sigma: 0.3, ratio: 5, share: 2}", "share: must be in [0, 1]"},
	} {
		_, err := ParseScenario("d.yaml", []byte(head+tc.dist+"}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.dist, err, tc.want)
		}
	}
}
