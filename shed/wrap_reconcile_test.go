package shed_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shedkit/shedkit/shed"
)

// TestReconcileRacingLockedAdmission: an admission decided under the
// limiter's lock (here while a protected class has unmet demand) checks
// the in-flight cost, then adds its own; a Reconcile takes no lock, and
// between the two it may raise the cost up to MaxTotalCost. The add must
// still not carry the cost field of the state word past its top, where it
// wraps: the limiter then tracks less cost than is in flight, refuses to
// reconcile the cost back down, and reports releases as misuse.
func TestReconcileRacingLockedAdmission(t *testing.T) {
	const big = (shed.MaxTotalCost + 1) / 2 // two of them pass MaxTotalCost
	for attempt := 0; attempt < 20; attempt++ {
		l := mustNew(t, shed.Config{Limit: 4, DemandHold: 1 << 62, Classes: []shed.ClassConfig{
			{Name: "hi", Protected: 0.5}, {Name: "lo"},
		}})
		lo := shed.Request{Class: 1}
		var fill []shed.Permit
		for range 4 {
			fill = append(fill, mustAcquire(t, l, t0, lo))
		}
		_, err := l.TryAcquireAt(t0, shed.Request{Class: 0})
		wantReason(t, err, shed.ReasonLimit) // hi's demand: every admission takes the lock
		for _, p := range fill {
			p.ReleaseAt(t0, shed.Ignored)
		}
		a := mustAcquire(t, l, t0, lo)
		var stop atomic.Bool
		var wrapped atomic.Value
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				_ = a.ReconcileAt(t0, shed.MaxTotalCost-1) // refused while b is in flight
				if err := a.ReconcileAt(t0, 1); err != nil {
					wrapped.Store(err)
					return
				}
			}
		})
		for i := 0; i < 5000 && wrapped.Load() == nil; i++ {
			if b, err := l.TryAcquireAt(t0, shed.Request{Class: 1, Cost: big, Tenant: "b"}); err == nil {
				b.ReleaseAt(t0, shed.Ignored)
			}
		}
		stop.Store(true)
		wg.Wait()
		if err := wrapped.Load(); err != nil {
			t.Fatalf("attempt %d: reconciling a permit back to cost 1 failed: %v; snapshot %+v", attempt, err, l.Snapshot())
		}
		a.ReleaseAt(t0, shed.Ignored)
		snap := l.Snapshot()
		if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Classes[1].Misused != 0 {
			t.Fatalf("attempt %d: after release: in flight %d, cost %d, misused %d",
				attempt, snap.InFlight, snap.InFlightCost, snap.Classes[1].Misused)
		}
	}
}

// TestCostsPastMaxTotalCostRefused: what can be in flight at once, a
// reconciled MaxTotalCost and an admission under the lock of up to
// MaxTotalCost, must fit the state word's cost field; so no request may
// reserve, and no permit reconcile to, more than MaxTotalCost, budget or
// not. (The field holds 2^39-1: a permit reconciled to 2^39-2 and an
// admission of 2^38 under the lock wrapped it.)
func TestCostsPastMaxTotalCostRefused(t *testing.T) {
	if 2*int64(shed.MaxTotalCost) >= 1<<39 {
		t.Fatalf("MaxTotalCost %d: twice it does not fit the 39-bit cost field", int64(shed.MaxTotalCost))
	}
	l := mustNew(t, shed.Config{Limit: 2})
	_, err := l.TryAcquireAt(t0, shed.Request{Cost: shed.MaxTotalCost + 1})
	wantReason(t, err, shed.ReasonCostTooLarge)
	p := mustAcquire(t, l, t0, shed.Request{Cost: shed.MaxTotalCost})
	if err := p.ReconcileAt(t0, shed.MaxTotalCost+1); !errors.Is(err, shed.ErrInvalidRequest) {
		t.Errorf("Reconcile past MaxTotalCost: %v, want ErrInvalidRequest", err)
	}
	p.ReleaseAt(t0, shed.Ignored)
}
