package fanout_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// releasedCosts is an Observer that records the cost each permit was
// released with.
type releasedCosts struct {
	mu     sync.Mutex
	costs  []int64
	queued chan struct{} // signalled when a request waits in the queue
}

func newReleasedCosts() *releasedCosts { return &releasedCosts{queued: make(chan struct{}, 16)} }

func (o *releasedCosts) Observe(e shed.Event) {
	switch e.Kind {
	case shed.EventReleased:
		o.mu.Lock()
		o.costs = append(o.costs, e.Cost)
		o.mu.Unlock()
	case shed.EventQueued:
		o.queued <- struct{}{}
	}
}

func (o *releasedCosts) get() []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.costs...)
}

// costLimiter is a limiter with a cost budget and a queue, observed by o.
func costLimiter(t *testing.T, maxCost int64, o *releasedCosts) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: 8, MaxCost: maxCost, Observer: o,
		Classes: []shed.ClassConfig{{Name: "llm", QueueDepth: 4, MaxWait: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func costOf(cost int64) func(int) shed.Request {
	return func(int) shed.Request { return shed.Request{Cost: cost} }
}

// TestReconcileAdmitsWaiter: item 0 reserves 8 of a budget of 10, so item
// 1's 8 waits in the queue; once item 0 reconciles to the 2 it used, item
// 1 is admitted while item 0 still runs (item 0 waits for it to start).
func TestReconcileAdmitsWaiter(t *testing.T) {
	o := newReleasedCosts()
	l := costLimiter(t, 10, o)
	running, started := make(chan struct{}), make(chan struct{})
	items := func(yield func(int) bool) {
		if yield(0) {
			<-running // item 1 comes once item 0 holds its permit
			yield(1)
		}
	}
	var ok bool
	var err error
	runBounded(t, func() {
		err = fanout.Run(t.Context(), items, func(ctx context.Context, in int) (int, error) {
			if in == 1 {
				close(started)
				return in, nil
			}
			close(running)
			<-o.queued // item 1 waits for the budget item 0 holds
			ok = fanout.Reconcile(ctx, 2)
			<-started
			return in, nil
		}, fanout.Config[int]{Bound: 2, Limiter: l, Request: costOf(8)}, nil)
	})
	if err != nil || !ok {
		t.Fatalf("Run = %v, Reconcile = %v; want nil, true", err, ok)
	}
	if got := o.get(); len(got) != 2 || got[0]+got[1] != 10 {
		t.Errorf("released with costs %v, want item 0's 2 and item 1's 8", got)
	}
	if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 {
		t.Errorf("after Run: in flight %d, cost %d; want 0, 0", s.InFlight, s.InFlightCost)
	}
}

// TestReconcileTwice: each Reconcile replaces the item's cost; the permit
// is released with the last one. A cost the limiter refuses (negative,
// beyond its range) reports false and changes nothing.
func TestReconcileTwice(t *testing.T) {
	o := newReleasedCosts()
	l := costLimiter(t, 100, o)
	var results []bool
	var during []int64
	err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
		ctx, cancel := context.WithCancel(ctx) // a context derived from the task's leads there too
		defer cancel()
		for _, actual := range []int64{50, 3, -1, shed.MaxTotalCost + 1} {
			results = append(results, fanout.Reconcile(ctx, actual))
			during = append(during, l.Snapshot().InFlightCost)
		}
		return in, nil
	}, fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(10)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, false, false}
	for i := range want {
		if results[i] != want[i] || during[i] != []int64{50, 3, 3, 3}[i] {
			t.Fatalf("Reconcile results %v, in-flight costs %v; want %v, [50 3 3 3]", results, during, want)
		}
	}
	if got := o.get(); len(got) != 1 || got[0] != 3 {
		t.Errorf("released with costs %v, want [3]", got)
	}
}

// TestReconcileAfterItemEnded: a goroutine that outlives its task holds
// the task's context; reconciling through it once the item finished
// reports false and touches no permit: neither the next item's, which
// runs on the same worker, nor any after Run returned.
func TestReconcileAfterItemEnded(t *testing.T) {
	o := newReleasedCosts()
	l := costLimiter(t, 100, o)
	ask := make(chan struct{})
	late := make(chan bool)
	var during int64
	err := fanout.RunSlice(t.Context(), []int{0, 1}, func(ctx context.Context, in int) (int, error) {
		if in == 0 {
			go func() {
				for range ask {
					late <- fanout.Reconcile(ctx, 9)
				}
			}()
			return in, nil
		}
		ask <- struct{}{} // item 0 has finished: Bound 1
		if <-late {
			t.Error("Reconcile from item 0's context during item 1 = true")
		}
		during = l.Snapshot().InFlightCost
		return in, nil
	}, fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ask <- struct{}{}
	if <-late {
		t.Error("Reconcile from item 0's context after Run = true")
	}
	close(ask)
	if got := o.get(); during != 4 || len(got) != 2 || got[0] != 4 || got[1] != 4 {
		t.Errorf("item 1's cost %d while running, released costs %v; want 4 and [4 4]", during, got)
	}
	if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 || s.Classes[0].Misused != 0 {
		t.Errorf("after Run: %+v", s)
	}
}

// TestReconcileWithoutItsOwnPermit: Reconcile reports false where the
// task has no permit of its own to reconcile, and works with the default
// cost of a Request that sets none.
func TestReconcileWithoutItsOwnPermit(t *testing.T) {
	reconcile := func(t *testing.T, ctx context.Context, cfg fanout.Config[int], actual int64) (ok bool) {
		t.Helper()
		err := fanout.RunSlice(ctx, []int{0}, func(ctx context.Context, in int) (int, error) {
			ok = fanout.Reconcile(ctx, actual)
			return in, nil
		}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	t.Run("no limiter", func(t *testing.T) {
		if reconcile(t, t.Context(), fanout.Config[int]{Bound: 1}, 3) {
			t.Error("Reconcile = true without a Limiter")
		}
	})
	t.Run("no Request", func(t *testing.T) {
		// Every item costs 1 and no item context is made: nothing to
		// reconcile.
		l := costLimiter(t, 0, newReleasedCosts())
		if reconcile(t, t.Context(), fanout.Config[int]{Bound: 1, Limiter: l}, 0) {
			t.Error("Reconcile = true without a Request")
		}
	})
	t.Run("zero cost", func(t *testing.T) {
		l := costLimiter(t, 0, newReleasedCosts())
		if !reconcile(t, t.Context(), fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(0)}, 0) {
			t.Error("Reconcile(0) of a permit of cost 1 = false")
		}
	})
	t.Run("request's own permit", func(t *testing.T) {
		l := costLimiter(t, 0, newReleasedCosts())
		own, err := l.TryAcquire(shed.Request{Cost: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer own.Release(shed.Ignored)
		if reconcile(t, shed.ContextWithPermit(t.Context(), &own), fanout.Config[int]{Bound: 1, Limiter: l}, 1) || own.Cost() != 5 {
			t.Errorf("Reconcile on the request's own permit = true or changed its cost to %d", own.Cost())
		}
	})
	t.Run("nested run without limiter", func(t *testing.T) {
		l := costLimiter(t, 0, newReleasedCosts())
		var inner bool
		err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
			inner = reconcile(t, ctx, fanout.Config[int]{Bound: 1}, 7)
			return in, nil
		}, fanout.Config[int]{Bound: 1, Limiter: l}, nil)
		if err != nil || inner {
			t.Errorf("Run = %v; a nested task without a permit reconciled the outer item's: %v", err, inner)
		}
	})
	t.Run("not a task's context", func(t *testing.T) {
		var none context.Context // a misuse Reconcile must survive
		if fanout.Reconcile(context.Background(), 1) || fanout.Reconcile(none, 1) {
			t.Error("Reconcile outside a task = true")
		}
	})
}

// TestReconcileRacesRelease: goroutines reconcile their items while the
// items end and their workers go on to the next ones; every permit is
// released once, and nothing of the cost stays in flight (run with -race).
func TestReconcileRacesRelease(t *testing.T) {
	l := costLimiter(t, 1000, newReleasedCosts())
	var wg sync.WaitGroup
	items := make([]int, 200)
	err := fanout.RunSlice(t.Context(), items, func(ctx context.Context, in int) (int, error) {
		wg.Go(func() {
			for n := int64(1); fanout.Reconcile(ctx, n%7); n++ {
			}
		})
		return in, nil
	}, fanout.Config[int]{Bound: 3, Limiter: l, Request: costOf(5)}, nil)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	s := l.Snapshot()
	if s.InFlight != 0 || s.InFlightCost != 0 || s.Classes[0].Misused != 0 || s.Classes[0].Released[shed.Success] != 200 {
		t.Errorf("after Run: %+v", s)
	}
}
