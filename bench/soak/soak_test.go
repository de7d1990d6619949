package soak

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shortConfig is the 10-second server soak of `make test`. Under the race
// detector the upstream is 10 workers x 100ms (100 req/s, offered 1,000
// req/s) instead of 20 x 50ms (400 req/s, offered 4,000 req/s): still 10x
// overload, at a rate the instrumented load generator can sustain.
func shortConfig(d time.Duration) Config {
	cfg := Config{Duration: d}
	if raceEnabled {
		cfg.Capacity, cfg.ServiceTime, cfg.Workers = 10, 100*time.Millisecond, 128
	}
	return cfg
}

// logReport logs a report as the soak command prints it.
func logReport(t *testing.T, rep io.WriterTo) {
	t.Helper()
	var b strings.Builder
	_, _ = rep.WriteTo(&b)
	t.Log("\n" + b.String())
}

func checkNamed(cs []CheckResult, name string) CheckResult {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return CheckResult{Name: name, Detail: "missing"}
}

func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s load test")
	}
	rep, err := Run(context.Background(), shortConfig(10*time.Second))
	logReport(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	timing := map[string]bool{}
	for _, name := range TimingChecks {
		timing[name] = true
	}
	starved := rep.Starved()
	for _, c := range rep.Checks() {
		switch {
		case c.OK:
		case starved && timing[c.Name]:
			// The machine, not the service, was slow: the upstream's own
			// timers fired late. Reported, not enforced.
			t.Logf("starved of CPU (effective service time %v for %v): not enforced: %s: %s",
				rep.EffectiveService[phaseBefore], rep.Config.ServiceTime, c.Name, c.Detail)
		default:
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
	// The figures the checks rest on must have been measured at all.
	if rep.Requests == 0 || rep.Admitted == 0 || rep.Goroutines.Samples < 4 || len(rep.PerSecond) < 10 {
		t.Errorf("too little measured: %d requests, %d admitted, %d samples, %d seconds",
			rep.Requests, rep.Admitted, rep.Goroutines.Samples, len(rep.PerSecond))
	}
}

// Without load shedding (a static limit far above the upstream's
// capacity) the same soak must fail: requests queue at the upstream until
// their deadline, so admitted latency reaches the request deadline.
func TestSoakWithoutSheddingFails(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s load test")
	}
	cfg := shortConfig(6 * time.Second)
	cfg.StaticLimit = 100000
	rep, err := Run(context.Background(), cfg)
	logReport(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	cs := rep.Checks()
	if c := checkNamed(cs, "admitted-p99"); c.OK {
		t.Errorf("admitted-p99 passed without load shedding: %s", c.Detail)
	}
	if err := rep.Check(); !errors.Is(err, ErrCheck) {
		t.Errorf("Check() = %v, want ErrCheck", err)
	}
	// Closing must still be clean: nothing may leak even when the
	// service is overwhelmed.
	for _, name := range []string{"statuses", "in-flight-zero", "no-leaks-at-end"} {
		if c := checkNamed(cs, name); !c.OK {
			t.Errorf("%s: %s", name, c.Detail)
		}
	}
}

func shortClientConfig(d time.Duration) ClientConfig {
	cfg := ClientConfig{Duration: d}
	if raceEnabled {
		cfg.Rate = 100
	}
	return cfg
}

// TestClientSoak: 5 s of the client soak through an outage in which the
// upstream answers 503, or resets every connection (each attempt then
// fails without a response and costs a connection). The budget must bound
// the attempts the same way, and nothing may leak.
func TestClientSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("5 s load tests")
	}
	for _, resets := range []bool{false, true} {
		name := "503"
		if resets {
			name = "resets"
		}
		t.Run(name, func(t *testing.T) {
			cfg := shortClientConfig(5 * time.Second)
			cfg.OutageReset = resets
			rep, err := RunClient(context.Background(), cfg)
			logReport(t, rep)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.Check(); err != nil {
				t.Error(err)
			}
			// The outage must have made the client want to retry, and the
			// budget must have refused some of it: otherwise the bound was
			// not tested. With resets, requests must have ended without a
			// response.
			if rep.OutageLogical == 0 || rep.AttemptsByNumber[2] == 0 || rep.BudgetDenials == 0 || (resets && rep.LogicalErrors == 0) {
				t.Errorf("outage not exercised: %d logical in the outage, %d second attempts, %d denials, %d without a response",
					rep.OutageLogical, rep.AttemptsByNumber[2], rep.BudgetDenials, rep.LogicalErrors)
			}
		})
	}
}

// Without a budget, three attempts per logical request during the outage
// exceed the budget's bound: the amplification check must fail.
func TestClientSoakWithoutBudgetFails(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s load test")
	}
	cfg := shortClientConfig(4 * time.Second)
	cfg.NoBudget = true
	rep, err := RunClient(context.Background(), cfg)
	logReport(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	cs := rep.Checks()
	if c := checkNamed(cs, "amplification"); c.OK {
		t.Errorf("amplification passed without a budget: %s", c.Detail)
	}
	for _, name := range []string{"max-attempts", "outcomes", "connections-reused", "no-leaks-at-end"} {
		if c := checkNamed(cs, name); !c.OK {
			t.Errorf("%s: %s", name, c.Detail)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"short", Config{Duration: time.Second}, "Duration"},
		{"capacity", Config{Capacity: -1}, "Capacity"},
		{"service", Config{ServiceTime: time.Microsecond}, "ServiceTime"},
		{"overload", Config{Overload: 0.5}, "Overload"},
		{"slowdown factor", Config{SlowdownFactor: 1000}, "SlowdownFactor"},
		{"slowdown window", Config{SlowdownStart: 40 * time.Second, SlowdownEnd: 20 * time.Second}, "SlowdownStart"},
		{"slowdown at the end", Config{SlowdownStart: 10 * time.Second, SlowdownEnd: 59 * time.Second}, "SlowdownStart"},
		{"client timeout", Config{RequestTimeout: 2 * time.Second, ClientTimeout: time.Second}, "ClientTimeout"},
		{"static limit", Config{StaticLimit: -1}, "StaticLimit"},
		{"workers", Config{Workers: -3}, "Workers"},
		{"warmup", Config{Warmup: time.Hour}, "Warmup"},
		{"sampling", Config{SampleEvery: time.Millisecond}, "SampleEvery"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Run: %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		cfg   ClientConfig
		field string
	}{
		{"short", ClientConfig{Duration: time.Second}, "Duration"},
		{"rate", ClientConfig{Rate: -1}, "Rate"},
		{"outage", ClientConfig{OutageStart: 5 * time.Second, OutageEnd: time.Second}, "OutageStart"},
		{"attempts", ClientConfig{MaxAttempts: 99}, "MaxAttempts"},
		{"workers", ClientConfig{Workers: -1}, "Workers"},
		{"timeout", ClientConfig{Timeout: time.Millisecond}, "Timeout"},
	} {
		t.Run("client "+tc.name, func(t *testing.T) {
			_, err := RunClient(context.Background(), tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("RunClient: %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// A report that measured nothing fails, and Check names every failed
// check, not only the first.
func TestCheckListsEveryFailure(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	rep := Report{Config: cfg, Recovery: -1, UtilizationRecovery: -1, Statuses: map[int]uint64{500: 1}, OtherStatuses: 1}
	err = rep.Check()
	if !errors.Is(err, ErrCheck) {
		t.Fatalf("Check() = %v, want ErrCheck", err)
	}
	for _, name := range []string{"offered-rate", "statuses", "shed-rate", "goodput", "admitted-p99", "recovery", "goroutines-bounded", "heap-bounded"} {
		if !strings.Contains(err.Error(), name+":") {
			t.Errorf("Check() does not name %s: %v", name, err)
		}
	}
	for _, name := range []string{"answered-in-time", "in-flight-zero", "no-leaks-at-end"} {
		if strings.Contains(err.Error(), name+":") {
			t.Errorf("Check() names %s, which holds for an empty report: %v", name, err)
		}
	}
}

// The goroutine and heap bounds: a leak that grows with the requests fails
// them, steady figures pass.
func TestResourceBounds(t *testing.T) {
	cfg, err := Config{Workers: 10}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	series := func(f func(i int) int) []Sample {
		var s []Sample
		for i := 0; i < 60; i++ {
			s = append(s, Sample{T: time.Duration(i+1) * time.Second, Goroutines: f(i), HeapInuse: 8 << 20})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		f    func(int) int
		ok   bool
	}{
		{"steady", func(int) int { return 300 }, true},
		{"burst during the slowdown", func(i int) int {
			if i >= 20 && i < 40 {
				return 500
			}
			return 300
		}, true},
		{"one goroutine per request at 400 req/s", func(i int) int { return 300 + 400*i }, false},
		{"slow creep of 10 per second", func(i int) int { return 300 + 10*i }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sampler{cfg: cfg, samples: series(tc.f)}
			var rep Report
			rep.Config = cfg
			s.finish(&rep)
			got := checkNamed(rep.Checks(), "goroutines-bounded")
			if got.OK != tc.ok {
				t.Errorf("goroutines-bounded = %v (%s), want %v", got.OK, got.Detail, tc.ok)
			}
			if h := checkNamed(rep.Checks(), "heap-bounded"); !h.OK {
				t.Errorf("heap-bounded failed on a flat heap: %s", h.Detail)
			}
		})
	}
}

// The hostile soak's tests come last (go test runs a file's tests in
// order), so that they cannot change what the soaks above measure: on a
// loaded 2-core machine, the server soak's offered-rate check (a timing
// check) reached 67-88% of the rate in some runs after the hostile soak in
// the same process, against 96-100% alone.
// shortHostileConfig is the hostile soak of `make test`: 8 seconds, the
// hostile clients in the middle 4, resources sampled 4 times a second.
// Under the race detector the normal traffic is halved.
func shortHostileConfig() HostileConfig {
	cfg := HostileConfig{Duration: 8 * time.Second, SampleEvery: 250 * time.Millisecond}
	if raceEnabled {
		cfg.Rate, cfg.Workers = 100, 16
	}
	return cfg
}

// TestHostileShort: every check of the hostile soak passes, and each kind
// of hostile client was exercised.
func TestHostileShort(t *testing.T) {
	if testing.Short() {
		t.Skip("8 s load test")
	}
	rep, err := RunHostile(context.Background(), shortHostileConfig())
	logReport(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Error(err)
	}
	for k, f := range rep.Kinds {
		if f.Sent == 0 {
			t.Errorf("no %s request was sent", HostileKindNames[k])
		}
	}
}

// With the slow uploads replaced by requests as slow in the handler (the
// service's own slowness, answered 503 at the deadline), the limit must
// fall: the limit-held check must fail, which shows it can. Everything
// else about closing must still hold. 6 seconds are enough: the hostile
// window (3 s) sees at least three of those drops. There are 24 of them,
// enough to use the limit: drops of work far below the limit are the
// dependency's failures, not congestion, and Gradient does not cut on
// them (limits/doc.go).
func TestHostileSlowWorkFails(t *testing.T) {
	if testing.Short() {
		t.Skip("6 s load test")
	}
	cfg := shortHostileConfig()
	cfg.Duration = 6 * time.Second
	cfg.SlowWork = true
	cfg.SlowUploaders = 24
	rep, err := RunHostile(context.Background(), cfg)
	logReport(t, rep)
	if err != nil {
		t.Fatal(err)
	}
	cs := rep.Checks()
	if c := checkNamed(cs, "limit-held"); c.OK {
		t.Errorf("limit-held passed with the service's own slowness: %s", c.Detail)
	}
	if err := rep.Check(); !errors.Is(err, ErrCheck) {
		t.Errorf("Check() = %v, want ErrCheck", err)
	}
	for _, name := range []string{"connections-closed", "permits-released", "no-false-success", "no-leaks-at-end"} {
		if c := checkNamed(cs, name); !c.OK {
			t.Errorf("%s: %s", name, c.Detail)
		}
	}
}

func TestHostileConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   HostileConfig
		field string
	}{
		{"short", HostileConfig{Duration: time.Second}, "Duration"},
		{"rate", HostileConfig{Rate: -1}, "Rate"},
		{"limit", HostileConfig{Limit: 2}, "Limit"},
		{"fail every", HostileConfig{FailEvery: 1}, "FailEvery"},
		{"timeout", HostileConfig{RequestTimeout: time.Millisecond}, "RequestTimeout"},
		{"service", HostileConfig{ServiceTime: time.Second}, "ServiceTime"},
		{"hang bound", HostileConfig{HangBound: time.Second}, "HangBound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RunHostile(context.Background(), tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("RunHostile: %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
