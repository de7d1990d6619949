package sim

import (
	"bytes"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// rateScenario is one open-loop class at rate against an upstream far
// larger than its load, so that under the "none" policy only the rate
// limit refuses anything.
func rateScenario(rate float64, rl *RateLimit, replicas int) *Scenario {
	return &Scenario{
		Name: "rate", Duration: 40 * time.Second, Warmup: 5 * time.Second,
		Classes:  []Class{{Name: "a", Rate: rate, RateLimit: rl}},
		Service:  Service{Replicas: replicas},
		Upstream: Upstream{Capacity: 10000, ServiceTime: Const(float64(time.Millisecond))},
	}
}

// seriesTotals sums the attempts, admissions and 429s of every interval,
// the warm-up included, where the bucket starts full.
func seriesTotals(r *Result) (attempts, admitted, limited int64) {
	for _, row := range r.Series {
		attempts += row.Attempts
		admitted += row.Admitted
		limited += row.RateLimited
	}
	return
}

// TestRateLimitEngine checks the 429s of a class's rate limit in virtual
// time: their share at a class's rate above the limit, the burst that a
// full bucket lets through, the bucket of each replica, and nothing
// without a limit.
func TestRateLimitEngine(t *testing.T) {
	tests := []struct {
		name     string
		rate     float64
		limit    *RateLimit
		replicas int
		lo, hi   float64 // bounds of the measured share of attempts refused
	}{
		{"absent", 200, nil, 1, 0, 0},
		{"far above the rate", 200, &RateLimit{RPS: 2000}, 1, 0, 0},
		{"twice the limit", 200, &RateLimit{RPS: 100, Burst: 10}, 1, 0.47, 0.53},
		// A bucket of one token is a loss system of one server with
		// deterministic service: it admits 1/(1+2) of Poisson arrivals at
		// twice its rate, not a half.
		{"twice the limit, burst 1", 200, &RateLimit{RPS: 100, Burst: 1}, 1, 0.64, 0.69},
		{"four times the limit", 400, &RateLimit{RPS: 100}, 1, 0.72, 0.78},
		{"a bucket per replica", 200, &RateLimit{RPS: 150, Burst: 20}, 2, 0, 0.02},
		{"per replica, over", 400, &RateLimit{RPS: 100, Burst: 10}, 2, 0.47, 0.53},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, share := checkLimitedShare(t, rateScenario(tc.rate, tc.limit, tc.replicas), 3, tc.lo, tc.hi)
			if s.Rejected != 0 || s.Classes[0].RateLimited != s.RateLimited || s.Admitted+s.RateLimited != s.Attempts {
				t.Errorf("rejected %d (want 0: 429s are not sheds), class %d, admitted %d + limited %d != attempts %d",
					s.Rejected, s.Classes[0].RateLimited, s.Admitted, s.RateLimited, s.Attempts)
			}
			if m, ok := s.Metric("rate_limited"); !ok || m != share {
				t.Errorf("metric rate_limited %v (%v), want %v", m, ok, share)
			}
			if tc.limit == nil && s.Goodput != s.Logical {
				t.Errorf("goodput %d of %d without a rate limit", s.Goodput, s.Logical)
			}
		})
	}
}

// checkLimitedShare runs sc under "none" with seed and checks that the
// share of attempts rate limited is within [lo, hi].
func checkLimitedShare(t *testing.T, sc *Scenario, seed uint64, lo, hi float64) (Summary, float64) {
	t.Helper()
	none, _ := ParsePolicy("none")
	r, err := Run(sc, none, Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	share := float64(s.RateLimited) / float64(s.Attempts)
	t.Logf("%d of %d attempts rate limited (%.3f)", s.RateLimited, s.Attempts, share)
	if share < lo || share > hi {
		t.Errorf("%d of %d attempts rate limited (%.3f), want a share in [%g, %g]", s.RateLimited, s.Attempts, share, lo, hi)
	}
	return s, share
}

// TestRateLimitBurst: a class far over its rate limit gets exactly the
// full bucket at the start, then the rate, whatever the burst.
func TestRateLimitBurst(t *testing.T) {
	none, _ := ParsePolicy("none")
	for _, burst := range []int{1, 50, 400} {
		sc := rateScenario(1000, &RateLimit{RPS: 2, Burst: burst}, 1)
		r, err := Run(sc, none, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		attempts, admitted, limited := seriesTotals(r)
		want := int64(burst) + int64(2*sc.Duration.Seconds())
		if admitted < want-2 || admitted > want || attempts != admitted+limited {
			t.Errorf("burst %d: %d admitted, want about %d (burst + 2/s x %v); %d attempts, %d limited", burst, admitted, want, sc.Duration, attempts, limited)
		}
	}
}

// TestRateLimitRetryAfter: clients that honour Retry-After wait the
// whole seconds the middleware would announce before retrying a 429, so
// that they retry far less within a deadline shorter than that, and
// clients that honour "do not retry" make one attempt each.
func TestRateLimitRetryAfter(t *testing.T) {
	none, _ := ParsePolicy("none")
	sc := rateScenario(200, &RateLimit{RPS: 100, Burst: 10}, 1)
	sc.Classes[0].Retry = Retry{MaxAttempts: 3}
	naive, err := Run(sc, none, Options{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	sc.Classes[0].Retry.HonorRetryAfter = true
	polite, _ := Run(sc, none, Options{Seed: 2})
	sc.Classes[0].Retry = Retry{MaxAttempts: 3, HonorNoRetry: true}
	final, _ := Run(sc, none, Options{Seed: 2})
	if naive.Summary.ClientRetries == 0 || polite.Summary.ClientRetries != 0 || final.Summary.Amplification != 1 {
		t.Errorf("retries: naive %d, honouring Retry-After (1s > the 1s deadline) %d, honouring no-retry amplification %.3f",
			naive.Summary.ClientRetries, polite.Summary.ClientRetries, final.Summary.Amplification)
	}
}

// TestRateLimitOutputs: rate_limited is the last column of the summary
// CSV and JSON outputs (the series add the limits' reasons after it), and the table shows a 429 column only when some run
// has 429s, so that tables of runs without rate limits are unchanged.
func TestRateLimitOutputs(t *testing.T) {
	none, _ := ParsePolicy("none")
	plain, err := Run(rateScenario(200, nil, 1), none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	limited, err := Run(rateScenario(200, &RateLimit{RPS: 100}, 1), none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSeriesCSV(&b, []*Result{limited}); err != nil {
		t.Fatal(err)
	}
	head, rest, _ := strings.Cut(b.String(), "\n")
	cols, first := strings.Split(head, ","), strings.Split(strings.SplitN(rest, "\n", 2)[0], ",")
	k := slices.Index(cols, "rate_limited")
	if !strings.Contains(head, ",a_p99,rate_limited,limit_idle,") || k < 0 || k >= len(first) || first[k] == "0" {
		t.Errorf("series CSV: header %q, first row %q: want rate_limited after the class columns and 429s in the first interval", head, first)
	}
	b.Reset()
	if err := WriteSummaryCSV(&b, []*Summary{&plain.Summary, &limited.Summary}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if !strings.HasSuffix(lines[0], ",a_p99_s,rate_limited") || !strings.HasSuffix(lines[1], ",0") || strings.HasSuffix(lines[2], ",0") {
		t.Errorf("summary CSV:\n%s", b.String())
	}
	if j := string(AppendSummaryJSON(nil, &limited.Summary)); !strings.Contains(j, `}],"rate_limited":`) {
		t.Errorf("summary JSON without rate_limited last: %s", j)
	}
	for _, tc := range []struct {
		sums []*Summary
		want bool
	}{{[]*Summary{&plain.Summary}, false}, {[]*Summary{&plain.Summary, &limited.Summary}, true}} {
		b.Reset()
		if err := WriteTable(&b, tc.sums); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), " 429 "); got != tc.want {
			t.Errorf("table shows a 429 column: %v, want %v:\n%s", got, tc.want, b.String())
		}
	}
}

// TestRateLimitYAML checks rate_limit in scenario files: its fields, the
// default burst, the errors that name the field, and the round trip
// through MarshalScenario.
func TestRateLimitYAML(t *testing.T) {
	src := strings.Replace(validYAML, "rate: 100", "rate: 100\n    rate_limit: {rps: 200, burst: 50}", 1)
	sc, err := ParseScenario("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if l := sc.Classes[0].RateLimit; l == nil || *l != (RateLimit{RPS: 200, Burst: 50}) {
		t.Fatalf("rate limit %+v", l)
	}
	y, err := MarshalScenario(sc)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseScenario("again.yaml", y)
	if err != nil || *again.Classes[0].RateLimit != *sc.Classes[0].RateLimit {
		t.Fatalf("round trip: %v\n%s", err, y)
	}
	sc.Classes[0].RateLimit = &RateLimit{RPS: 35}
	n, err := sc.normalize()
	if err != nil || n.Classes[0].RateLimit.Burst != 4 || sc.Classes[0].RateLimit.Burst != 0 {
		t.Errorf("default burst: %v, normalized %+v, original %+v (want 4, and the original untouched)", err, n.Classes[0].RateLimit, sc.Classes[0].RateLimit)
	}
	checkClassFieldErrors(t, "rate_limit", []fieldCase{
		{"{rps: 0}", `f.yaml:6:23: classes[0].rate_limit.rps: must be in (0, 1e+09], got 0`},
		{"{burst: 5}", `f.yaml:6:17: classes[0].rate_limit.rps: must be in (0, 1e+09], got 0`},
		{"{rps: -5}", `f.yaml:6:23: classes[0].rate_limit.rps: must be in (0, 1e+09], got -5`},
		{"{rps: 2e9}", `f.yaml:6:23: classes[0].rate_limit.rps: must be in (0, 1e+09]`},
		{"{rps: 10, burst: -1}", `f.yaml:6:34: classes[0].rate_limit.burst: must be >= 1 (0: default 1), got -1`},
		{"{rps: 10, burst: 1.5}", `f.yaml:6:34: classes[0].rate_limit.burst: want an integer, got "1.5"`},
		{"{rps: 10, rate: 5}", `f.yaml:6:27: classes[0].rate_limit.rate: unknown field "rate" (known: burst, rps, shared)`},
		{"200", `f.yaml:6:17: classes[0].rate_limit: want a mapping (key: value lines), got "200"`},
	})
}

// TestRateLimitRecorded: a recorder attached with RecordPolicy sees the
// recorded replica's 429s as the middleware's Observer does: a rejection
// record with ReasonRateLimited each, counted among the class's arrivals
// and sheds in the ticks; the other replica's are not its.
func TestRateLimitRecorded(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	none, _ := ParsePolicy("none")
	sc := rateScenario(400, &RateLimit{RPS: 100, Burst: 10}, 2)
	r, err := Run(sc, RecordPolicy(none, rec, 0), Options{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	rd := record.NewReader(&buf)
	var limited int64
	var last *record.Tick
	for {
		x, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case x.Kind == record.KindTick:
			last = x.Tick
		case x.Kind == record.KindRejected && x.Reason == shed.ReasonRateLimited:
			limited++
		}
	}
	// Round robin over two replicas, the warm-up included: about half of
	// everything is replica 0's.
	attempts, _, all := seriesTotals(r)
	if last == nil || math.Abs(float64(limited)/float64(all)-0.5) > 0.02 ||
		int64(last.Shed[0]) != limited || math.Abs(float64(last.Arrivals[0])/float64(attempts)-0.5) > 0.02 {
		t.Errorf("recorded %d 429s of %d, last tick %+v, of %d attempts", limited, all, last, attempts)
	}
}
