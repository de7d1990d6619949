package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// TestFitStoreLongRecording: a recording of more store calls than the
// fit keeps durations of (fitStoreSamples) fits as a short one does. The
// share of calls that timed out was taken from the kept samples (at most
// 50,000 answered) against every timeout (up to 50,000 more), so 120,000
// calls with 7% timed out counted as 14% timed out: the round trip came
// out slower than the service's, and the report named 50,000 answered
// calls where there were 111,000.
func TestFitStoreLongRecording(t *testing.T) {
	truth := fitRateScenario()
	truth.Classes[0].RateLimit.Shared = true
	m := &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), 0.8), Timeout: 2 * time.Millisecond}
	const n = 120_000
	data, timedOut := recordStoreCalls(t, truth, m, n)
	fit := fitBytes(t, data)
	checkStoreFit(t, fit, n, timedOut)
	notes := strings.Join(fit.Notes, "\n")
	if want := fmt.Sprintf("service.store from %d answered calls", n-timedOut); !strings.Contains(notes, want) {
		t.Errorf("notes do not say %q:\n%s", want, notes)
	}
}

// storeOnlyRecording records a fitRateScenario run and n store calls of
// op, each ended with res after took.
func storeCallsRecording(t *testing.T, n int, op record.StoreOp, res func(i int) (record.StoreResult, time.Duration)) []byte {
	t.Helper()
	truth := fitRateScenario()
	truth.Classes[0].RateLimit.Shared = true
	rec, buf := startRecordedRun(t, truth, "none")
	for i := range n {
		r, took := res(i)
		rec.Add(record.Record{Kind: record.KindStore, Time: Epoch().Add(time.Duration(i) * truth.Duration / time.Duration(n)),
			Op: op, Result: r, Latency: took, Timed: true})
		if rec.Pending() >= rec.Capacity()/2 {
			rec.Flush()
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFitStoreMostlyTimedOut: when half the calls or more timed out the
// fit writes no store and says why, and its report gives no median: it
// reported "median 0s, p99 0s" for the answered few, and with every call
// timed out it blamed too few answered calls rather than the timeouts.
func TestFitStoreMostlyTimedOut(t *testing.T) {
	for _, answeredEvery := range []int{0, 3} {
		t.Run(fmt.Sprint("answered every ", answeredEvery), func(t *testing.T) {
			data := storeCallsRecording(t, 3000, record.StoreAllow, func(i int) (record.StoreResult, time.Duration) {
				if answeredEvery > 0 && i%answeredEvery == 0 {
					return record.StoreOK, time.Millisecond
				}
				return record.StoreTimeout, 5 * time.Millisecond
			})
			fit := fitBytes(t, data)
			if fit.Scenario.Service.Store != nil {
				t.Errorf("service.store %+v from mostly timed-out calls", fit.Scenario.Service.Store)
			}
			var rep strings.Builder
			WriteFitReport(&rep, fit)
			notes := strings.Join(fit.Notes, "\n")
			if strings.Contains(rep.String(), "median 0s") || !strings.Contains(notes, "timed out: the round trip's median is beyond the timeout") {
				t.Errorf("the report and notes do not say the calls timed out:\n%s\n%s", rep.String(), notes)
			}
		})
	}
}

// TestFitStoreEdgeShapes: a single operation, durations all equal (a
// constant round trip), and every call skipped by the open breaker: the
// fit never writes a store the simulator refuses (fitBytes parses the
// scenario back), and writes one only from answered calls.
func TestFitStoreEdgeShapes(t *testing.T) {
	cases := []struct {
		name  string
		op    record.StoreOp
		res   func(int) (record.StoreResult, time.Duration)
		store bool
	}{
		{"constant", record.StoreAllow, func(int) (record.StoreResult, time.Duration) { return record.StoreOK, 700 * time.Microsecond }, true},
		{"constant with timeouts", record.StoreAllow, func(i int) (record.StoreResult, time.Duration) {
			if i%10 == 0 {
				return record.StoreTimeout, 5 * time.Millisecond
			}
			return record.StoreOK, 700 * time.Microsecond
		}, true},
		{"zero durations", record.StoreAllow, func(int) (record.StoreResult, time.Duration) { return record.StoreOK, 0 }, true},
		{"breaker open", record.StoreAllow, func(int) (record.StoreResult, time.Duration) { return record.StoreBreakerOpen, 0 }, false},
		{"renewals only", record.StoreRenew, func(int) (record.StoreResult, time.Duration) { return record.StoreOK, time.Millisecond }, false},
		{"acquires without a key cap", record.StoreAcquire, func(int) (record.StoreResult, time.Duration) { return record.StoreOK, time.Millisecond }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fit := fitBytes(t, storeCallsRecording(t, 2000, c.op, c.res))
			if got := fit.Scenario.Service.Store != nil; got != c.store {
				t.Errorf("service.store %+v, want written: %v (notes %q)", fit.Scenario.Service.Store, c.store, fit.Notes)
			}
		})
	}
}

// TestFitStoreNeverInvalid: whatever durations a recording holds (the
// reader takes any up to 292 years), the fit writes no service.store
// the simulator refuses (fitBytes parses the scenario back). Calls that
// timed out after 100 years gave a lease_ttl of 4 x timeout, which
// overflowed to a negative one.
func TestFitStoreNeverInvalid(t *testing.T) {
	for _, took := range []time.Duration{100 * 365 * 24 * time.Hour, time.Duration(1<<63 - 1)} {
		t.Run(took.String(), func(t *testing.T) {
			data := storeCallsRecording(t, 2000, record.StoreAllow, func(i int) (record.StoreResult, time.Duration) {
				if i%10 == 0 {
					return record.StoreTimeout, took
				}
				return record.StoreOK, time.Millisecond
			})
			fitBytes(t, data)
		})
	}
}

// TestFitStoreNeverInvalidNotes: the recording whose timeouts are no
// budget says so, and writes no store.
func TestFitStoreNeverInvalidNotes(t *testing.T) {
	data := storeCallsRecording(t, 2000, record.StoreAllow, func(i int) (record.StoreResult, time.Duration) {
		if i%10 == 0 {
			return record.StoreTimeout, time.Duration(1<<63 - 1)
		}
		return record.StoreOK, time.Millisecond
	})
	fit := fitBytes(t, data)
	if fit.Scenario.Service.Store != nil || !strings.Contains(strings.Join(fit.Notes, "\n"), "no client's time budget") {
		t.Errorf("service.store %+v, notes %q", fit.Scenario.Service.Store, fit.Notes)
	}
}
