package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestHugeCostsCannotWrapStateWord admits two requests whose costs together
// exceed MaxTotalCost, interleaved as two goroutines can be: the second
// admission runs, through a re-entrant clock, between the first one's
// reading of the state word and its change of it. The in-flight cost lives
// in the top bits of the state word, so an add past MaxTotalCost wraps it
// to a small value that passes the budget check. The clock is read there
// only while the class has a tenant shortfall, which the test sets up
// first; without it, the same interleaving needs real concurrency.
func TestHugeCostsCannotWrapStateWord(t *testing.T) {
	const half = (shed.MaxTotalCost + 1) / 2
	clk := newFakeClock()
	var inner func()
	l := mustNew(t, shed.Config{Limit: 2, MaxCost: shed.MaxTotalCost, Clock: func() time.Time {
		if f := inner; f != nil {
			inner = nil
			f()
		}
		return clk.Now()
	}})
	// A shortfall: tenant a, within its share, is refused at the limit.
	pa := mustAcquire(t, l, clk.Now(), shed.Request{Tenant: "a"})
	pb := mustAcquire(t, l, clk.Now(), shed.Request{Tenant: "b"})
	_, err := l.TryAcquireAt(clk.Now(), shed.Request{Tenant: "a"})
	wantReason(t, err, shed.ReasonLimit)
	pa.ReleaseAt(clk.Now(), shed.Ignored)
	pb.ReleaseAt(clk.Now(), shed.Ignored)

	var held []shed.Permit
	inner = func() {
		if p, err := l.TryAcquire(shed.Request{Tenant: "b", Cost: half}); err == nil {
			held = append(held, p)
		}
	}
	if p, err := l.TryAcquire(shed.Request{Tenant: "a", Cost: half}); err == nil {
		held = append(held, p)
	}
	if inner != nil {
		t.Fatal("the clock was not read between the state word's load and add")
	}
	var sum int64
	for _, p := range held {
		sum += p.Cost()
	}
	snap := l.Snapshot()
	if sum > shed.MaxTotalCost || snap.InFlightCost != sum {
		t.Errorf("admitted %d permits costing %d (budget %d); snapshot says cost %d, in flight %d",
			len(held), sum, int64(shed.MaxTotalCost), snap.InFlightCost, snap.InFlight)
	}
	for i := range held {
		held[i].Release(shed.Ignored)
	}
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.InFlightCost != 0 {
		t.Errorf("after release: in flight %d, cost %d", snap.InFlight, snap.InFlightCost)
	}
}
