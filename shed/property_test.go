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
	r := &randomOps{limit: limit, budget: budget}
	r.l = mustNew(t, shed.Config{
		Limit:   limit,
		MaxCost: budget,
		Classes: []shed.ClassConfig{
			{Name: "critical", Protected: 0.25, QueueDepth: 8, MaxWait: 3 * time.Millisecond},
			{Name: "interactive", Protected: 0.5, QueueDepth: 8, MaxWait: 2 * time.Millisecond, LIFO: true},
			{Name: "batch", QueueDepth: 4, MaxWait: time.Millisecond},
		},
		MaxQueue:   16,
		DemandHold: time.Millisecond,
		Observer:   shed.ObserverFunc(r.observe),
	})

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r.work(rand.New(rand.NewPCG(seed, uint64(w))), operations)
		}(w)
	}

	// Drain while the last operations run.
	for r.ops.Load() < operations*9/10 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := r.l.Drain(ctx)
	wg.Wait()
	if err != nil {
		t.Fatalf("Drain: %v (report %+v)", err, rep)
	}
	r.checkAfterRun(t)
}

// randomOps is the state TestPropertyRandomOperations' workers share: the
// limiter, their own count of the work in flight and what they saw wrong.
type randomOps struct {
	l             *shed.Limiter
	limit, budget int64

	ops            atomic.Int64 // operations started, by all workers
	count, cost    atomic.Int64 // admitted and not yet released, as the workers see it
	violations     sync.Map     // message -> true; workers may not call t.Fatal
	enqueued, left atomic.Int64 // requests that queued, and that left the queue (observed)
}

// observe counts the requests that enter and leave the queue.
func (r *randomOps) observe(e shed.Event) {
	switch {
	case e.Kind == shed.EventQueued:
		r.enqueued.Add(1)
	case e.Kind == shed.EventAdmitted && e.Queued, e.Kind == shed.EventRejected && e.Queued, e.Kind == shed.EventCancelled:
		r.left.Add(1)
	}
}

func (r *randomOps) violate(format string, args ...any) {
	r.violations.Store(fmt.Sprintf(format, args...), true)
}

// admitted counts p in, after it was acquired, and checks the bounds.
func (r *randomOps) admitted(p *shed.Permit) {
	if n := r.count.Add(1); n > r.limit {
		r.violate("%d in flight over a limit of %d", n, r.limit)
	}
	if c := r.cost.Add(p.Cost()); c > r.budget {
		r.violate("cost %d in flight over a budget of %d", c, r.budget)
	}
}

// release counts p out before releasing it (if it is still valid).
func (r *randomOps) release(p *shed.Permit, o shed.Outcome) {
	if p.Valid() {
		r.count.Add(-1)
		r.cost.Add(-p.Cost())
	}
	p.Release(o)
}

// work runs one worker's share of the operations, then releases what it
// still holds.
func (r *randomOps) work(rng *rand.Rand, operations int64) {
	var held []shed.Permit
	for r.ops.Add(1) <= operations {
		req := shed.Request{Class: shed.Class(rng.IntN(3)), Cost: 1 + rng.Int64N(25)}
		switch op := rng.IntN(10); {
		case op < 3: // non-blocking
			if p, err := r.l.TryAcquire(req); err == nil {
				r.admitted(&p)
				held = append(held, p)
			} else if !errors.Is(err, shed.ErrRejected) {
				r.violate("TryAcquire: %v", err)
			}
		case op < 5: // blocking with a deadline
			held = r.acquireWithDeadline(rng, req, held)
		case op < 6: // cancelled while (probably) queued
			held = r.acquireThenCancel(rng, req, held)
		case op < 7: // work that panics; the deferred release must run
			r.panicWhileHolding(req)
		case op < 8 && len(held) > 0: // reconcile down
			r.reconcileDown(rng, held)
		default: // finish some held work, sometimes releasing twice
			held = r.finishSome(rng, held)
			runtime.Gosched()
		}
	}
	for i := range held {
		r.release(&held[i], shed.Success)
	}
}

// acquireWithDeadline acquires req, waiting up to a random deadline.
func (r *randomOps) acquireWithDeadline(rng *rand.Rand, req shed.Request, held []shed.Permit) []shed.Permit {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
	if p, err := r.l.Acquire(ctx, req); err == nil {
		r.admitted(&p)
		held = append(held, p)
	} else if !errors.Is(err, shed.ErrRejected) && !errors.Is(err, context.DeadlineExceeded) {
		r.violate("Acquire: %v", err)
	}
	cancel()
	return held
}

// acquireThenCancel acquires req and cancels the wait after a random delay.
func (r *randomOps) acquireThenCancel(rng *rand.Rand, req shed.Request, held []shed.Permit) []shed.Permit {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, cancel)
	if p, err := r.l.Acquire(ctx, req); err == nil {
		r.admitted(&p)
		held = append(held, p)
	} else if !errors.Is(err, shed.ErrRejected) && !errors.Is(err, context.Canceled) {
		r.violate("Acquire: %v", err)
	}
	stop.Stop()
	cancel()
	return held
}

// panicWhileHolding admits req for work that panics: the deferred release
// must still run.
func (r *randomOps) panicWhileHolding(req shed.Request) {
	if p, err := r.l.TryAcquire(req); err == nil {
		r.admitted(&p)
		func() {
			defer func() { _ = recover() }()
			defer r.release(&p, shed.Dropped)
			panic("work failed")
		}()
		if p.Valid() {
			r.violate("a permit survived the panic")
		}
	}
}

// reconcileDown lowers a random held permit's cost to a random actual cost
// (counted out first, so the workers' count stays at or below the limiter's).
func (r *randomOps) reconcileDown(rng *rand.Rand, held []shed.Permit) {
	p := &held[rng.IntN(len(held))]
	if actual := rng.Int64N(p.Cost() + 1); actual < p.Cost() {
		r.cost.Add(actual - p.Cost())
		if err := p.Reconcile(actual); err != nil {
			r.violate("Reconcile: %v", err)
		}
	}
}

// finishSome releases random held permits, sometimes twice, until at most
// three are left and a coin says stop.
func (r *randomOps) finishSome(rng *rand.Rand, held []shed.Permit) []shed.Permit {
	for len(held) > 0 && (len(held) > 3 || rng.IntN(2) == 0) {
		i := rng.IntN(len(held))
		o := shed.Outcome(rng.IntN(3))
		r.release(&held[i], o)
		if rng.IntN(4) == 0 {
			r.release(&held[i], o)
		}
		held[i] = held[len(held)-1]
		held = held[:len(held)-1]
	}
	return held
}

// checkAfterRun reports the workers' violations and checks that the
// limiter ended empty with consistent counters after exercising queueing
// and rejection.
func (r *randomOps) checkAfterRun(t *testing.T) {
	r.violations.Range(func(k, _ any) bool {
		t.Error(k)
		return true
	})
	snap := r.l.Snapshot()
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
	if q, e := r.enqueued.Load(), r.left.Load(); q != e || uint64(q) != queuedTotal {
		t.Errorf("%d requests queued (snapshot %d), %d left the queue", q, queuedTotal, e)
	}
	if queuedTotal == 0 || snap.Classes[0].AdmittedAfterWait == 0 || snap.Classes[2].Rejected[shed.ReasonLimit]+snap.Classes[2].Rejected[shed.ReasonQueueFull] == 0 {
		t.Errorf("the run did not exercise queueing and rejection: %+v", snap.Classes)
	}
	t.Logf("queued %d, admitted after wait or cancelled %d; per class %+v", queuedTotal, endedTotal, snap.Classes)
}
