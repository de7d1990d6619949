package shed_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// These tests check the contract documented on Observer: a panicking
// Observer propagates its panic to the caller but leaves the limiter
// consistent: no slot held by nobody, no waiter left without its outcome,
// no mutex left locked, every queued request counted as ended once.

// panicky is an Observer that panics on the events of one kind while armed.
type panicky struct {
	kind  shed.EventKind
	armed atomic.Bool
	hits  atomic.Int32
}

func (o *panicky) Observe(e shed.Event) {
	if e.Kind == o.kind && o.armed.Load() {
		o.hits.Add(1)
		panic("observer bug")
	}
}

// mustPanic runs f, which must panic with the observer's value.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if r := recover(); r != "observer bug" {
			t.Fatalf("%s: recovered %v, want the observer's panic", what, r)
		}
	}()
	f()
}

// checkSettled checks that nothing is in flight or queued and that every
// request that queued ended exactly once in the counters.
func checkSettled(t *testing.T, l *shed.Limiter) {
	t.Helper()
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Queued != 0 {
		t.Fatalf("in flight %d (cost %d), queued %d; want all 0", snap.InFlight, snap.InFlightCost, snap.Queued)
	}
	if g := shed.GuardsHeld(l); g != 0 {
		t.Fatalf("%d guard slots held with nothing in flight", g)
	}
	for _, c := range snap.Classes {
		ended := c.AdmittedAfterWait + c.Cancelled + c.Rejected[shed.ReasonQueueTimeout] + c.Rejected[shed.ReasonDraining]
		if c.Enqueued != ended {
			t.Errorf("class %s: %d enqueued, %d ended (%+v)", c.Name, c.Enqueued, ended, c)
		}
		if c.InFlight != 0 {
			t.Errorf("class %s: %d in flight", c.Name, c.InFlight)
		}
	}
}

// TestObserverPanicOnAdmission: when reporting an admission panics, the
// caller never receives the permit, so the admission is undone.
func TestObserverPanicOnAdmission(t *testing.T) {
	two := []shed.ClassConfig{{Name: "hi", Protected: 0.5}, {Name: "lo"}}
	cases := []admissionPanicCase{
		{name: "lock-free path", cfg: shed.Config{Limit: 2}, kind: shed.EventAdmitted},
		{name: "lock-free path, wall clock", cfg: shed.Config{Limit: 2, Clock: newFakeClock().Now}, kind: shed.EventAdmitted},
		{name: "tracked permit", cfg: shed.Config{Limit: 2, TrackLeaks: true}, kind: shed.EventAdmitted},
		{name: "locked path", cfg: shed.Config{Limit: 2, Classes: two}, kind: shed.EventAdmitted, setup: setupLockedPath},
		{name: "dry run, reporting the admission", cfg: shed.Config{Limit: 1, DryRun: true}, kind: shed.EventAdmitted, setup: setupOneHeld},
		{name: "dry run, reporting the overridden rejection", cfg: shed.Config{Limit: 1, DryRun: true}, kind: shed.EventRejected, setup: setupOneHeld},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t) })
	}
}

// admissionPanicCase is an admission path of TestObserverPanicOnAdmission
// whose report of kind panics.
type admissionPanicCase struct {
	name string
	cfg  shed.Config
	kind shed.EventKind
	// setup brings the limiter to the path under test and returns
	// the permits it holds; the admission then asks for req.
	setup func(*testing.T, *shed.Limiter) []shed.Permit
	req   shed.Request
}

// setupLockedPath leaves demand behind with a rejection of the protected
// class, which sends admissions through the locked path.
func setupLockedPath(t *testing.T, l *shed.Limiter) []shed.Permit {
	ps := []shed.Permit{mustAcquire(t, l, t0, shed.Request{Class: 1}), mustAcquire(t, l, t0, shed.Request{Class: 1})}
	if _, err := l.TryAcquireAt(t0, shed.Request{Class: 0}); err == nil {
		t.Fatal("admitted over the limit")
	}
	ps[1].ReleaseAt(t0, shed.Success)
	return ps[:1]
}

// setupOneHeld fills a limit of 1, so that a dry run admits over it.
func setupOneHeld(t *testing.T, l *shed.Limiter) []shed.Permit {
	return []shed.Permit{mustAcquire(t, l, t0, shed.Request{})}
}

// run makes the admission panic and checks that it was undone.
func (tc admissionPanicCase) run(t *testing.T) {
	obs := &panicky{kind: tc.kind}
	tc.cfg.Observer = obs
	l := mustNew(t, tc.cfg)
	var held []shed.Permit
	if tc.setup != nil {
		held = tc.setup(t, l)
	}
	before := l.InFlight()
	obs.armed.Store(true)
	mustPanic(t, "TryAcquireAt", func() { _, _ = l.TryAcquireAt(t0, tc.req) })
	if tc.cfg.Clock != nil {
		mustPanic(t, "TryAcquire", func() { _, _ = l.TryAcquire(tc.req) })
	}
	obs.armed.Store(false)
	if n := l.InFlight(); n != before {
		t.Fatalf("%d in flight after the panic, want %d: the undelivered permit kept its slot", n, before)
	}
	// The capacity is usable, and the undone admission counts as
	// released (Ignored) once.
	p := mustAcquire(t, l, t0, tc.req)
	p.ReleaseAt(t0, shed.Success)
	for i := range held {
		held[i].ReleaseAt(t0, shed.Success)
	}
	if tc.cfg.TrackLeaks {
		runtime.GC()
		runtime.GC()
	}
	checkSettled(t, l)
	var ignored uint64
	for _, c := range l.Snapshot().Classes {
		ignored += c.Released[shed.Ignored]
	}
	if want := uint64(obs.hits.Load()); ignored != want {
		t.Errorf("%d releases counted as Ignored, want %d (one per undone admission)", ignored, want)
	}
}

// TestObserverPanicOnQueued: when reporting that a request queued panics,
// the caller does not learn that it queued, so it is taken out again: it
// is never notified, holds nothing and may be queued again.
func TestObserverPanicOnQueued(t *testing.T) {
	obs := &panicky{kind: shed.EventQueued}
	l := mustNew(t, shed.Config{Limit: 1, Observer: obs, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 2, MaxWait: time.Second}}})
	p := mustAcquire(t, l, t0, shed.Request{})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	obs.armed.Store(true)
	mustPanic(t, "EnqueueAt", func() { _, _, _ = l.EnqueueAt(t0, shed.Request{}, w) })
	obs.armed.Store(false)
	if snap := l.Snapshot(); snap.Queued != 0 || snap.Classes[0].Cancelled != 1 {
		t.Fatalf("after the panic: %d queued, %d cancelled; want 0 and 1", snap.Queued, snap.Classes[0].Cancelled)
	}
	p.ReleaseAt(at(1), shed.Success)
	if got := log.take(); len(got) != 0 {
		t.Fatalf("the withdrawn waiter was notified %d times", len(got))
	}
	// The same waiter queues again normally.
	p = mustAcquire(t, l, at(2), shed.Request{})
	if _, queued, err := l.EnqueueAt(at(2), shed.Request{}, w); !queued || err != nil {
		t.Fatalf("EnqueueAt again: queued %v, %v", queued, err)
	}
	p.ReleaseAt(at(3), shed.Success)
	got := log.take()
	if len(got) != 1 {
		t.Fatalf("waiter notified %d times, want 1", len(got))
	}
	q, err := got[0].Result()
	if err != nil {
		t.Fatal(err)
	}
	q.ReleaseAt(at(4), shed.Success)
	checkSettled(t, l)
}

// TestObserverPanicOnQueuedBlocking: the same through the blocking
// Acquire, whose pooled waiter must not be reused while queued.
func TestObserverPanicOnQueuedBlocking(t *testing.T) {
	obs := &panicky{kind: shed.EventQueued}
	l := mustNew(t, shed.Config{Limit: 1, Observer: obs, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 4, MaxWait: time.Hour}}})
	p := mustAcquire(t, l, t0, shed.Request{})
	obs.armed.Store(true)
	for range 3 {
		mustPanic(t, "Acquire", func() { _, _ = l.Acquire(context.Background(), shed.Request{}) })
	}
	obs.armed.Store(false)
	if n := l.Snapshot().Queued; n != 0 {
		t.Fatalf("%d queued after the panics, want 0", n)
	}
	// A blocking Acquire still queues and is granted the released slot.
	done := make(chan error, 1)
	go func() {
		q, err := l.Acquire(context.Background(), shed.Request{})
		if err == nil {
			q.Release(shed.Success)
		}
		done <- err
	}()
	for l.Snapshot().Queued == 0 {
		runtime.Gosched()
	}
	p.Release(shed.Success)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkSettled(t, l)
}

// costQueues is a limiter where a waiting high class blocks a low class
// that would fit: cancelling or expiring the high waiter grants the low.
func costQueues(obs shed.Observer) shed.Config {
	return shed.Config{Limit: 10, MaxCost: 10, Observer: obs, Classes: []shed.ClassConfig{
		{Name: "hi", QueueDepth: 1, MaxWait: 10 * time.Millisecond},
		{Name: "lo", QueueDepth: 1, MaxWait: time.Second},
	}}
}

// TestObserverPanicOnOtherWaiters: when removing a waiter (CancelAt,
// ExpireAt) or draining decides the outcome of other waiters, a panicking
// Observer keeps none of them from being notified, whatever event panics.
func TestObserverPanicOnOtherWaiters(t *testing.T) {
	cases := []struct {
		name string
		kind shed.EventKind
		act  func(l *shed.Limiter, hi *shed.Waiter)
		// loGranted: lo ends with a permit (else with a rejection);
		// cancels: hi is cancelled (else timed out or drained).
		loGranted, cancels bool
	}{
		{"CancelAt, panic reporting the cancellation", shed.EventCancelled, func(l *shed.Limiter, hi *shed.Waiter) { l.CancelAt(at(1), hi) }, true, true},
		{"CancelAt, panic reporting the grant", shed.EventAdmitted, func(l *shed.Limiter, hi *shed.Waiter) { l.CancelAt(at(1), hi) }, true, true},
		{"ExpireAt, panic reporting the timeout", shed.EventRejected, func(l *shed.Limiter, _ *shed.Waiter) { l.ExpireAt(at(20)) }, true, false},
		{"ExpireAt, panic reporting the grant", shed.EventAdmitted, func(l *shed.Limiter, _ *shed.Waiter) { l.ExpireAt(at(20)) }, true, false},
		{"DrainAt, panic reporting the rejections", shed.EventRejected, func(l *shed.Limiter, _ *shed.Waiter) { l.DrainAt(at(1)) }, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &panicky{kind: tc.kind}
			l := mustNew(t, costQueues(obs))
			p := mustAcquire(t, l, t0, shed.Request{Cost: 5})
			var log waiterLog
			hi, lo := shed.NewWaiter(log.notify), shed.NewWaiter(log.notify)
			for _, q := range []struct {
				w   *shed.Waiter
				req shed.Request
			}{{hi, shed.Request{Class: 0, Cost: 8}}, {lo, shed.Request{Class: 1, Cost: 2}}} {
				if _, queued, err := l.EnqueueAt(t0, q.req, q.w); !queued || err != nil {
					t.Fatalf("EnqueueAt(%+v): queued %v, %v", q.req, queued, err)
				}
			}
			obs.armed.Store(true)
			mustPanic(t, tc.name, func() { tc.act(l, hi) })
			obs.armed.Store(false)
			notified := map[*shed.Waiter]int{}
			for _, w := range log.take() {
				notified[w]++
			}
			wantHi := 1 // timed out or drained
			if tc.cancels {
				wantHi = 0
			}
			if notified[lo] != 1 || notified[hi] != wantHi {
				t.Fatalf("lo notified %d times, hi %d; want 1 and %d", notified[lo], notified[hi], wantHi)
			}
			q, err := lo.Result()
			if tc.loGranted != (err == nil) {
				t.Fatalf("lo's outcome: %v, %v (want granted %v)", q, err, tc.loGranted)
			}
			q.ReleaseAt(at(30), shed.Success)
			p.ReleaseAt(at(30), shed.Success)
			checkSettled(t, l)
		})
	}
}

// panickySource is a LimitSource whose Limit panics while armed.
type panickySource struct {
	fakeSource
	armed atomic.Bool
}

func (s *panickySource) Limit() int {
	if s.armed.Load() {
		panic("observer bug") // the same value, for mustPanic
	}
	return s.fakeSource.Limit()
}

// TestLimitSourcePanicLeavesNoLock: a LimitSource that panics is read
// before the limiter takes its mutex, so the panic leaves it unlocked and
// the next operations decide normally (a hang here is the failure).
func TestLimitSourcePanicLeavesNoLock(t *testing.T) {
	src := &panickySource{}
	src.Set(1)
	l := mustNew(t, shed.Config{Source: src, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 2, MaxWait: time.Second}}})
	p := mustAcquire(t, l, t0, shed.Request{})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	if _, queued, err := l.EnqueueAt(t0, shed.Request{}, w); !queued || err != nil {
		t.Fatalf("EnqueueAt: queued %v, %v", queued, err)
	}
	src.armed.Store(true)
	mustPanic(t, "ReleaseAt", func() { p.ReleaseAt(at(1), shed.Success) })
	mustPanic(t, "EnqueueAt", func() { _, _, _ = l.EnqueueAt(at(1), shed.Request{}, shed.NewWaiter(log.notify)) })
	mustPanic(t, "ExpireAt", func() { l.ExpireAt(at(1)) })
	mustPanic(t, "CancelAt", func() { l.CancelAt(at(1), w) })
	src.armed.Store(false)
	// The slot released above waits for the next decision to be handed
	// to the waiter.
	l.ExpireAt(at(2))
	got := log.take()
	if len(got) != 1 || got[0] != w {
		t.Fatalf("%d notifications, want the waiter's", len(got))
	}
	q, err := w.Result()
	if err != nil {
		t.Fatal(err)
	}
	q.ReleaseAt(at(3), shed.Success)
	checkSettled(t, l)
}

// TestObservedDecisionsDoNotAllocate: the guards that undo a decision when
// the Observer panics cost no allocation on the paths that report.
func TestObservedDecisionsDoNotAllocate(t *testing.T) {
	var events atomic.Int64
	obs := shed.ObserverFunc(func(shed.Event) { events.Add(1) })
	l := mustNew(t, shed.Config{Limit: 1, Observer: obs, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 1, MaxWait: time.Second}}})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	log.got = make([]*shed.Waiter, 0, 1)
	allocs := testing.AllocsPerRun(100, func() {
		p, err := l.TryAcquireAt(t0, shed.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if _, queued, err := l.EnqueueAt(t0, shed.Request{}, w); !queued || err != nil {
			t.Fatalf("EnqueueAt: queued %v, %v", queued, err)
		}
		p.ReleaseAt(t0, shed.Success)
		q, err := w.Result()
		if err != nil {
			t.Fatal(err)
		}
		q.ReleaseAt(t0, shed.Success)
		log.got = log.got[:0]
	})
	if allocs != 0 {
		t.Fatalf("an observed admission, queueing, grant and releases allocate %v times", allocs)
	}
	if events.Load() == 0 {
		t.Fatal("the observer saw nothing")
	}
}

// observePanickySource is a LimitSource whose Observe panics while armed.
type observePanickySource struct {
	fakeSource
	armed atomic.Bool
}

func (s *observePanickySource) Observe(x shed.Sample) {
	if s.armed.Load() {
		panic("observer bug") // the same value, for mustPanic
	}
	s.fakeSource.Observe(x)
}

// TestLimitSourceObservePanicGivesBack is issue 15: a LimitSource whose
// Observe panicked kept the released permit's slot for good, because the
// sample is given to the source before the capacity is given back. Like a
// panic in Limit or in the Observer, it must propagate to the caller of
// Release with the limiter consistent: the capacity is given back, the
// release is counted, and a waiter gets the freed slot.
func TestLimitSourceObservePanicGivesBack(t *testing.T) {
	cases := []struct {
		name    string
		outcome shed.Outcome
		wall    bool // Release on a fake wall clock (an untimed drop is still observed)
		obs     bool
	}{
		{name: "timed success", outcome: shed.Success},
		{name: "timed drop", outcome: shed.Dropped},
		{name: "wall clock drop", outcome: shed.Dropped, wall: true},
		{name: "observed success", outcome: shed.Success, obs: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &observePanickySource{}
			src.Set(2)
			clk := newFakeClock()
			var rec recorder
			cfg := shed.Config{Source: src, Clock: clk.Now, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 2, MaxWait: time.Second}}}
			if tc.obs {
				cfg.Observer = &rec
			}
			l := mustNew(t, cfg)
			p := mustAcquire(t, l, t0, shed.Request{Cost: 3})
			q := mustAcquire(t, l, t0, shed.Request{})
			var log waiterLog
			w := shed.NewWaiter(log.notify)
			if _, queued, err := l.EnqueueAt(t0, shed.Request{}, w); !queued || err != nil {
				t.Fatalf("EnqueueAt: queued %v, %v", queued, err)
			}
			src.armed.Store(true)
			if tc.wall {
				mustPanic(t, "Release", func() { p.Release(tc.outcome) })
			} else {
				mustPanic(t, "ReleaseAt", func() { p.ReleaseAt(at(5), tc.outcome) })
			}
			src.armed.Store(false)
			if p.Valid() {
				t.Error("the permit is still valid after its release panicked")
			}
			// The slot went to the waiter.
			got := log.take()
			if len(got) != 1 || got[0] != w {
				t.Fatalf("%d notifications, want the waiter's: the released slot was kept", len(got))
			}
			r, err := w.Result()
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			if snap := l.Snapshot(); snap.InFlight != 2 || snap.InFlightCost != 2 {
				t.Fatalf("in flight %d (cost %d), want 2 (cost 2)", snap.InFlight, snap.InFlightCost)
			}
			if c := l.Snapshot().Classes[0]; c.Released[tc.outcome] != 1 {
				t.Errorf("released %v, want one %v", c.Released, tc.outcome)
			}
			for _, k := range rec.Kinds() {
				if k == shed.EventReleased {
					t.Error("the release whose sample panicked was reported as an EventReleased")
				}
			}
			p.ReleaseAt(at(6), shed.Success) // released already: nothing
			r.ReleaseAt(at(6), shed.Success)
			q.ReleaseAt(at(6), shed.Success)
			checkSettled(t, l)
		})
	}
}
