package shed_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shedkit/shedkit/shed"
)

// TestConcurrentReconcilesNeverWrap is issue 15: Reconcile checked the
// in-flight cost and added to it in two steps, so two reconciliations at
// once could both pass the check and wrap the 39-bit cost field. Workers
// that each hold a permit meet at a barrier every round and then all try
// to raise their cost to half the largest trackable cost: at most one may
// succeed, whoever does must see its cost in flight, and everyone's cost
// must come back down.
func TestConcurrentReconcilesNeverWrap(t *testing.T) {
	const (
		workers = 4
		rounds  = 20_000
		big     = (shed.MaxTotalCost + 1) / 2
	)
	l := mustNew(t, shed.Config{Limit: workers})
	var (
		wg      sync.WaitGroup
		arrived atomic.Int64
		wins    atomic.Int64
		fails   atomic.Int64
		first   atomic.Value
	)
	fail := func(s string) {
		if fails.Add(1) == 1 {
			first.Store(s)
		}
	}
	for range workers {
		p := mustAcquire(t, l, t0, shed.Request{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.ReleaseAt(t0, shed.Success)
			for r := range int64(rounds) {
				// A spinning barrier, so that the workers reconcile at the
				// same instant; yielding keeps it live on one core.
				arrived.Add(1)
				for arrived.Load() < (r+1)*workers {
					runtime.Gosched()
				}
				if p.ReconcileAt(t0, big) != nil {
					continue // another worker holds the large cost
				}
				wins.Add(1)
				if c := l.Snapshot().InFlightCost; c < big || c > shed.MaxTotalCost {
					fail(fmt.Sprintf("round %d: in-flight cost %d while a permit holds %d", r, c, int64(big)))
				}
				if err := p.ReconcileAt(t0, 1); err != nil {
					fail(fmt.Sprintf("round %d: reconcile down: %v", r, err))
				}
			}
		}()
	}
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d violations, the first: %v", n, first.Load())
	}
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.InFlightCost != 0 {
		t.Fatalf("after the run: in flight %d, cost %d", snap.InFlight, snap.InFlightCost)
	}
	if wins.Load() == 0 {
		t.Fatal("no worker ever held the large cost")
	}
}
