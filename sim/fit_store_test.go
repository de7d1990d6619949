package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// TestFitStoreRoundTrip is issue 19's store round trip: a service with a
// shared rate limit whose store calls take a known round trip
// (log-normal, median 600 us) within a 2 ms budget, recorded as shedredis
// records them (Config.Recorder: StoreCall, then a KindStore record; the
// calls by a fake clock that draws each duration, a slower one timing
// out at the budget), fitted back: the fitted median is within 10% of
// the truth, and so is the share of calls the fitted round trip would
// time out (within a point), the budget is found, the report says so, and
// the scenario gets service.store with its rate limit shared. Recordings
// used to time no store call, and the report said so. With sigma 0.8 (7%
// timed out), fitted to the answered calls alone, the round trip came out
// narrower (median 579 us, sigma 0.71) and timed out 4.1% of the calls.
func TestFitStoreRoundTrip(t *testing.T) {
	for _, sigma := range []float64{0.5, 0.8} {
		t.Run(fmt.Sprint("sigma ", sigma), func(t *testing.T) {
			truth := fitRateScenario()
			truth.Classes[0].RateLimit.Shared = true
			m := &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), sigma), Timeout: 2 * time.Millisecond}
			data, timedOut := recordStoreCalls(t, truth, m, 5000)
			fit := fitBytes(t, data)
			checkStoreFit(t, fit, 5000, timedOut)
		})
	}
}

// recordStoreCalls runs truth recorded (without a store model: the
// simulator would record its own calls) and records n rate decisions'
// store calls over its span as shedredis would, timed by a fake clock
// that draws each from m, and returns the recording and how many timed
// out.
func recordStoreCalls(t *testing.T, truth *Scenario, m *StoreModel, n int) ([]byte, int) {
	t.Helper()
	rec, buf := startRecordedRun(t, truth, "none")
	rng, timedOut := rand.New(rand.NewPCG(1, 2)), 0
	for i := range n {
		start := Epoch().Add(time.Duration(i) * truth.Duration / time.Duration(n))
		took, res := time.Duration(m.Latency.sample(rng)), record.StoreOK
		if took > m.Timeout {
			took, res = m.Timeout+50*time.Microsecond, record.StoreTimeout
			timedOut++
		}
		if rec.StoreCall() {
			rec.Add(record.Record{Kind: record.KindStore, Time: start, Op: record.StoreAllow, Result: res, Latency: took, Timed: true})
		}
		if rec.Pending() >= rec.Capacity()/2 {
			rec.Flush() // the writer keeps up, as with calls spread in time
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), timedOut
}

// checkStoreFit checks a fit of recordStoreCalls's recording of n calls.
func checkStoreFit(t *testing.T, fit *Fit, n, timedOut int) {
	t.Helper()
	st := fit.Store
	if got, want := st.Median, 600e3; math.Abs(got/want-1) > 0.10 {
		t.Errorf("fitted median %v, want %v within 10%%", fitDur(got), fitDur(want))
	}
	if st.Calls != n || st.Results[record.StoreTimeout] != timedOut || st.Allows != n {
		t.Errorf("store fit %+v: want %d calls, %d timed out", st, n, timedOut)
	}
	sc := fit.Scenario.Service.Store
	if sc == nil || sc.Timeout != 2100*time.Microsecond || math.Abs(distMedian(sc.Latency)/600e3-1) > 0.10 {
		t.Fatalf("service.store %+v, want the fitted round trip and the 2.1ms the timeouts took", sc)
	}
	observed, implied := float64(timedOut)/float64(n), 1-sc.Latency.cdf(float64(2*time.Millisecond))
	if math.Abs(implied-observed) > 0.01 {
		t.Errorf("the fitted round trip %+v times out %.1f%% of the calls, the service %.1f%%", sc.Latency, 100*implied, 100*observed)
	}
	if rl := fit.Scenario.Classes[0].RateLimit; rl == nil || !rl.Shared {
		t.Errorf("api's rate limit %+v, want it shared: the store keeps it", rl)
	}
	var rep strings.Builder
	WriteFitReport(&rep, fit)
	if !strings.Contains(rep.String(), fmt.Sprintf("store: %d calls recorded", n)) || !strings.Contains(rep.String(), "written as service.store") {
		t.Errorf("the report does not say what the store calls told:\n%s", rep.String())
	}
}

// TestFitStoreTooFewCalls: below FitMinStoreCalls answered calls the
// fit reports the calls and writes no service.store, and says why.
func TestFitStoreTooFewCalls(t *testing.T) {
	truth := fitRateScenario()
	truth.Duration = 20 * time.Second
	rec, buf := startRecordedRun(t, truth, "none")
	for i := range FitMinStoreCalls - 1 {
		rec.Add(record.Record{Kind: record.KindStore, Time: Epoch().Add(time.Duration(i) * time.Millisecond), Op: record.StoreAcquire,
			Latency: time.Millisecond, Timed: true})
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fit := fitBytes(t, buf.Bytes())
	if fit.Scenario.Service.Store != nil || fit.Store.Model != nil {
		t.Errorf("service.store %+v from %d calls", fit.Scenario.Service.Store, FitMinStoreCalls-1)
	}
	var rep strings.Builder
	WriteFitReport(&rep, fit)
	if !strings.Contains(rep.String(), "not written into the scenario") || !strings.Contains(strings.Join(fit.Notes, "\n"), "too few answered calls") {
		t.Errorf("the report does not say why there is no store:\n%s", rep.String())
	}
}

// TestFitStoreSimulatedRoundTrip: the simulator records its replica's
// store calls as shedredis does (RecordPolicy with Service.Store), so a
// simulated service with a known round trip (log-normal, median 600 us,
// sigma 0.5, budget 5 ms) fits back: the fitted median within 10%, and
// service.store written with the rate limit shared. Simulated recordings
// used to time no store call.
func TestFitStoreSimulatedRoundTrip(t *testing.T) {
	truth := fitRateScenario()
	truth.Classes[0].RateLimit.Shared = true
	truth.Service.Store = &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), 0.5)}
	fit := fitBytes(t, recordRun(t, truth, "none"))
	st := fit.Store
	if st.Calls < 5000 || st.Allows != st.Calls || st.Share(record.StoreOK) < 0.999 {
		t.Fatalf("%d calls, %d rate decisions, %.2f%% answered: want every api request's rate decision, answered within 5ms (but for 1 in 10^5)",
			st.Calls, st.Allows, 100*st.Share(record.StoreOK))
	}
	if got := st.Median; math.Abs(got/600e3-1) > 0.10 {
		t.Errorf("fitted median %v, want 600µs within 10%%", fitDur(got))
	}
	sc := fit.Scenario.Service.Store
	if sc == nil || math.Abs(distMedian(sc.Latency)/600e3-1) > 0.10 || (sc.Timeout != 0 && sc.Timeout != 5*time.Millisecond) {
		t.Fatalf("service.store %+v, want the fitted round trip and the 5ms budget (the default, or what the rare timeouts took)", sc)
	}
	if rl := fit.Scenario.Classes[0].RateLimit; rl == nil || !rl.Shared {
		t.Errorf("api's rate limit %+v, want it shared", rl)
	}
}
