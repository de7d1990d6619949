package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// storeCallAt is a record of a store call of op, started at ms
// milliseconds, that ended with res after lat milliseconds.
func storeCallAt(op record.StoreOp, ms int, res record.StoreResult, lat int) record.Record {
	return record.Record{Kind: record.KindStore, Time: Epoch().Add(time.Duration(ms) * time.Millisecond), Op: op, Result: res,
		Latency: time.Duration(lat) * time.Millisecond, Timed: true}
}

// fitStoreSources feeds each source's store records to a Fitter, as
// FitRecording does with the files of a directory, one after the other.
func fitStoreSources(t *testing.T, sources ...[]record.Record) *Fitter {
	t.Helper()
	f, err := NewFitter(FitOptions{Name: "fitted"})
	if err != nil {
		t.Fatal(err)
	}
	for i, recs := range sources {
		f.Source(string(rune('a'+i))+".jsonl", record.Header{})
		for _, r := range recs {
			f.Add(r)
		}
	}
	return f
}

// TestFitStoreBreakerReplicasApart: the files of two replicas read
// together (a directory): the first ends with its breaker open, the
// second starts healthy at the same times and goes on after. A call of the second replica
// is no probe of the first's breaker; it was read as one, 2 ms after
// the opening, and written as breaker_open.
func TestFitStoreBreakerReplicasApart(t *testing.T) {
	var a, b []record.Record
	for i := range 400 {
		if i < 200 {
			a = append(a, storeCallAt(record.StoreAcquire, 10*i, record.StoreOK, 1))
		}
		b = append(b, storeCallAt(record.StoreAcquire, 10*i+3, record.StoreOK, 1))
	}
	for i := range 3 { // the first replica's store goes out at 2s, to the end of its file
		a = append(a, storeCallAt(record.StoreAcquire, 2000+10*i, record.StoreTimeout, 5))
	}
	a = append(a, storeCallAt(record.StoreAcquire, 2040, record.StoreBreakerOpen, 0))
	bf := fitStoreSources(t, a, b).store.breakers.result()
	if bf.Probes != 0 || bf.Open != 0 {
		t.Errorf("%+v: the other replica's calls were read as probes of the first's breaker", bf)
	}
}

// TestFitStoreBreakerNeverProbed: a breaker that opened and skipped
// every call for 30 s, to the end of the file, was open at least that
// long; the fit wrote shedredis's default (1s) and said the recording
// did not show it.
func TestFitStoreBreakerNeverProbed(t *testing.T) {
	var recs []record.Record
	for i := range 200 {
		recs = append(recs, storeCallAt(record.StoreAcquire, 10*i, record.StoreOK, 1))
	}
	for i := range 3 {
		recs = append(recs, storeCallAt(record.StoreAcquire, 2000+10*i, record.StoreTimeout, 5))
	}
	for i := range 300 {
		recs = append(recs, storeCallAt(record.StoreAcquire, 2040+100*i, record.StoreBreakerOpen, 0))
	}
	bf := fitStoreSources(t, recs).store.breakers.result()
	var m StoreModel
	note := bf.apply(&m, false)
	if m.BreakerOpen < 29*time.Second || !strings.Contains(note, "at least") {
		t.Errorf("breaker_open %v (%q), want at least the 29.9s it stayed open, and the note saying it is a bound", m.BreakerOpen, note)
	}
}

// TestFitStoreBreakersInOneFile: two Concurrencies (or replicas) record
// into one file; one's breaker is open while the other's calls are
// answered. A single breaker opens again only after failed calls; these
// calls show two, and tell nothing of either: the fit wrote the gap to
// the other's next answered call as breaker_open.
func TestFitStoreBreakersInOneFile(t *testing.T) {
	var recs []record.Record
	for i := range 100 {
		recs = append(recs, storeCallAt(record.StoreAcquire, 10*i, record.StoreOK, 1))
	}
	for i := range 3 {
		recs = append(recs, storeCallAt(record.StoreAcquire, 1000+10*i, record.StoreTimeout, 5))
	}
	for i := range 100 { // one open (its calls skipped), the other answering
		recs = append(recs, storeCallAt(record.StoreAcquire, 1040+10*i, record.StoreBreakerOpen, 0),
			storeCallAt(record.StoreAcquire, 1043+10*i, record.StoreOK, 1))
	}
	bf := fitStoreSources(t, recs).store.breakers.result()
	var m StoreModel
	note := bf.apply(&m, false)
	if m.BreakerOpen != 0 || m.BreakerFailures != 0 || !strings.Contains(note, "more than one breaker") {
		t.Errorf("%+v wrote %+v (%q), want the defaults: the calls show more than one breaker", bf, m, note)
	}
}

// TestFitStoreRenewalsOfReplicasApart: the renewals of two replicas
// whose files are read together, on grids half a period apart, showed
// one renewer at half the period: lease_ttl came out half the truth.
// Each file's renewals show the period.
func TestFitStoreRenewalsOfReplicasApart(t *testing.T) {
	var a, b []record.Record
	for k := range 40 {
		a = append(a, storeCallAt(record.StoreRenew, 1000*k, record.StoreOK, 2))
		b = append(b, storeCallAt(record.StoreRenew, 1000*k+500, record.StoreOK, 2))
	}
	got := fitStoreSources(t, a, b).store.renewals.result().Period
	if got != time.Second {
		t.Errorf("period %v, want 1s: each replica renews every second", got)
	}
}

// TestFitStoreLeaseTTLUnknownTimeout: when no request's call timed out,
// the requests' budget is unknown, and the renewals' (max(timeout,
// lease_ttl/10)) may be the timeout itself: here a 200ms timeout with a
// 1s lease_ttl. The fit took the budget for lease_ttl/10 against
// shedredis's default timeout, and wrote lease_ttl 2s.
func TestFitStoreLeaseTTLUnknownTimeout(t *testing.T) {
	truth := keyConcScenario()
	truth.Classes[0].KeyConcurrency.Shared = true
	rec, buf := startRecordedRun(t, truth, "none")
	add := func(r record.Record) {
		rec.Add(r)
		if rec.Pending() >= rec.Capacity()/2 {
			rec.Flush()
		}
	}
	for i := range 400 {
		add(storeCallAt(record.StoreAcquire, 20*i, record.StoreOK, 1))
	}
	for k := range 3 {
		add(storeCallAt(record.StoreRenew, 333*(k+1), record.StoreTimeout, 200))
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fit := fitBytes(t, buf.Bytes())
	sc, notes := fit.Scenario.Service.Store, strings.Join(fit.Notes, "\n")
	if sc == nil {
		t.Fatalf("no service.store; notes:\n%s", notes)
	}
	if sc.LeaseTTL == 2*time.Second || strings.Contains(notes, "10 times the renewals' budget") {
		t.Errorf("lease_ttl %v from the renewals' budget, with the requests' unknown:\n%s", sc.LeaseTTL, notes)
	}
}

// TestFitStoreRenewerBehindItsTicks: with a 1s lease_ttl (a tick every
// 333ms) and a 250ms timeout, a slow Redis makes each renewal time out
// at 250ms and its cleanup take 200ms more: the renewer runs back to
// back, every 451ms, behind its ticks. Those gaps are its calls'
// durations, not its period; they were read as the period, and
// lease_ttl came out 1.35s. Renewals that take no time (a coarse
// clock) are on their ticks.
func TestFitStoreRenewerBehindItsTicks(t *testing.T) {
	var behind, instant []record.Record
	for k := range 40 {
		behind = append(behind, storeCallAt(record.StoreRenew, 451*k, record.StoreTimeout, 250),
			storeCallAt(record.StoreCleanup, 451*k+250, record.StoreOK, 200))
		instant = append(instant, storeCallAt(record.StoreRenew, 1000*k, record.StoreOK, 0),
			storeCallAt(record.StoreCleanup, 1000*k, record.StoreOK, 0))
	}
	for _, tc := range []struct {
		name string
		recs []record.Record
		want time.Duration
	}{
		{"behind", behind, 0},
		{"no duration", instant, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fitStoreSources(t, tc.recs).store.renewals.result().Period; got.Round(time.Millisecond) != tc.want {
				t.Errorf("period %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFitStoreBreakerShapes: a breaker that flaps (its first probe fails
// and opens it again) counts one opening from closed and two probes; a
// recording of only skipped calls, or only timeouts, shows neither
// setting.
func TestFitStoreBreakerShapes(t *testing.T) {
	healthy := func() []record.Record {
		var recs []record.Record
		for i := range 100 {
			recs = append(recs, storeCallAt(record.StoreAcquire, 10*i, record.StoreOK, 1))
		}
		return recs
	}
	failing := func(from, n int) []record.Record {
		var recs []record.Record
		for i := range n {
			recs = append(recs, storeCallAt(record.StoreAcquire, from+10*i, record.StoreTimeout, 5))
		}
		return recs
	}
	skipped := func(from, n int) []record.Record {
		var recs []record.Record
		for i := range n {
			recs = append(recs, storeCallAt(record.StoreAcquire, from+100*i, record.StoreBreakerOpen, 0))
		}
		return recs
	}
	flapping := append(healthy(), failing(1000, 3)...)                                     // opens at 1025ms
	flapping = append(flapping, skipped(1030, 5)...)                                       // to 1430ms
	flapping = append(flapping, failing(1525, 1)...)                                       // a failed probe, open again at 1530ms
	flapping = append(flapping, skipped(1540, 5)...)                                       // to 1940ms
	flapping = append(flapping, storeCallAt(record.StoreAcquire, 2030, record.StoreOK, 1)) // the probe that closes it
	for _, tc := range []struct {
		name string
		recs []record.Record
		want BreakerFit
	}{
		{"flapping", flapping, BreakerFit{FromClosed: 1, Probes: 2, Failures: 3, FailuresMax: 3, Open: 500 * time.Millisecond,
			OpenAtLeast: 410 * time.Millisecond}},
		{"only skipped", skipped(0, 50), BreakerFit{}},
		{"only timeouts", failing(0, 50), BreakerFit{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fitStoreSources(t, tc.recs).store.breakers.result(); got != tc.want {
				t.Errorf("%+v, want %+v", got, tc.want)
			}
		})
	}
}
