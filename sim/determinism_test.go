package sim

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// outputs renders every deterministic output of a batch.
func outputs(t *testing.T, rs []*Result) []byte {
	t.Helper()
	var b bytes.Buffer
	sums := make([]*Summary, len(rs))
	for i, r := range rs {
		sums[i] = &r.Summary
	}
	for _, f := range []func() error{
		func() error { return WriteSeriesCSV(&b, rs) },
		func() error { return WriteSeriesJSON(&b, rs) },
		func() error { return WriteSummaryCSV(&b, sums) },
		func() error { return WriteSummaryJSON(&b, sums) },
		func() error { return WriteTable(&b, sums) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// shortRetryStorm is the retry storm cut to 40 s (retries, gateway,
// budgets, timeouts and rejections all happen).
func shortRetryStorm(t *testing.T, name string) *Scenario {
	sc, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration, sc.Warmup = 40*time.Second, 5*time.Second
	sc.Upstream.Events = []UpstreamEvent{{At: 15 * time.Second, For: 5 * time.Second, Slowdown: 5}}
	sc.Expect = nil
	return sc
}

func TestDeterminism(t *testing.T) {
	mixed, err := Builtin("mixed")
	if err != nil {
		t.Fatal(err)
	}
	mixed.Duration, mixed.Trigger, mixed.Expect = 40*time.Second, &Span{At: 15 * time.Second, For: 10 * time.Second}, nil
	mixed.Classes[1].Schedule = []RateChange{{At: 15 * time.Second, Rate: 4800, For: 10 * time.Second}}
	// The spike runs into a rate limit: its 429s are deterministic too.
	mixed.Classes[1].RateLimit = &RateLimit{RPS: 3000}
	llm, err := Builtin("llm")
	if err != nil {
		t.Fatal(err)
	}
	llm.Duration, llm.Warmup, llm.Trigger, llm.Expect = 80*time.Second, 20*time.Second, &Span{At: 30 * time.Second, For: 20 * time.Second}, nil
	scenarios := []*Scenario{shortRetryStorm(t, "retry-storm"), shortRetryStorm(t, "retry-budget"), mixed, llm}
	policies := defaultPolicies
	if raceEnabled {
		rs := shortRetryStorm(t, "retry-storm")
		rs.Duration = 25 * time.Second
		llm.Duration = 50 * time.Second
		scenarios = []*Scenario{rs, llm}
		policies = []string{"none", "shedkit-gradient", "gcl-vegas"}
	}
	var jobs []Job
	for _, sc := range scenarios {
		for _, name := range policies {
			p, err := ParsePolicy(name)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, Job{Scenario: sc, Policy: p, Seed: 42})
		}
	}
	// Different worker counts, same bytes.
	a, err := RunBatch(context.Background(), jobs, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunBatch(context.Background(), jobs, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	oa, ob := outputs(t, a), outputs(t, b)
	if !bytes.Equal(oa, ob) {
		t.Fatalf("two runs with the same seed differ (%d and %d bytes)", len(oa), len(ob))
	}
	// Another seed gives other bytes: the seed is used.
	other := jobs[len(jobs)-1]
	other.Seed = 43
	c, err := RunBatch(context.Background(), []Job{other}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(outputs(t, a[len(a)-1:]), outputs(t, c)) {
		t.Fatal("seeds 42 and 43 gave the same bytes")
	}
}

// TestStreamsIndependent checks that a component's draws do not depend on
// other components: adding a class leaves the arrivals of the first one
// unchanged.
func TestStreamsIndependent(t *testing.T) {
	none, _ := ParsePolicy("none")
	base := &Scenario{
		Name: "a", Duration: 20 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 300}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(time.Millisecond))},
	}
	more := *base
	more.Classes = append([]Class{}, base.Classes...)
	more.Classes = append(more.Classes, Class{Name: "b", Rate: 200, Cost: Unif(1, 10)})
	r1, err := Run(base, none, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Run(&more, none, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	for i := range r1.Series {
		if a, b := r1.Series[i].Classes[0].Offered, r2.Series[i].Classes[0].Offered; a != b {
			t.Fatalf("interval %d: class a offered %d alone, %d with class b", i, a, b)
		}
	}
}

func TestRunBatchCancel(t *testing.T) {
	sc := benchScenario()
	p, _ := ParsePolicy("static")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RunBatch(ctx, []Job{{sc, p, 1}, {sc, p, 2}}, 2, nil)
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
