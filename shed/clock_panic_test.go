package shed_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// panickyClock is a fake Config.Clock that panics while armed.
type panickyClock struct {
	fakeClock
	armed atomic.Bool
}

func newPanickyClock() *panickyClock { return &panickyClock{fakeClock: *newFakeClock()} }

func (c *panickyClock) Now() time.Time {
	if c.armed.Load() {
		panic("clock bug")
	}
	return c.fakeClock.Now()
}

// panics runs f and reports whether it panicked.
func panics(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}

// A Config.Clock that panics while TryAcquire times an admission leaves
// the limiter as if the request never came: the panic reaches the caller,
// who holds no permit, so nothing stays in flight or counted for it.
func TestClockPanicOnAdmissionTakesNothing(t *testing.T) {
	two := []shed.ClassConfig{{Name: "a", Protected: 0.5}, {Name: "b"}}
	for name, tc := range map[string]struct {
		cfg shed.Config
		req shed.Request
	}{
		"plain":             {shed.Config{Limit: 1}, shed.Request{}},
		"tenant":            {shed.Config{Limit: 1}, shed.Request{Tenant: "x"}},
		"classes with cost": {shed.Config{Limit: 2, MaxCost: 10, Classes: two}, shed.Request{Class: 1, Cost: 3}},
		"tracked":           {shed.Config{Limit: 1, TrackLeaks: true}, shed.Request{Tenant: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			clk := newPanickyClock()
			tc.cfg.Clock, tc.cfg.MaxSamplesPerSecond = clk.Now, -1
			l := mustNew(t, tc.cfg)
			clk.armed.Store(true)
			if !panics(func() { _, _ = l.TryAcquire(tc.req) }) {
				t.Fatal("TryAcquire did not pass the clock's panic on")
			}
			clk.armed.Store(false)
			checkSettled(t, l)
			if s := l.Snapshot(); s.Tenants != 0 || s.Classes[tc.req.Class].Admitted != 0 {
				t.Errorf("after the panic: %d tenants, %d admitted; want 0", s.Tenants, s.Classes[tc.req.Class].Admitted)
			}
			p, err := l.TryAcquire(tc.req)
			if err != nil {
				t.Fatalf("the next request is refused: %v", err)
			}
			p.Release(shed.Success)
			checkSettled(t, l)
		})
	}
}

// A Config.Clock that panics while Release times a permit still releases
// it: the caller's permit is cleared, so nothing else would give the
// capacity back. The waiter that capacity could admit is served at the
// next decision that reads a working clock.
func TestClockPanicOnReleaseGivesBack(t *testing.T) {
	for _, tenant := range []string{"", "x"} {
		clk := newPanickyClock()
		l := mustNew(t, shed.Config{Limit: 1, Clock: clk.Now, MaxSamplesPerSecond: -1,
			Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 1, MaxWait: time.Second}}})
		p, err := l.TryAcquire(shed.Request{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		var log waiterLog
		w := shed.NewWaiter(log.notify)
		if _, q, err := l.EnqueueAt(t0, shed.Request{}, w); !q || err != nil {
			t.Fatalf("EnqueueAt: queued %v, %v", q, err)
		}
		clk.armed.Store(true)
		if !panics(func() { p.Release(shed.Success) }) {
			t.Fatal("Release did not pass the clock's panic on")
		}
		clk.armed.Store(false)
		if p.Valid() {
			t.Fatal("the permit is still valid after its release panicked")
		}
		if n := l.InFlight(); n != 0 {
			t.Fatalf("tenant %q: InFlight %d after the release, want 0", tenant, n)
		}
		l.ExpireAt(at(1))
		if got := log.take(); len(got) != 1 {
			t.Fatalf("tenant %q: %d notifications, want the waiter's", tenant, len(got))
		}
		q, err := w.Result()
		if err != nil {
			t.Fatalf("tenant %q: waiter: %v", tenant, err)
		}
		q.ReleaseAt(at(2), shed.Success)
		checkSettled(t, l)
	}
}

// A blocking Acquire whose wait ends (here, its ctx is cancelled) while
// LimitSource.Limit or Config.Clock panics leaves the queue as it returns
// the panic: a waiter left behind would be granted capacity that nobody
// receives.
func TestLimitPanicWhileAcquireGivesUp(t *testing.T) {
	for _, what := range []string{"limit", "clock"} {
		src := &panickySource{}
		src.Set(1)
		clk := newPanickyClock()
		l := mustNew(t, shed.Config{Source: src, Clock: clk.Now,
			Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 1, MaxWait: time.Minute}}})
		hold := mustAcquire(t, l, t0, shed.Request{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan bool, 1)
		go func() { done <- panics(func() { _, _ = l.Acquire(ctx, shed.Request{}) }) }()
		for l.Snapshot().Queued != 1 {
			runtime.Gosched()
		}
		armed := &src.armed
		if what == "clock" {
			armed = &clk.armed
		}
		armed.Store(true)
		cancel()
		if !<-done {
			t.Fatalf("%s: Acquire did not pass the panic on", what)
		}
		armed.Store(false)
		hold.ReleaseAt(at(1), shed.Success)
		checkSettled(t, l) // the waiter counts as cancelled
		p, err := l.TryAcquireAt(at(2), shed.Request{})
		if err != nil {
			t.Fatalf("%s: a limiter of 1 with nothing in flight refuses: %v", what, err)
		}
		p.ReleaseAt(at(3), shed.Success)
	}
}
