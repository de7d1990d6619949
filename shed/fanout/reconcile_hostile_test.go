package fanout_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// pathCase is one way a fan-out of tasks that reconciled ends.
type pathCase struct {
	name string
	n    int // inputs
	cfg  fanout.Config[int]
	// end runs after the task reconciled to 3: it returns the task's
	// error, panics, calls Goexit or waits for the fan-out to stop.
	end     func(ctx context.Context, in int, stop func()) error
	wantErr func(error) bool
}

// waitStop ends a task once the fan-out stops (its context ends) and
// reconciles again on the way out, to 4: the item still runs.
func waitStop(ctx context.Context, in int, stop func()) error {
	stop()
	<-ctx.Done()
	if !fanout.Reconcile(ctx, 4) {
		return errors.New("Reconcile after the stop = false while the item runs")
	}
	return ctx.Err()
}

func pathCases() []pathCase {
	boom := errors.New("boom")
	isNil := func(err error) bool { return err == nil }
	return []pathCase{
		{name: "panic", n: 3, cfg: fanout.Config[int]{Bound: 2},
			end: func(context.Context, int, func()) error { panic("task broke") }, wantErr: isNil},
		{name: "goexit", n: 3, cfg: fanout.Config[int]{Bound: 2},
			end: func(context.Context, int, func()) error { runtime.Goexit(); return nil }, wantErr: isNil},
		{name: "fail fast", n: 3, cfg: fanout.Config[int]{Bound: 3, FailFast: true},
			end: func(ctx context.Context, in int, stop func()) error {
				if in == 2 {
					return boom // the last to start: the others wait for the stop
				}
				return waitStop(ctx, in, func() {})
			},
			wantErr: func(err error) bool { return errors.Is(err, boom) }},
		{name: "parent cancelled", n: 3, cfg: fanout.Config[int]{Bound: 3}, end: waitStop,
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }},
		{name: "max items", n: 3, cfg: fanout.Config[int]{Bound: 2, MaxItems: 2},
			end:     func(context.Context, int, func()) error { return nil },
			wantErr: func(err error) bool { return errors.Is(err, fanout.ErrTooManyItems) }},
		{name: "ordered", n: 9, cfg: fanout.Config[int]{Bound: 3, Ordered: true, ReorderBuffer: 1},
			end: func(context.Context, int, func()) error { return nil }, wantErr: isNil},
	}
}

// TestReconcileThenStopReleasesOnce: whatever ends a task that
// reconciled its item (a panic, Goexit, a fail-fast error, the parent's
// cancellation, MaxItems, ordered delivery), its permit is released once,
// with the cost last reconciled, and nothing stays in flight.
func TestReconcileThenStopReleasesOnce(t *testing.T) {
	for _, tc := range pathCases() {
		t.Run(tc.name, func(t *testing.T) {
			o := newReleasedCosts()
			l := costLimiter(t, 1000, o)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var started atomic.Int64
			stop := func() { // the parent is cancelled once every task runs
				if started.Load() == int64(tc.n) {
					cancel()
				}
			}
			cfg := tc.cfg
			cfg.Limiter, cfg.Request = l, costOf(10)
			var err error
			var results []fanout.Result[int]
			runBounded(t, func() {
				err = fanout.Run(ctx, countTo(tc.n), func(ctx context.Context, in int) (int, error) {
					started.Add(1)
					if !fanout.Reconcile(ctx, 3) {
						return in, errors.New("Reconcile = false")
					}
					return in, tc.end(ctx, in, stop)
				}, cfg, func(r fanout.Result[int]) error { results = append(results, r); return nil })
			})
			if !tc.wantErr(err) {
				t.Errorf("Run = %v", err)
			}
			for _, r := range results {
				if r.Err != nil && !isPanicOrGoexit(r.Err) {
					t.Errorf("item %d: %v", r.Index, r.Err)
				}
			}
			costs := o.get()
			if int64(len(costs)) != started.Load() {
				t.Errorf("%d releases for %d tasks", len(costs), started.Load())
			}
			for _, c := range costs {
				if c != 3 && c != 4 {
					t.Errorf("released with costs %v, want the last reconciled (3, or 4 after a stop)", costs)
					break
				}
			}
			if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 || s.Classes[0].Misused != 0 {
				t.Errorf("after Run: in flight %d, cost %d, misused %d", s.InFlight, s.InFlightCost, s.Classes[0].Misused)
			}
		})
	}
}

func countTo(n int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for i := range n {
			if !yield(i) {
				return
			}
		}
	}
}

func isPanicOrGoexit(err error) bool {
	var pe *fanout.PanicError
	return errors.As(err, &pe)
}

// TestReconcileThroughDerivedContexts: a context derived from the task's,
// cancellable or not, leads Reconcile to the item while it runs, and to
// nothing once it ended, even one that outlives the fan-out's
// cancellation (WithoutCancel).
func TestReconcileThroughDerivedContexts(t *testing.T) {
	type key struct{}
	derive := map[string]func(context.Context) (context.Context, context.CancelFunc){
		"WithValue": func(c context.Context) (context.Context, context.CancelFunc) {
			return context.WithValue(c, key{}, 1), func() {}
		},
		"WithCancel": context.WithCancel,
		"WithTimeout": func(c context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(c, time.Hour)
		},
		"WithoutCancel": func(c context.Context) (context.Context, context.CancelFunc) {
			return context.WithoutCancel(c), func() {}
		},
		"WithCancelCause": func(c context.Context) (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancelCause(c)
			return c, func() { cancel(nil) }
		},
	}
	for name, d := range derive {
		t.Run(name, func(t *testing.T) {
			o := newReleasedCosts()
			l := costLimiter(t, 100, o)
			var kept context.Context
			var during bool
			err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
				ctx, cancel := d(ctx)
				defer cancel()
				kept, during = ctx, fanout.Reconcile(ctx, 6)
				return in, nil
			}, fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(10)}, nil)
			if err != nil || !during {
				t.Fatalf("Run = %v, Reconcile while running = %v; want nil, true", err, during)
			}
			if fanout.Reconcile(kept, 1) {
				t.Error("Reconcile after Run = true")
			}
			if got := o.get(); len(got) != 1 || got[0] != 6 {
				t.Errorf("released with costs %v, want [6]", got)
			}
		})
	}
}

// TestReconcileNestedRun: the tasks of a Run nested in a task reconcile
// their own items, or nothing, never the outer item, whatever the nested
// Run's configuration; the outer task still reconciles its own afterwards.
func TestReconcileNestedRun(t *testing.T) {
	outerObs, innerObs := newReleasedCosts(), newReleasedCosts()
	outer, other := costLimiter(t, 1000, outerObs), costLimiter(t, 1000, innerObs)
	nested := map[string]struct {
		cfg  fanout.Config[int]
		want bool // whether the nested task reconciles an item of its own
	}{
		"no limiter":               {fanout.Config[int]{Bound: 2}, false},
		"same limiter, no Request": {fanout.Config[int]{Bound: 2, Limiter: outer}, false},
		"same limiter, Request":    {fanout.Config[int]{Bound: 2, Limiter: outer, Request: costOf(5)}, true},
		"other limiter, Request":   {fanout.Config[int]{Bound: 2, Limiter: other, Request: costOf(5)}, true},
	}
	for name, tc := range nested {
		t.Run(name, func(t *testing.T) {
			var inner []bool
			var mu sync.Mutex
			var outerCost int64
			var outerOK bool
			err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
				err := fanout.RunSlice(context.WithoutCancel(ctx), []int{0, 1}, func(ctx context.Context, in int) (int, error) {
					ok := fanout.Reconcile(ctx, 2)
					mu.Lock()
					inner = append(inner, ok)
					mu.Unlock()
					return in, nil
				}, tc.cfg, nil)
				outerCost = outer.Snapshot().InFlightCost // only the outer item's 10 is left
				outerOK = fanout.Reconcile(ctx, 7)
				return in, err
			}, fanout.Config[int]{Bound: 1, Limiter: outer, Request: costOf(10)}, nil)
			if err != nil || !outerOK || outerCost != 10 {
				t.Fatalf("Run = %v, outer Reconcile = %v, outer cost after the nested Run %d; want nil, true, 10", err, outerOK, outerCost)
			}
			for _, ok := range inner {
				if ok != tc.want {
					t.Errorf("nested Reconcile results %v, want all %v", inner, tc.want)
					break
				}
			}
			for _, l := range []*shed.Limiter{outer, other} {
				if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 {
					t.Errorf("after Run: in flight %d, cost %d", s.InFlight, s.InFlightCost)
				}
			}
		})
	}
	if got := outerObs.get(); got[len(got)-1] != 7 {
		t.Errorf("outer item released with cost %d, want 7", got[len(got)-1])
	}
}

// onceFault panics the first time it is armed and called.
type onceFault struct{ armed atomic.Bool }

func (f *onceFault) hit() {
	if f.armed.CompareAndSwap(true, false) {
		panic("user code broke inside Reconcile")
	}
}

// TestReconcileUserCodePanics: lowering an item's cost hands the freed
// budget to waiters, which runs user code: the Clock, the LimitSource, the
// Observer of the waiter admitted. When it panics, the panic reaches the
// caller of Reconcile with the cost reconciled, the item stays
// reconcilable (its lock is free), the waiter is served, and every permit
// is released once.
func TestReconcileUserCodePanics(t *testing.T) {
	for _, where := range []string{"clock", "source", "observer"} {
		t.Run(where, func(t *testing.T) {
			f := &onceFault{}
			o := newReleasedCosts()
			cfg := shed.Config{MaxCost: 10, Classes: []shed.ClassConfig{{Name: "llm", QueueDepth: 4, MaxWait: time.Hour}},
				Observer: shed.ObserverFunc(func(e shed.Event) {
					if where == "observer" && e.Kind == shed.EventAdmitted && e.Queued {
						f.hit()
					}
					o.Observe(e)
				})}
			switch where {
			case "clock":
				cfg.Clock = func() time.Time { f.hit(); return time.Now() }
			case "source":
				cfg.Source = faultySource{f}
			}
			if cfg.Source == nil {
				cfg.Limit = 8
			}
			l, err := shed.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			reconcileWhilePanicking(t, l, f, o)
		})
	}
}

type faultySource struct{ f *onceFault }

func (s faultySource) Limit() int          { s.f.hit(); return 8 }
func (s faultySource) Observe(shed.Sample) {}

// reconcileWhilePanicking: item 0 reserves 8 of 10, item 1's 8 waits;
// item 0 lowers its cost to 2 with the fault armed.
func reconcileWhilePanicking(t *testing.T, l *shed.Limiter, f *onceFault, o *releasedCosts) {
	t.Helper()
	running, started := make(chan struct{}), make(chan struct{})
	items := func(yield func(int) bool) {
		if yield(0) {
			<-running
			yield(1)
		}
	}
	var panicked any
	var cost int64
	var again bool
	var err error
	runBounded(t, func() {
		err = fanout.Run(t.Context(), items, func(ctx context.Context, in int) (int, error) {
			if in == 1 {
				close(started)
				return in, nil
			}
			close(running)
			<-o.queued
			panicked = func() (v any) {
				defer func() { v = recover() }()
				f.armed.Store(true)
				fanout.Reconcile(ctx, 2)
				return nil
			}()
			cost = l.Snapshot().InFlightCost
			again = fanout.Reconcile(ctx, 1) // the lock is free; serves item 1 if the panic kept it waiting
			<-started
			return in, nil
		}, fanout.Config[int]{Bound: 2, Limiter: l, Request: costOf(8)}, nil)
	})
	if err != nil || panicked == nil || !again {
		t.Fatalf("Run = %v, Reconcile panicked with %v, Reconcile again = %v; want nil, a panic, true", err, panicked, again)
	}
	if cost != 2 && cost != 10 { // 10: item 1 was admitted before the panic
		t.Errorf("in-flight cost after the panicking Reconcile = %d, want 2 or 10", cost)
	}
	if got := o.get(); len(got) != 2 || got[0]+got[1] != 9 {
		t.Errorf("released with costs %v, want item 0's 1 and item 1's 8", got)
	}
	if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 || s.Queued != 0 {
		t.Errorf("after Run: in flight %d, cost %d, queued %d", s.InFlight, s.InFlightCost, s.Queued)
	}
}

// TestReconcileExtremeCosts: Reconcile takes any cost in [0, MaxTotalCost]
// that keeps the limiter's in-flight cost in range, beyond the limiter's
// MaxCost budget too (admitted work is never refused), and refuses the
// rest, changing nothing.
func TestReconcileExtremeCosts(t *testing.T) {
	o := newReleasedCosts()
	l := costLimiter(t, 100, o)
	steps := []struct {
		actual int64
		want   bool
		cost   int64 // in-flight cost after the call
	}{
		{10, true, 10}, // the same as reserved
		{1000, true, 1000},
		{shed.MaxTotalCost, true, shed.MaxTotalCost},
		{shed.MaxTotalCost + 1, false, shed.MaxTotalCost},
		{math.MaxInt64, false, shed.MaxTotalCost},
		{-1, false, shed.MaxTotalCost},
		{math.MinInt64, false, shed.MaxTotalCost},
		{0, true, 0},
		{0, true, 0},
	}
	err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
		for _, s := range steps {
			if got := fanout.Reconcile(ctx, s.actual); got != s.want || l.Snapshot().InFlightCost != s.cost {
				t.Errorf("Reconcile(%d) = %v, in-flight cost %d; want %v, %d", s.actual, got, l.Snapshot().InFlightCost, s.want, s.cost)
			}
		}
		return in, nil
	}, fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(10)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.get(); len(got) != 1 || got[0] != 0 {
		t.Errorf("released with costs %v, want [0]", got)
	}
}

// TestKeptItemContextRetainsLittle: a goroutine that keeps a task's
// context for ever keeps neither the fan-out's task, callback and inputs
// nor its permits; what it keeps is the batch of item contexts its own
// came in and the item state of the workers those reached: at Bound 128,
// the most, about 10 KB (logged; the heap is too noisy to assert on).
func TestKeptItemContextRetainsLittle(t *testing.T) {
	l := costLimiter(t, 0, newReleasedCosts())
	type big struct{ _ [1 << 16]byte }
	taskData, eachData := &big{}, &big{}
	wTask, wEach, wLimiter := weak.Make(taskData), weak.Make(eachData), weak.Make(l)
	src := newSource(300)
	var kept context.Context
	err := fanout.Run(t.Context(), src.seq(), func(ctx context.Context, in *item) (int, error) {
		if in.id == 0 {
			kept = ctx
		}
		_ = taskData
		return in.id, nil
	}, fanout.Config[*item]{Bound: 128, Limiter: l, Request: func(*item) shed.Request { return shed.Request{Cost: 2} }},
		func(fanout.Result[int]) error { _ = eachData; return nil })
	if err != nil {
		t.Fatal(err)
	}
	taskData, eachData, l = nil, nil, nil
	runtime.GC()
	if wTask.Value() != nil || wEach.Value() != nil || wLimiter.Value() != nil || src.live() != 0 {
		t.Errorf("a kept task context retains the fan-out: task %v, callback %v, limiter %v, %d inputs",
			wTask.Value() != nil, wEach.Value() != nil, wLimiter.Value() != nil, src.live())
	}
	if fanout.Reconcile(kept, 1) {
		t.Error("Reconcile through the kept context = true")
	}
	withKept := heapInUse()
	runtime.KeepAlive(kept)
	kept = nil
	t.Logf("the kept context kept %d bytes reachable", withKept-heapInUse())
	runtime.KeepAlive(src) // its weak pointers are not the context's
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestReconcileRandomized: items of random fan-outs reconcile from the
// task and from goroutines that race the item's end and outlive the Run,
// then end in random ways, on limiters that keep permits in each of their
// forms (guarded, tracked, a tenant's, dry-run, several classes). Every
// permit is released once and nothing stays in flight or held by a tenant.
func TestReconcileRandomized(t *testing.T) {
	limiters := map[string]shed.Config{
		"plain":     {Limit: 6, MaxCost: 60},
		"tracked":   {Limit: 6, MaxCost: 60, TrackLeaks: true},
		"dry run":   {Limit: 2, MaxCost: 10, DryRun: true},
		"untimed":   {Limit: 6, MaxCost: 60, MaxSamplesPerSecond: -1},
		"two class": {Limit: 6, MaxCost: 60, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 8, MaxWait: time.Hour}, {Name: "b", QueueDepth: 8, MaxWait: time.Hour}}},
		"panicking observer": {Limit: 3, MaxCost: 20, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 8, MaxWait: time.Hour}},
			Observer: shed.ObserverFunc(func(e shed.Event) {
				if e.Kind != shed.EventQueued && rand.IntN(4) == 0 {
					panic("observer broke")
				}
			})},
	}
	for name, cfg := range limiters {
		t.Run(name, func(t *testing.T) {
			l, err := shed.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for seed := range uint64(40) {
				randomReconcileRun(t, l, seed, len(cfg.Classes))
			}
			s := l.Snapshot()
			if s.InFlight != 0 || s.InFlightCost != 0 || s.Tenants != 0 {
				t.Errorf("after the runs: in flight %d, cost %d, tenants %d", s.InFlight, s.InFlightCost, s.Tenants)
			}
			for _, c := range s.Classes {
				if c.Misused != 0 || c.Leaked != 0 || c.InFlight != 0 || c.InFlightCost != 0 || c.Tenants != 0 {
					t.Errorf("class %s: misused %d, leaked %d, in flight %d, cost %d, tenants %d",
						c.Name, c.Misused, c.Leaked, c.InFlight, c.InFlightCost, c.Tenants)
				}
			}
		})
	}
}

func randomReconcileRun(t *testing.T, l *shed.Limiter, seed uint64, classes int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	n := 1 + rng.IntN(40)
	cfg := fanout.Config[int]{Bound: 1 + rng.IntN(4), Limiter: l, FailFast: rng.IntN(4) == 0,
		Request: func(in int) shed.Request {
			return shed.Request{Cost: int64(1 + in%9), Class: shed.Class(in % max(classes, 1)), Tenant: []string{"", "t1", "t2"}[in%3]}
		}}
	if rng.IntN(3) == 0 {
		cfg.Ordered, cfg.ReorderBuffer = true, 1+rng.IntN(3)
	}
	ends := make([]int, n)
	for i := range ends {
		ends[i] = rng.IntN(5)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var late sync.WaitGroup
	defer late.Wait()
	runBounded(t, func() {
		_ = fanout.Run(ctx, countTo(n), func(ctx context.Context, in int) (int, error) {
			for g := range 3 { // race the item's end, and outlive the Run
				late.Go(func() {
					defer func() { _ = recover() }() // the Observer's
					fanout.Reconcile(ctx, int64(g+in%5))
				})
			}
			fanout.Reconcile(ctx, int64(in%7)) // a panic of the Observer is the item's
			switch ends[in] {
			case 1:
				return in, errors.New("item failed")
			case 2:
				panic("item broke")
			case 3:
				runtime.Goexit()
			case 4:
				if in == n/2 {
					cancel()
				}
			}
			return in, nil
		}, cfg, nil)
	})
}

// TestReconcileBesidePermitWaitExpiry: an item whose cost, reconciled but
// still too large, keeps another waiting past PermitWait: that item fails
// with queue_timeout, leaves the queue, and holds nothing; the first is
// released with its last cost.
func TestReconcileBesidePermitWaitExpiry(t *testing.T) {
	gaveUp := make(chan struct{})
	var mu sync.Mutex
	var costs []int64
	l, err := shed.New(shed.Config{Limit: 8, MaxCost: 10,
		Classes: []shed.ClassConfig{{Name: "llm", QueueDepth: 4, MaxWait: time.Hour}},
		Observer: shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.EventReleased {
				mu.Lock()
				costs = append(costs, e.Cost)
				mu.Unlock()
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	items := func(yield func(int) bool) {
		if yield(0) {
			<-running
			yield(1)
		}
	}
	var results []fanout.Result[int]
	runBounded(t, func() {
		err = fanout.Run(t.Context(), items, func(ctx context.Context, in int) (int, error) {
			close(running)
			if !fanout.Reconcile(ctx, 9) { // 9 + 8 > 10: item 1 still waits
				return in, errors.New("Reconcile(9) = false")
			}
			<-gaveUp // item 1 gave up after PermitWait
			if !fanout.Reconcile(ctx, 2) {
				return in, errors.New("Reconcile(2) = false")
			}
			return in, nil
		}, fanout.Config[int]{Bound: 2, Limiter: l, Request: costOf(8), PermitWait: time.Millisecond},
			func(r fanout.Result[int]) error {
				if results = append(results, r); r.Index == 1 {
					close(gaveUp)
				}
				return nil
			})
	})
	if err != nil || len(results) != 2 {
		t.Fatalf("Run = %v, results %v", err, results)
	}
	for _, r := range results {
		if r.Index == 0 && r.Err != nil || r.Index == 1 && shed.ReasonOf(r.Err) != shed.ReasonQueueTimeout {
			t.Errorf("item %d: %v", r.Index, r.Err)
		}
	}
	if s := l.Snapshot(); s.InFlight != 0 || s.InFlightCost != 0 || s.Queued != 0 || len(costs) != 1 || costs[0] != 2 {
		t.Errorf("after Run: in flight %d, cost %d, queued %d, released with costs %v (want [2])", s.InFlight, s.InFlightCost, s.Queued, costs)
	}
}

// TestReconcileConcurrentCallsOfOneItem: many goroutines of one item
// reconcile it at once; each call succeeds, the in-flight cost is one of
// theirs, and the permit is released with exactly that cost.
func TestReconcileConcurrentCallsOfOneItem(t *testing.T) {
	o := newReleasedCosts()
	l := costLimiter(t, 1000, o)
	var during int64
	var failed atomic.Int64
	err := fanout.RunSlice(t.Context(), []int{0}, func(ctx context.Context, in int) (int, error) {
		var wg sync.WaitGroup
		for g := range int64(32) {
			wg.Go(func() {
				for range 50 {
					if !fanout.Reconcile(ctx, 1+g) {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		during = l.Snapshot().InFlightCost
		return in, nil
	}, fanout.Config[int]{Bound: 1, Limiter: l, Request: costOf(100)}, nil)
	if err != nil || failed.Load() != 0 || during < 1 || during > 32 {
		t.Fatalf("Run = %v, %d calls failed, in-flight cost %d; want nil, 0, one of 1..32", err, failed.Load(), during)
	}
	if got := o.get(); len(got) != 1 || got[0] != during {
		t.Errorf("released with costs %v, want [%d]", got, during)
	}
}

// TestReconcileBesideRequestsOwnPermit: of two tasks running at once
// under the request's own limiter, the one on the request's permit cannot
// reconcile it, the one on a permit of its own can; the request's permit
// keeps its cost, and only it stays in flight after Run.
func TestReconcileBesideRequestsOwnPermit(t *testing.T) {
	l := costLimiter(t, 0, newReleasedCosts())
	own, err := l.TryAcquire(shed.Request{Cost: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release(shed.Ignored)
	var both sync.WaitGroup
	both.Add(2)
	var reconciled atomic.Int64
	err = fanout.RunSlice(shed.ContextWithPermit(t.Context(), &own), []int{0, 1}, func(ctx context.Context, in int) (int, error) {
		both.Done()
		both.Wait() // both run: one of them on the request's permit
		if fanout.Reconcile(ctx, 40) {
			reconciled.Add(1)
		}
		return in, nil
	}, fanout.Config[int]{Bound: 2, Limiter: l, Request: costOf(7)}, nil)
	if err != nil || reconciled.Load() != 1 || own.Cost() != 5 {
		t.Errorf("Run = %v, %d tasks reconciled, the request's permit costs %d; want nil, 1, 5", err, reconciled.Load(), own.Cost())
	}
	if s := l.Snapshot(); s.InFlight != 1 || s.InFlightCost != 5 {
		t.Errorf("after Run: in flight %d, cost %d; want the request's 1, 5", s.InFlight, s.InFlightCost)
	}
}
