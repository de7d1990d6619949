package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// TestFitStoreBreaker: a simulated service whose shared leases' store
// goes out three times (2 s each), with a breaker that opens after 3
// failed calls in a row and probes after 500 ms, recorded whole and
// fitted back: breaker_failures is 3 (the failed calls in a row that
// had surely ended when it opened: others in flight then fail after),
// breaker_open the median time from an opening to the probe after it
// (within 10%), and the notes say so. The fit used to
// write shedredis's defaults (5, 1s) whatever the recording showed.
func TestFitStoreBreaker(t *testing.T) {
	truth := keyConcScenario()
	truth.Classes[0].KeyConcurrency.Shared = true
	truth.Service.Store = &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), 0.5), Timeout: 2 * time.Millisecond,
		BreakerFailures: 3, BreakerOpen: 500 * time.Millisecond, LeaseTTL: 300 * time.Millisecond}
	truth.Service.StoreOutages = []Span{{At: 5 * time.Second, For: 2 * time.Second}, {At: 12 * time.Second, For: 2 * time.Second},
		{At: 20 * time.Second, For: 2 * time.Second}}
	fit := fitBytes(t, recordRun(t, truth, "none"))
	sc := fit.Scenario.Service.Store
	if sc == nil {
		t.Fatalf("no service.store; notes:\n%s", strings.Join(fit.Notes, "\n"))
	}
	if bf := fit.Store.Breaker; sc.BreakerFailures != 3 || bf.FailuresMax < 3 || bf.FromClosed != 3 {
		t.Errorf("breaker_failures %d (at most %d, over %d openings), want 3 over the 3 outages", sc.BreakerFailures, bf.FailuresMax, bf.FromClosed)
	}
	if math.Abs(float64(sc.BreakerOpen)/float64(500*time.Millisecond)-1) > 0.10 {
		t.Errorf("breaker_open %v, want 500ms within 10%%", sc.BreakerOpen)
	}
	notes := strings.Join(fit.Notes, "\n")
	for _, want := range []string{"breaker_failures (", "breaker_open ("} {
		if !strings.Contains(notes, want) || strings.Contains(notes, "breaker_failures and breaker_open are shedredis's defaults") {
			t.Errorf("the notes do not say where %s came from:\n%s", want, notes)
		}
	}
}

// TestBreakerFromEndOrder: shedredis records a call once it has ended,
// so a call in flight when the breaker opened is recorded among the
// calls it skipped: it is left out, and the opening is read from the
// failures before it; a call its caller cancelled counts neither way,
// the rate decisions' breaker is another's, and a sampled recording
// shows no whole run of failures.
func TestBreakerFromEndOrder(t *testing.T) {
	ms := func(n int) time.Time { return Epoch().Add(time.Duration(n) * time.Millisecond) }
	call := func(op record.StoreOp, start int, res record.StoreResult, lat int) record.Record {
		return record.Record{Kind: record.KindStore, Time: ms(start), Op: op, Result: res, Latency: time.Duration(lat) * time.Millisecond, Timed: true}
	}
	var b fitBreakers
	for _, r := range []record.Record{
		call(record.StoreAcquire, 0, record.StoreOK, 1),
		call(record.StoreAcquire, 5, record.StoreTimeout, 5),
		call(record.StoreAllow, 12, record.StoreOK, 1), // the Store's breaker
		call(record.StoreRelease, 15, record.StoreTimeout, 5),
		call(record.StoreAcquire, 18, record.StoreCanceled, 1),
		call(record.StoreAcquire, 25, record.StoreTimeout, 5), // opens it at 30ms
		call(record.StoreAcquire, 31, record.StoreBreakerOpen, 0),
		call(record.StoreRelease, 27, record.StoreTimeout, 5), // in flight when it opened
		call(record.StoreAcquire, 200, record.StoreBreakerOpen, 0),
		call(record.StoreAcquire, 530, record.StoreOK, 1), // the probe
	} {
		b.add(&r)
	}
	bf := b.result()
	if bf.Failures != 3 || bf.FailuresMax != 3 || bf.Open != 500*time.Millisecond || bf.FromClosed != 1 || bf.Probes != 1 {
		t.Errorf("%+v, want 3 failures and 500ms open, from one opening", bf)
	}
	var m StoreModel
	if note := bf.apply(&m, true); m.BreakerFailures != 0 || m.BreakerOpen != 0 || !strings.Contains(note, "a sample") {
		t.Errorf("sampled: %+v, %q; want the defaults, and why", m, note)
	}
	if note := bf.apply(&m, false); m.BreakerFailures != 3 || m.BreakerOpen != 500*time.Millisecond || !strings.Contains(note, "breaker_open (500ms)") {
		t.Errorf("whole: %+v, %q; want 3 and 500ms, and where they came from", m, note)
	}
}
