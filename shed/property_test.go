package shed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestPropertyRandomOperations runs 100,000 seeded random operations on
// many goroutines: non-blocking and blocking admission with deadlines,
// cancellation while queued, double release, panics inside the work,
// downward reconciliation, and a drain at the end. The invariants:
//   - the work admitted and not yet released never exceeds the limit or the
//     cost budget (checked by the workers, who count before releasing and
//     after acquiring, so their count is never above the limiter's);
//   - every request that queued ends admitted, rejected or cancelled;
//   - afterwards nothing is in flight or queued, and no goroutine is left.
func TestPropertyRandomOperations(t *testing.T) {
	const (
		workers    = 16
		operations = 100_000
		limit      = 12
		budget     = 120
	)
	seed := uint64(20261202)
	var enqueued, left atomic.Int64
	obs := shed.ObserverFunc(func(e shed.Event) {
		switch {
		case e.Kind == shed.EventQueued:
			enqueued.Add(1)
		case e.Kind == shed.EventAdmitted && e.Queued, e.Kind == shed.EventRejected && e.Queued, e.Kind == shed.EventCancelled:
			left.Add(1)
		}
	})
	l := mustNew(t, shed.Config{
		Limit:   limit,
		MaxCost: budget,
		Classes: []shed.ClassConfig{
			{Name: "critical", Protected: 0.25, QueueDepth: 8, MaxWait: 3 * time.Millisecond},
			{Name: "interactive", Protected: 0.5, QueueDepth: 8, MaxWait: 2 * time.Millisecond, LIFO: true},
			{Name: "batch", QueueDepth: 4, MaxWait: time.Millisecond},
		},
		MaxQueue:   16,
		DemandHold: time.Millisecond,
		Observer:   obs,
	})

	var count, cost atomic.Int64
	var violations sync.Map
	violate := func(format string, args ...any) { violations.Store(fmt.Sprintf(format, args...), true) }
	admitted := func(p *shed.Permit) {
		if n := count.Add(1); n > limit {
			violate("%d in flight over a limit of %d", n, limit)
		}
		if c := cost.Add(p.Cost()); c > budget {
			violate("cost %d in flight over a budget of %d", c, budget)
		}
	}
	release := func(p *shed.Permit, o shed.Outcome) {
		if p.Valid() {
			count.Add(-1)
			cost.Add(-p.Cost())
		}
		p.Release(o)
	}

	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var held []shed.Permit
			for ops.Add(1) <= operations {
				req := shed.Request{Class: shed.Class(rng.IntN(3)), Cost: 1 + rng.Int64N(25)}
				switch op := rng.IntN(10); {
				case op < 3: // non-blocking
					if p, err := l.TryAcquire(req); err == nil {
						admitted(&p)
						held = append(held, p)
					} else if !errors.Is(err, shed.ErrRejected) {
						violate("TryAcquire: %v", err)
					}
				case op < 5: // blocking with a deadline
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
					if p, err := l.Acquire(ctx, req); err == nil {
						admitted(&p)
						held = append(held, p)
					} else if !errors.Is(err, shed.ErrRejected) && !errors.Is(err, context.DeadlineExceeded) {
						violate("Acquire: %v", err)
					}
					cancel()
				case op < 6: // cancelled while (probably) queued
					ctx, cancel := context.WithCancel(context.Background())
					stop := time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, cancel)
					if p, err := l.Acquire(ctx, req); err == nil {
						admitted(&p)
						held = append(held, p)
					} else if !errors.Is(err, shed.ErrRejected) && !errors.Is(err, context.Canceled) {
						violate("Acquire: %v", err)
					}
					stop.Stop()
					cancel()
				case op < 7: // work that panics; the deferred release must run
					if p, err := l.TryAcquire(req); err == nil {
						admitted(&p)
						func() {
							defer func() { _ = recover() }()
							defer release(&p, shed.Dropped)
							panic("work failed")
						}()
						if p.Valid() {
							violate("a permit survived the panic")
						}
					}
				case op < 8 && len(held) > 0: // reconcile down
					p := &held[rng.IntN(len(held))]
					if actual := rng.Int64N(p.Cost() + 1); actual < p.Cost() {
						cost.Add(actual - p.Cost())
						if err := p.Reconcile(actual); err != nil {
							violate("Reconcile: %v", err)
						}
					}
				default: // finish some held work, sometimes releasing twice
					for len(held) > 0 && (len(held) > 3 || rng.IntN(2) == 0) {
						i := rng.IntN(len(held))
						o := shed.Outcome(rng.IntN(3))
						release(&held[i], o)
						if rng.IntN(4) == 0 {
							release(&held[i], o)
						}
						held[i] = held[len(held)-1]
						held = held[:len(held)-1]
					}
					runtime.Gosched()
				}
			}
			for i := range held {
				release(&held[i], shed.Success)
			}
		}(w)
	}

	// Drain while the last operations run.
	for ops.Load() < operations*9/10 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := l.Drain(ctx)
	wg.Wait()
	if err != nil {
		t.Fatalf("Drain: %v (report %+v)", err, rep)
	}

	violations.Range(func(k, _ any) bool {
		t.Error(k)
		return true
	})
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Queued != 0 {
		t.Fatalf("after the run: in flight %d, cost %d, queued %d", snap.InFlight, snap.InFlightCost, snap.Queued)
	}
	var queuedTotal, endedTotal uint64
	for _, c := range snap.Classes {
		if c.InFlight != 0 || c.InFlightCost != 0 {
			t.Errorf("class %s: in flight %d cost %d", c.Name, c.InFlight, c.InFlightCost)
		}
		if c.Admitted != c.Released[0]+c.Released[1]+c.Released[2] {
			t.Errorf("class %s: admitted %d, released %v", c.Name, c.Admitted, c.Released)
		}
		queuedTotal += c.Enqueued
		endedTotal += c.AdmittedAfterWait + c.Cancelled
	}
	if q, e := enqueued.Load(), left.Load(); q != e || uint64(q) != queuedTotal {
		t.Errorf("%d requests queued (snapshot %d), %d left the queue", q, queuedTotal, e)
	}
	if queuedTotal == 0 || snap.Classes[0].AdmittedAfterWait == 0 || snap.Classes[2].Rejected[shed.ReasonLimit]+snap.Classes[2].Rejected[shed.ReasonQueueFull] == 0 {
		t.Errorf("the run did not exercise queueing and rejection: %+v", snap.Classes)
	}
	t.Logf("queued %d, admitted after wait or cancelled %d; per class %+v", queuedTotal, endedTotal, snap.Classes)
}
