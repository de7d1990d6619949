package sim

import (
	"bytes"
	"io"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// storeOpMix counts a recording's store calls by operation, with the
// acquisitions its caller cut short, and its refusals at a tenant's cap.
type storeOpMix struct {
	ops                map[record.StoreOp]int
	canceled, capped   int
	renewLat, otherLat []time.Duration // the ok calls' durations
}

func readStoreOpMix(t *testing.T, data []byte) storeOpMix {
	t.Helper()
	m := storeOpMix{ops: map[record.StoreOp]int{}}
	for rd := record.NewReader(bytes.NewReader(data)); ; {
		r, err := rd.Next()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Kind == record.KindRefused && r.Reason == shed.ReasonKeyConcurrency:
			m.capped++
		case r.Kind != record.KindStore:
		case r.Op == record.StoreAcquire && r.Result == record.StoreCanceled:
			m.canceled++
			m.ops[r.Op]++
		case r.Result == record.StoreOK && r.Op == record.StoreRenew:
			m.renewLat = append(m.renewLat, r.Latency)
			m.ops[r.Op]++
		case r.Result == record.StoreOK:
			m.otherLat = append(m.otherLat, r.Latency)
			m.ops[r.Op]++
		default:
			m.ops[r.Op]++
		}
	}
}

// TestSimRecordsLeaseStoreCalls is the store's round trip with shared
// leases: a simulated service whose api class caps each tenant's leases
// in the store (key_concurrency shared), whose store calls take a known
// round trip (log-normal, median 600 us, sigma 0.8) within a 2 ms budget
// (about 7% time out), recorded and fitted back. The recording holds
// what shedredis.Concurrency writes for the same traffic: an acquire per
// request, a release per lease granted (but the few still held when the
// run ends), a renewal at each LeaseTTL/3 tick while leases are held,
// timed as its two round trips, and a cleanup after a renewal that
// caught a release; the fit gives back the round trip within 10% and
// the budget, and keeps the renewals out of them. The simulator used to
// record the acquisitions alone.
func TestSimRecordsLeaseStoreCalls(t *testing.T) {
	truth := keyConcScenario()
	truth.Classes[0].KeyConcurrency.Shared = true
	const ttl = 300 * time.Millisecond // renewals every 100 ms
	truth.Service.Store = &StoreModel{Latency: LogNorm(float64(600*time.Microsecond), 0.8), Timeout: 2 * time.Millisecond, LeaseTTL: ttl}
	data := recordRun(t, truth, "none")
	m := readStoreOpMix(t, data)
	acquires, releases := m.ops[record.StoreAcquire], m.ops[record.StoreRelease]
	granted := acquires - m.canceled - m.capped
	if acquires < 8000 || releases > granted || releases < granted-100 {
		t.Errorf("%d acquisitions (%d canceled, %d capped), %d releases: want a release per lease granted (%d), but those held at the end",
			acquires, m.canceled, m.capped, releases, granted)
	}
	ticks := int(truth.Duration / (ttl / 3))
	renewals, cleanups := m.ops[record.StoreRenew], m.ops[record.StoreCleanup]
	if renewals < ticks*9/10 || renewals > ticks+1 {
		t.Errorf("%d renewals, want one per LeaseTTL/3 tick while leases are held: about %d", renewals, ticks)
	}
	if cleanups == 0 || cleanups > renewals {
		t.Errorf("%d cleanups, want some after the %d renewals, none without one", cleanups, renewals)
	}
	// A renewal is two round trips: its median is well above a single
	// call's.
	if rm, om := medianDur(m.renewLat), medianDur(m.otherLat); rm < om*3/2 {
		t.Errorf("renewals' median %v, single calls' %v: want a renewal timed as its two round trips", rm, om)
	}
	fit := fitBytes(t, data)
	st := fit.Store
	if math.Abs(st.Median/600e3-1) > 0.10 {
		t.Errorf("fitted median %v, want 600µs within 10%%", fitDur(st.Median))
	}
	sc := fit.Scenario.Service.Store
	if sc == nil || math.Abs(distMedian(sc.Latency)/600e3-1) > 0.10 || sc.Timeout != 2*time.Millisecond || sc.LeaseTTL != ttl {
		t.Fatalf("service.store %+v, want the fitted round trip, the 2ms budget and the lease_ttl (%v)", sc, ttl)
	}
	if st.Releases != releases || st.Renewal.Renewals != renewals || st.Renewal.Cleanups != cleanups {
		t.Errorf("fit counted %d releases, %d renewals, %d cleanups; the recording holds %d, %d, %d",
			st.Releases, st.Renewal.Renewals, st.Renewal.Cleanups, releases, renewals, cleanups)
	}
	if kc := fit.Scenario.Classes[0].KeyConcurrency; kc == nil || !kc.Shared {
		t.Errorf("api's key concurrency %+v, want it shared", kc)
	}
}

func medianDur(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
