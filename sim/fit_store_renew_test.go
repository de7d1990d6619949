package sim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// leaseCallsRecording records a keyConcScenario run with its cap shared,
// and the store calls shedredis.Concurrency makes for it, as recorded
// with a Recorder: acquires and releases with a round trip drawn from m
// (timing out at m.Timeout), one renewal every period (two round trips;
// every tenth times out at the renewal's budget, max(m.Timeout,
// m.LeaseTTL/10)) and a cleanup after every third renewal (every tenth
// of them timing out at that budget too). It returns the recording and
// how many of the acquires and releases timed out.
func leaseCallsRecording(t *testing.T, m *StoreModel, calls int) ([]byte, int) {
	t.Helper()
	truth := keyConcScenario()
	truth.Classes[0].KeyConcurrency.Shared = true
	rec, buf := startRecordedRun(t, truth, "none")
	rng, timedOut := rand.New(rand.NewPCG(3, 4)), 0
	add := func(at time.Duration, op record.StoreOp, res record.StoreResult, took time.Duration) {
		rec.Add(record.Record{Kind: record.KindStore, Time: Epoch().Add(at), Op: op, Result: res, Latency: took, Timed: true})
		if rec.Pending() >= rec.Capacity()/2 {
			rec.Flush()
		}
	}
	trip := func() time.Duration { return time.Duration(m.Latency.sample(rng)) }
	for i := range calls {
		op, res, took := record.StoreAcquire, record.StoreOK, trip()
		if i%2 == 1 {
			op = record.StoreRelease
		}
		if took > m.Timeout {
			res, took = record.StoreTimeout, m.Timeout
			timedOut++
		}
		add(time.Duration(i)*truth.Duration/time.Duration(calls), op, res, took)
	}
	period, budget := m.LeaseTTL/3, max(m.Timeout, m.LeaseTTL/10)
	for k := range int(truth.Duration / period) {
		at := time.Duration(k+1) * period
		res, took := record.StoreOK, trip()+trip()
		if k%10 == 9 {
			res, took = record.StoreTimeout, budget
		}
		add(at, record.StoreRenew, res, took)
		if k%3 == 0 && res == record.StoreOK {
			res, took = record.StoreOK, trip()
			if k%30 == 0 {
				res, took = record.StoreTimeout, budget
			}
			add(at+3*time.Millisecond, record.StoreCleanup, res, took)
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), timedOut
}

// TestFitStoreRenewalsApart: the renewals (a pipeline of two round trips
// or more, with a budget of max(timeout, lease_ttl/10)) and the cleanups
// after them are fitted apart from the requests' calls: the round trip
// and the timeout come from the acquires and releases alone, and the
// report gives the renewals' own duration, their budget and their
// period, from which the fit takes lease_ttl (3 periods). The cleanups
// were fitted as releases: their timeouts counted as the requests', and
// lease_ttl was shedredis's default whatever the renewals showed.
func TestFitStoreRenewalsApart(t *testing.T) {
	m := &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), 0.5), Timeout: 2 * time.Millisecond, LeaseTTL: 600 * time.Millisecond}
	data, timedOut := leaseCallsRecording(t, m, 6000)
	fit := fitBytes(t, data)
	st := fit.Store
	if st.TimedOut != timedOut {
		t.Errorf("%d calls timed out, want the %d acquires and releases: renewals and cleanups have a budget of their own", st.TimedOut, timedOut)
	}
	if math.Abs(st.Median/600e3-1) > 0.10 {
		t.Errorf("fitted median %v, want 600µs within 10%%", fitDur(st.Median))
	}
	sc := fit.Scenario.Service.Store
	if sc == nil || sc.Timeout != m.Timeout || sc.LeaseTTL != m.LeaseTTL {
		t.Fatalf("service.store %+v, want timeout %v and lease_ttl %v (3 renewal periods)", sc, m.Timeout, m.LeaseTTL)
	}
	var rep strings.Builder
	WriteFitReport(&rep, fit)
	for _, want := range []string{"renewals: 150 recorded", "budget 60ms", "every 200ms"} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, rep.String())
		}
	}
	if notes := strings.Join(fit.Notes, "\n"); !strings.Contains(notes, "lease_ttl (600ms) is 3 times the renewals' period") {
		t.Errorf("the notes do not say where lease_ttl came from:\n%s", notes)
	}
}

// TestRenewalPeriod: the renewer's period is read from the gaps between
// its recorded renewals, whole numbers of periods (ticks with nothing to
// renew, renewals sampled out), a call starting a little after its tick;
// not from too few gaps of one period, nor from two renewers recording
// together.
func TestRenewalPeriod(t *testing.T) {
	const p = int64(100 * time.Millisecond)
	grid := func(ticks ...int64) []int64 {
		out := make([]int64, len(ticks))
		for i, k := range ticks {
			out[i] = k*p + (k%3)*int64(50*time.Microsecond) // a call starts up to 100us after its tick
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		starts []int64
		want   time.Duration
	}{
		{"every tick", grid(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 100 * time.Millisecond},
		{"sampled and idle", grid(9, 1, 2, 5, 6, 7, 12, 13, 20, 21, 29, 30, 31), 100 * time.Millisecond},
		{"too few of one period", grid(1, 2, 4, 5, 7, 9, 11, 14, 15, 18, 20, 22, 23, 26), 0},
		{"two renewers", append(grid(1, 2, 3, 4, 5, 6, 7, 8), 130e6, 230e6, 330e6, 430e6, 530e6, 630e6, 730e6), 0},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := renewalPeriod(tc.starts)
			if d := got - tc.want; d < -100*time.Microsecond || d > 100*time.Microsecond || (tc.want == 0) != (got == 0) {
				t.Errorf("period %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFitStoreLeaseTTLFromRenewalBudget: with too few renewals recorded
// to show their period, lease_ttl is ten times their budget when it is
// over the requests' timeout (max(timeout, lease_ttl/10)); at the
// requests' timeout it tells nothing, and lease_ttl is the default.
func TestFitStoreLeaseTTLFromRenewalBudget(t *testing.T) {
	for _, tc := range []struct {
		budget time.Duration
		want   time.Duration
		note   string
	}{
		{60 * time.Millisecond, 600 * time.Millisecond, "lease_ttl (600ms) is 10 times the renewals' budget (60ms"},
		{2 * time.Millisecond, 0, "lease_ttl (10s) is shedredis's default"},
	} {
		t.Run(tc.budget.String(), func(t *testing.T) {
			r := RenewalFit{Renewals: 3, Timeout: tc.budget, TimedOut: 3}
			ttl, note, shown := r.leaseTTL(2*time.Millisecond, true)
			if (tc.want != 0) != shown || (shown && ttl != tc.want) || !strings.Contains(note, tc.note) {
				t.Errorf("lease_ttl %v (shown %v): %q; want %v: %q", ttl, shown, note, tc.want, tc.note)
			}
		})
	}
}
