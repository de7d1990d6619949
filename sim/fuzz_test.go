package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzScenarioRuns: every scenario that ParseScenario accepts can be
// simulated. Parsing is deterministic; validation catches everything the
// limiter, budget and throttle constructors would reject (building the
// engine never fails); and a small scenario runs to its end with one row
// per interval.
func FuzzScenarioRuns(f *testing.F) {
	addScenarioRunsSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<14 {
			return
		}
		sc, n, ok := parseFuzzScenario(t, data)
		if !ok {
			return
		}
		if n.Service.Replicas > 64 {
			return // building thousands of replicas proves nothing more
		}
		p, err := ParsePolicy("static")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newEngine(n, p, 1); err != nil {
			t.Fatalf("a valid scenario cannot be simulated: %v", err)
		}
		if !fuzzSmall(n) {
			return
		}
		runFuzzScenario(t, sc, n, p)
	})
}

// addScenarioRunsSeeds seeds FuzzScenarioRuns with the valid and builtin
// scenarios, small ones that reach retries, budgets, throttles,
// schedules, rate limits and the deadline models, and an event whose end
// overflows.
func addScenarioRunsSeeds(f *testing.F) {
	f.Add([]byte(validYAML))
	for _, n := range SuiteNames() {
		src, _ := BuiltinSource(n)
		f.Add(src)
	}
	for _, src := range scenarioRunsSeeds {
		f.Add([]byte(src))
	}
	// Rejected by validation: an event whose end overflows.
	f.Add([]byte("name: ovf\nduration: 10s\nclasses: [{name: a, rate: 1}]\nupstream: {capacity: 1, service_time: {dist: constant, value: 1ms}, events: [{at: 1h, for: 2562047h}]}\n"))
}

// scenarioRunsSeeds are the small scenarios of addScenarioRunsSeeds. Each
// must parse (TestScenarioRunsSeedsParse): the fuzz target skips what
// does not, so a seed with a typo would seed nothing.
var scenarioRunsSeeds = []string{
	`name: small
duration: 4s
interval: 500ms
warmup: 1s
classes:
  - name: a
    rate: 50
    queue: 4
    max_wait: 20ms
    retry: {max_attempts: 3, budget: {ratio: 0.1}}
  - {name: b, users: 5, think: {dist: exponential, mean: 100ms}}
service: {replicas: 2, max_cost: 20, retry: {max_attempts: 2, throttle: {k: 2}}}
upstream:
  capacity: 5
  service_time: {dist: uniform, min: 5ms, max: 30ms}
  events: [{at: 2s, for: 1s, slowdown: 5, errors: 0.1}]
`,
	`name: sched
duration: 3s
classes:
  - name: a
    rate: 20
    schedule: [{at: 1s, factor: 3, for: 500ms}, {at: 2s, rate: 0, ramp: 500ms}]
upstream: {capacity: 2, service_time: {dist: constant, value: 10ms}}
`,
	`name: limited
duration: 3s
classes:
  - {name: a, rate: 80, rate_limit: {rps: 40, burst: 5}, retry: {max_attempts: 2, honor_retry_after: true}}
  - {name: b, users: 3, rate_limit: {rps: 0.5}}
service: {replicas: 2}
upstream: {capacity: 2, service_time: {dist: constant, value: 10ms}}
`,
	`name: leases
duration: 3s
classes:
  - {name: a, rate: 80, keys: {count: 3, zipf: 1}, key_concurrency: {limit: 2, shared: true}, retry: {max_attempts: 2, honor_retry_after: true}}
  - {name: b, users: 3, key_concurrency: {limit: 1}, queue: 2, max_wait: 20ms}
service: {replicas: 2, store_outages: [{at: 1s, for: 1s}]}
upstream: {capacity: 2, service_time: {dist: constant, value: 10ms}}
`,
	`name: models
duration: 3s
classes:
  - {name: a, rate: 80, timeout: 50ms, retry: {max_attempts: 2}}
  - {name: b, users: 4, timeout: 300ms}
service: {replicas: 2, timeout: 40ms, cancel_at_deadline: true, retry: {max_attempts: 3}}
upstream: {capacity: 2, max_in_flight: 6, abandon: true, service_time: {dist: exponential, mean: 30ms}, events: [{at: 1s, for: 1s, capacity: 0.5}]}
`,
	`name: models-ps
duration: 3s
classes: [{name: a, rate: 80, timeout: 50ms}]
service: {cancel_at_deadline: true}
upstream: {capacity: 2, discipline: ps, abandon: true, service_time: {dist: exponential, mean: 30ms}}
`,
}

// parseFuzzScenario parses data twice and normalizes it. It reports
// false for data that is rightly rejected as ErrInvalidScenario.
func parseFuzzScenario(t *testing.T, data []byte) (sc, n *Scenario, ok bool) {
	sc, err := ParseScenario("fuzz.yaml", data)
	if err != nil {
		if !errors.Is(err, ErrInvalidScenario) {
			t.Fatalf("error %v does not match ErrInvalidScenario", err)
		}
		return nil, nil, false
	}
	again, err := ParseScenario("fuzz.yaml", data)
	if err != nil || !reflect.DeepEqual(sc, again) {
		t.Fatalf("parsing twice differs: %v", err)
	}
	n, err = sc.normalize()
	if err != nil {
		t.Fatalf("a parsed scenario does not normalize: %v", err)
	}
	return sc, n, true
}

// runFuzzScenario runs sc (normalized as n) to its end and checks its rows
// and summary.
func runFuzzScenario(t *testing.T, sc, n *Scenario, p Policy) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(sc, p, Options{Seed: 7, Context: ctx})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rows := int(n.Duration / n.Interval); len(res.Series) != rows {
		t.Fatalf("%d rows, want %d (duration %v, interval %v)", len(res.Series), rows, n.Duration, n.Interval)
	}
	s := res.Summary
	// (Work offered during the warmup may end in the measured part, so
	// goodput + failures can exceed the measured logical requests.)
	if s.Admitted > s.Attempts || s.Logical < 0 || s.Goodput < 0 {
		t.Fatalf("summary: logical %d, goodput %d, attempts %d, admitted %d", s.Logical, s.Goodput, s.Attempts, s.Admitted)
	}
}

// fuzzSmall reports whether a run of n is cheap enough for a fuzz
// iteration: few arrivals, attempts and users, a short virtual time.
func fuzzSmall(n *Scenario) bool {
	if n.Duration > time.Minute || n.Duration/n.Interval > 600 {
		return false
	}
	attempts := float64(n.Service.Retry.MaxAttempts)
	if g := n.Gateway; g != nil {
		attempts *= float64(g.Retry.MaxAttempts)
	}
	total := 0.0
	for i := range n.Classes {
		c := &n.Classes[i]
		if c.Users > 50 {
			return false
		}
		if c.Users > 0 {
			total += float64(c.Users) * n.Duration.Seconds() * 100 // at most ~100 per user-second
			continue
		}
		f, _ := buildRate(c.Rate, c.Schedule, "")
		total += f.integral(0, n.Duration.Seconds()) * float64(c.Retry.MaxAttempts)
	}
	return total*attempts < 20000
}

// FuzzParsePolicy: a spec either fails or builds a policy whose Name is
// the canonical spec, which parses back to the same name and whose
// limiter can be built for a scenario.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"none", "static", "static:limit=5", "shedkit-gradient:tolerance=1.5,smoothing=0.3",
		"shedkit-aimd:backoff=0.5, min=2 ,max=10", "gcl-gradient2:rtt=window", "gcl-vegas:window=500ms", "gcl-aimd:min_samples=3",
		"gcl-gradient2:initial=500,max=2000,min=30", "gcl-aimd:initial=5,max=4", "gcl-vegas:max=0",
		"static:limit=", "static:limit=1,limit=2", "nope", "shedkit-gradient:window=1x", "shedkit-gradient:quantile=NaN", "static:limit=99999999999"} {
		f.Add(s)
	}
	sc, err := ParseScenario("p.yaml", []byte(validYAML))
	if err != nil {
		f.Fatal(err)
	}
	n, err := sc.normalize()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		p, err := ParsePolicy(spec)
		if err != nil {
			if p != nil {
				t.Fatalf("ParsePolicy(%q): a policy and %v", spec, err)
			}
			return
		}
		name := p.Name()
		q, err := ParsePolicy(name)
		if err != nil || q.Name() != name {
			t.Fatalf("ParsePolicy(%q).Name() = %q, which parses to %v, %v", spec, name, q, err)
		}
		base, _, _ := strings.Cut(strings.TrimSpace(spec), ":")
		if !strings.HasPrefix(name, base) {
			t.Fatalf("ParsePolicy(%q).Name() = %q", spec, name)
		}
		if _, err := newEngine(n, p, 1); err != nil {
			t.Fatalf("policy %q accepted but cannot build a limiter: %v", name, err)
		}
	})
}

// FuzzParseGrid: a grid either fails or formats back (key=v1,v2 ...) to a
// string that parses to the same grid, with Size the product of its
// dimensions.
func FuzzParseGrid(f *testing.F) {
	for _, s := range []string{"tolerance=1.2,1.5,2 smoothing=0.2,0.5", "a=1;b=2,3\tc=x=y", "a=1,,2", "a=1 a=2", "=1", "a=", "", " ; "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGrid(s)
		if err != nil {
			return
		}
		size := 1
		var parts []string
		for _, d := range g {
			if d.Key == "" || len(d.Values) == 0 || strings.ContainsAny(d.Key, " ;\t\n") {
				t.Fatalf("ParseGrid(%q): dimension %+v", s, d)
			}
			size *= len(d.Values)
			parts = append(parts, d.Key+"="+strings.Join(d.Values, ","))
		}
		if g.Size() != size {
			t.Fatalf("Size %d, want %d", g.Size(), size)
		}
		formatted := strings.Join(parts, " ")
		h, err := ParseGrid(formatted)
		if err != nil || !reflect.DeepEqual(g, h) {
			t.Fatalf("ParseGrid(%q) = %+v; formatted %q parses to %+v, %v", s, g, formatted, h, err)
		}
	})
}

// FuzzParseObjective: an objective either fails or its String parses back
// to the same objective, with finite or infinite (never NaN) bounds.
func FuzzParseObjective(f *testing.F) {
	for _, s := range []string{"max:goodput", "min:p99,goodput>=0.9", "goodput,trigger_p99<=1.5s,recovery<=5s", "max:goodput,goodput>=90%",
		"max:class.interactive.goodput", "max:goodput,p99<=1h", "max:goodput,p99<=1e400", "max:goodput,p99<=inf", "max:goodput,p99<=NaN",
		"max:nope", "max:goodput,bad", "max:goodput,p99<=1ns", "min:", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseObjective(s)
		if err != nil {
			return
		}
		for _, c := range o.Constraints {
			if math.IsNaN(c.Value) {
				t.Fatalf("ParseObjective(%q): NaN bound in %+v", s, c)
			}
		}
		str := o.String()
		p, err := ParseObjective(str)
		if err != nil || !reflect.DeepEqual(o, p) {
			t.Fatalf("ParseObjective(%q) = %+v; its String %q parses to %+v, %v", s, o, str, p, err)
		}
	})
}

// TestScenarioDurationOverflow: validation rejects an upstream event that
// ends after the run, schedule changes that overlap and a trigger that
// ends after the run also when at+for (or warmup+interval) overflows
// time.Duration, with an error that names the file, line and field.
// (The sums used to wrap to negative values and pass the checks: an event
// at 1h of a 10 s run, and a change that starts while a spike "for 292
// years" is still on, were accepted.)
func TestScenarioDurationOverflow(t *testing.T) {
	const up = "upstream: {capacity: 1, service_time: {dist: constant, value: 1ms}}\n"
	tests := []struct{ name, yaml, want string }{
		{"event", "name: ovf\nduration: 10s\nclasses: [{name: a, rate: 1}]\nupstream: {capacity: 1, service_time: {dist: constant, value: 1ms}, events: [{at: 1h, for: 2562047h}]}\n",
			"ovf.yaml:4:78: upstream.events[0]: needs at >= 0, for > 0 and at+for <= duration (10s), got at 1h0m0s for 2562047h0m0s"},
		{"event at+for = max", "name: ovf\nduration: 10s\nclasses: [{name: a, rate: 1}]\nupstream: {capacity: 1, service_time: {dist: constant, value: 1ms}, events: [{at: 1s, for: 2562047h47m15.854775807s}]}\n",
			"ovf.yaml:4:78: upstream.events[0]: needs at >= 0"},
		{"schedule for", "name: ovf\nduration: 10s\nclasses: [{name: a, rate: 1, schedule: [{at: 1s, rate: 5, for: 2562047h47m16s}, {at: 2s, rate: 1}]}]\n" + up,
			"ovf.yaml:3:86: classes[0].schedule[1].at: 2s is before the end of the previous change (2562047h47m16.854775807s)"},
		{"schedule ramp", "name: ovf\nduration: 10s\nclasses: [{name: a, rate: 1, schedule: [{at: 1s, rate: 5, ramp: 2562047h47m16s}, {at: 2s, rate: 1}]}]\n" + up,
			"ovf.yaml:3:87: classes[0].schedule[1].at: 2s is before the end of the previous change (2562047h47m16.854775807s)"},
		{"trigger", "name: ovf\nduration: 10s\ntrigger: {at: 6s, for: 2562047h47m16s}\nclasses: [{name: a, rate: 1}]\n" + up,
			"ovf.yaml:3:10: trigger: must start after warmup + one interval (6s), last > 0 and end by the duration (10s); got at 6s for 2562047h47m16s"},
		{"warmup+interval", "name: ovf\nduration: 2562047h\ninterval: 2562047h\nwarmup: 1281023h30m\ntrigger: {at: 1s, for: 1s}\nclasses: [{name: a, rate: 0}]\n" + up,
			"ovf.yaml:5:10: trigger: must start after warmup + one interval (2562047h47m16.854775807s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario("ovf.yaml", []byte(tc.yaml))
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("accepted (%v):\n%s", err, tc.yaml)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to start with %q", err, tc.want)
			}
		})
	}
	// The same bounds still accept what fits exactly.
	for _, y := range []string{
		"name: fit\nduration: 10s\nclasses: [{name: a, rate: 1}]\nupstream: {capacity: 1, service_time: {dist: constant, value: 1ms}, events: [{at: 6s, for: 4s}]}\n",
		"name: fit\nduration: 10s\nclasses: [{name: a, rate: 1, schedule: [{at: 1s, rate: 5, for: 1s}, {at: 2s, rate: 1, ramp: 8s}, {at: 10s, rate: 2}]}]\n" + up,
		"name: fit\nduration: 10s\ntrigger: {at: 6s, for: 4s}\nclasses: [{name: a, rate: 1}]\n" + up,
	} {
		if _, err := ParseScenario("fit.yaml", []byte(y)); err != nil {
			t.Errorf("rejected: %v\n%s", err, y)
		}
	}
}

// TestScenarioRunsSeedsParse: every small seed of FuzzScenarioRuns is a
// scenario ParseScenario accepts.
func TestScenarioRunsSeedsParse(t *testing.T) {
	for i, src := range scenarioRunsSeeds {
		if _, err := ParseScenario("seed.yaml", []byte(src)); err != nil {
			t.Errorf("seed %d does not parse: %v", i, err)
		}
	}
}
