package shed_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func TestTryAcquireUpToTheLimit(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 3})
	var held []shed.Permit
	for i := 0; i < 3; i++ {
		held = append(held, mustAcquire(t, l, at(i), shed.Request{}))
	}
	_, err := l.TryAcquireAt(at(3), shed.Request{})
	if !errors.Is(err, shed.ErrRejected) {
		t.Fatalf("4th acquire: err = %v, want a rejection", err)
	}
	var rej *shed.Rejection
	if !errors.As(err, &rej) || rej.Reason != shed.ReasonLimit || rej.ClassName != "default" {
		t.Fatalf("rejection = %+v", rej)
	}
	if rej.RetryAfter < shed.DefaultRetryAfterMin || rej.RetryAfter > shed.DefaultRetryAfterMax {
		t.Errorf("RetryAfter = %v, outside the default bounds", rej.RetryAfter)
	}
	if got := l.InFlight(); got != 3 {
		t.Fatalf("InFlight = %d, want 3", got)
	}
	held[1].ReleaseAt(at(4), shed.Success)
	p := mustAcquire(t, l, at(5), shed.Request{})
	if !p.Valid() || p.Class() != 0 || p.Cost() != 1 || p.Wait() != 0 {
		t.Errorf("permit = valid %v class %v cost %d wait %v", p.Valid(), p.Class(), p.Cost(), p.Wait())
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 2})
	a := mustAcquire(t, l, t0, shed.Request{})
	b := mustAcquire(t, l, t0, shed.Request{})
	a.ReleaseAt(at(1), shed.Success)
	a.ReleaseAt(at(2), shed.Success)
	a.Release(shed.Dropped)
	if got := l.InFlight(); got != 1 {
		t.Fatalf("after releasing one permit three times InFlight = %d, want 1", got)
	}
	if a.Valid() {
		t.Error("a released permit is still Valid")
	}
	var zero shed.Permit
	zero.Release(shed.Success)
	zero.ReleaseAt(t0, shed.Ignored)
	if got := l.InFlight(); got != 1 {
		t.Fatalf("releasing the zero Permit changed InFlight to %d", got)
	}
	b.Release(shed.Ignored)
	if got := l.InFlight(); got != 0 {
		t.Fatalf("InFlight = %d, want 0", got)
	}
	snap := l.Snapshot()
	if c := snap.Classes[0]; c.Admitted != 2 || c.Released != [3]uint64{1, 0, 1} {
		t.Errorf("counters = %+v", c)
	}
}

func TestShrinkingTheLimitNeverRevokes(t *testing.T) {
	src := newFakeSource(10)
	l := mustNew(t, shed.Config{Source: src})
	held := make([]shed.Permit, 10)
	for i := range held {
		held[i] = mustAcquire(t, l, t0, shed.Request{})
	}
	src.Set(4)
	if l.InFlight() != 10 || l.Limit() != 4 {
		t.Fatalf("InFlight %d Limit %d after shrinking", l.InFlight(), l.Limit())
	}
	for i := 0; i < 7; i++ {
		if _, err := l.TryAcquireAt(t0, shed.Request{}); err == nil {
			t.Fatalf("admitted while %d in flight over a limit of 4", l.InFlight())
		}
		held[i].ReleaseAt(t0, shed.Ignored) // 9, 8, ..., 3 in flight
	}
	// 3 in flight, limit 4: one more fits.
	mustAcquire(t, l, t0, shed.Request{})
	if _, err := l.TryAcquireAt(t0, shed.Request{}); err == nil {
		t.Fatal("admitted a 5th permit over a limit of 4")
	}
	src.Set(0) // a broken source: the limiter still admits one at a time
	if l.Limit() != 1 {
		t.Errorf("Limit with a source returning 0 = %d, want 1", l.Limit())
	}
}

func TestOutcomesFeedTheSource(t *testing.T) {
	src := newFakeSource(10)
	l := mustNew(t, shed.Config{Source: src})
	a := mustAcquire(t, l, at(0), shed.Request{})
	b := mustAcquire(t, l, at(1), shed.Request{})
	c := mustAcquire(t, l, at(2), shed.Request{})
	a.ReleaseAt(at(30), shed.Success)
	b.ReleaseAt(at(41), shed.Dropped)
	c.ReleaseAt(at(50), shed.Ignored)
	got := src.Samples()
	want := []shed.Sample{
		{Now: at(30), Latency: 30 * time.Millisecond, Timed: true, InFlight: 1, Cost: 1},
		{Now: at(41), Latency: 40 * time.Millisecond, Timed: true, InFlight: 2, Dropped: true, Cost: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("samples = %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Now.Equal(want[i].Now) || got[i].Latency != want[i].Latency || got[i].Timed != want[i].Timed ||
			got[i].InFlight != want[i].InFlight || got[i].Dropped != want[i].Dropped || got[i].Cost != want[i].Cost {
			t.Errorf("sample %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestZeroLatencySamplesCount(t *testing.T) {
	src := newFakeSource(10)
	l := mustNew(t, shed.Config{Source: src})
	p := mustAcquire(t, l, t0, shed.Request{})
	p.ReleaseAt(t0, shed.Success)
	if s := src.Samples(); len(s) != 1 || !s[0].Timed || s[0].Latency != 0 {
		t.Fatalf("a zero-latency success gave samples %+v", s)
	}
}

func TestWallClockTimesASubsetAboveTheCap(t *testing.T) {
	clk := newFakeClock()
	src := newFakeSource(1000)
	l := mustNew(t, shed.Config{Source: src, Clock: clk.Now, MaxSamplesPerSecond: 100})
	// 1,000 admissions per 100 ms of virtual time: 10,000 per second,
	// 100 times the cap.
	run := func(periods int) int {
		before := len(src.Samples())
		for i := 0; i < periods; i++ {
			for j := 0; j < 1000; j++ {
				p, err := l.TryAcquire(shed.Request{})
				if err != nil {
					t.Fatal(err)
				}
				p.Release(shed.Success)
			}
			clk.Advance(100 * time.Millisecond)
		}
		return len(src.Samples()) - before
	}
	run(3) // learn the rate
	timed := run(10)
	// The cap is 100 per second, so about 100 over one virtual second; the
	// power-of-two stride (every 128th) gives 78.
	if timed < 50 || timed > 150 {
		t.Fatalf("timed %d permits in one virtual second at 10,000/s with a cap of 100/s", timed)
	}
	for _, s := range src.Samples() {
		if !s.Timed {
			t.Fatalf("an untimed success reached the source: %+v", s)
		}
	}
	// Drops are always reported, timed or not.
	before := len(src.Samples())
	for j := 0; j < 500; j++ {
		p, _ := l.TryAcquire(shed.Request{})
		p.Release(shed.Dropped)
	}
	if n := len(src.Samples()) - before; n != 500 {
		t.Fatalf("%d of 500 drops reached the source", n)
	}
}

func TestRejectionRetryAfterFollowsLatency(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, RetryAfterMin: 100 * time.Millisecond, RetryAfterMax: 10 * time.Second})
	// Teach the limiter that work takes 2 s.
	for i := 0; i < 50; i++ {
		p := mustAcquire(t, l, at(0), shed.Request{})
		p.ReleaseAt(at(2000), shed.Success)
	}
	p := mustAcquire(t, l, at(0), shed.Request{})
	defer p.ReleaseAt(at(1), shed.Ignored)
	_, err := l.TryAcquireAt(at(0), shed.Request{})
	var rej *shed.Rejection
	if !errors.As(err, &rej) {
		t.Fatal(err)
	}
	// One slot, 2 s per unit of work: a slot frees in about 2 s.
	if rej.RetryAfter < 1900*time.Millisecond || rej.RetryAfter > 2100*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want about 2s", rej.RetryAfter)
	}
}

func TestCostBudget(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, MaxCost: 100})
	a := mustAcquire(t, l, t0, shed.Request{Cost: 60})
	b := mustAcquire(t, l, t0, shed.Request{Cost: 30})
	_, err := l.TryAcquireAt(t0, shed.Request{Cost: 20})
	wantReason(t, err, shed.ReasonLimit)
	_, err = l.TryAcquireAt(t0, shed.Request{Cost: 101})
	wantReason(t, err, shed.ReasonCostTooLarge)
	if snap := l.Snapshot(); snap.InFlightCost != 90 || snap.MaxCost != 100 || snap.InFlight != 2 {
		t.Fatalf("snapshot = %+v", snap)
	}
	// The call used 10, not 60.
	if err := a.ReconcileAt(t0, 10); err != nil {
		t.Fatal(err)
	}
	if a.Cost() != 10 || l.Snapshot().InFlightCost != 40 {
		t.Fatalf("after reconcile cost %d in flight %d", a.Cost(), l.Snapshot().InFlightCost)
	}
	c := mustAcquire(t, l, t0, shed.Request{Cost: 20})
	// Reconciling upwards never rejects, even past the budget.
	if err := b.ReconcileAt(t0, 95); err != nil {
		t.Fatal(err)
	}
	if got := l.Snapshot().InFlightCost; got != 125 {
		t.Fatalf("in-flight cost %d, want 125", got)
	}
	if err := b.ReconcileAt(t0, -1); !errors.Is(err, shed.ErrInvalidRequest) {
		t.Errorf("negative reconcile: %v", err)
	}
	a.ReleaseAt(t0, shed.Success)
	b.ReleaseAt(t0, shed.Success)
	c.ReleaseAt(t0, shed.Success)
	if err := a.ReconcileAt(t0, 5); !errors.Is(err, shed.ErrReleased) {
		t.Errorf("reconcile after release: %v", err)
	}
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.InFlightCost != 0 {
		t.Fatalf("after releasing everything: %+v", snap)
	}
}

func TestCostTooLargeIsNeverQueued(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, MaxCost: 100, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Second}}})
	var log waiterLog
	_, queued, err := l.EnqueueAt(t0, shed.Request{Cost: 500}, shed.NewWaiter(log.notify))
	if queued {
		t.Fatal("a request larger than the whole budget was queued")
	}
	wantReason(t, err, shed.ReasonCostTooLarge)
}

func TestReconcileDownAdmitsWaiters(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, MaxCost: 100, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Second}}})
	big := mustAcquire(t, l, t0, shed.Request{Cost: 90})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	if _, queued, err := l.EnqueueAt(t0, shed.Request{Cost: 50}, w); !queued || err != nil {
		t.Fatalf("EnqueueAt: queued %v err %v", queued, err)
	}
	if err := big.ReconcileAt(at(10), 40); err != nil {
		t.Fatal(err)
	}
	got := log.take()
	if len(got) != 1 || got[0] != w {
		t.Fatalf("notified %v", got)
	}
	p, err := w.Result()
	if err != nil || p.Cost() != 50 || p.Wait() != 10*time.Millisecond {
		t.Fatalf("waiter result: cost %d wait %v err %v", p.Cost(), p.Wait(), err)
	}
	p.ReleaseAt(at(20), shed.Success)
	big.ReleaseAt(at(20), shed.Success)
}

// The scenario of the design notes: 32 slots, interactive protects 28,
// batch borrows what interactive leaves idle.
func TestProtectedCapacityScenario(t *testing.T) {
	classes := []shed.ClassConfig{
		{Name: "interactive", Protected: 28.0 / 32, QueueDepth: 100, MaxWait: 5 * time.Second},
		{Name: "batch"},
	}
	const interactive, batch = shed.Class(0), shed.Class(1)

	t.Run("batch fills idle capacity, interactive takes the next free slot", func(t *testing.T) {
		l := mustNew(t, shed.Config{Limit: 32, Classes: classes})
		var running []shed.Permit
		for i := 0; i < 32; i++ {
			running = append(running, mustAcquire(t, l, at(0), shed.Request{Class: batch}))
		}
		// An interactive request arrives while batch holds every slot: it
		// waits, it does not preempt.
		var log waiterLog
		w := shed.NewWaiter(log.notify)
		if _, queued, err := l.EnqueueAt(at(1), shed.Request{Class: interactive}, w); !queued || err != nil {
			t.Fatalf("interactive: queued %v err %v", queued, err)
		}
		_, err := l.TryAcquireAt(at(2), shed.Request{Class: batch})
		wantReason(t, err, shed.ReasonLimit)
		// One batch request finishes: the slot goes to interactive.
		running[0].ReleaseAt(at(3), shed.Success)
		if got := log.take(); len(got) != 1 || got[0] != w {
			t.Fatalf("the freed slot went to %v", got)
		}
		ip, err := w.Result()
		if err != nil || ip.Class() != interactive || ip.Wait() != 2*time.Millisecond {
			t.Fatalf("interactive result class %v wait %v err %v", ip.Class(), ip.Wait(), err)
		}
		// Interactive demand is back: batch is refused even when a slot
		// frees, and that slot stays for interactive.
		running[1].ReleaseAt(at(4), shed.Success)
		_, err = l.TryAcquireAt(at(5), shed.Request{Class: batch})
		wantReason(t, err, shed.ReasonLimit)
		mustAcquire(t, l, at(6), shed.Request{Class: interactive})
		snap := l.Snapshot()
		if snap.InFlight != 32 || snap.Classes[0].InFlight != 2 || snap.Classes[1].InFlight != 30 {
			t.Fatalf("in flight %d (interactive %d, batch %d)", snap.InFlight, snap.Classes[0].InFlight, snap.Classes[1].InFlight)
		}
	})

	t.Run("without a queue interactive still gets the next free slot", func(t *testing.T) {
		cl := append([]shed.ClassConfig(nil), classes...)
		cl[0].QueueDepth, cl[0].MaxWait = 0, 0
		l := mustNew(t, shed.Config{Limit: 32, Classes: cl})
		var running []shed.Permit
		for i := 0; i < 32; i++ {
			running = append(running, mustAcquire(t, l, at(0), shed.Request{Class: batch}))
		}
		_, err := l.TryAcquireAt(at(1), shed.Request{Class: interactive})
		wantReason(t, err, shed.ReasonLimit) // full: rejected, but remembered as demand
		running[0].ReleaseAt(at(2), shed.Success)
		_, err = l.TryAcquireAt(at(3), shed.Request{Class: batch})
		wantReason(t, err, shed.ReasonLimit)
		mustAcquire(t, l, at(4), shed.Request{Class: interactive})
		// Once interactive has been quiet for DemandHold, batch borrows again.
		running[1].ReleaseAt(at(5), shed.Success)
		mustAcquire(t, l, at(4).Add(shed.DefaultDemandHold), shed.Request{Class: batch})
	})

	t.Run("batch uses what interactive leaves idle", func(t *testing.T) {
		l := mustNew(t, shed.Config{Limit: 32, Classes: classes})
		for i := 0; i < 10; i++ {
			mustAcquire(t, l, at(0), shed.Request{Class: interactive})
		}
		for i := 0; i < 22; i++ {
			mustAcquire(t, l, at(1), shed.Request{Class: batch})
		}
		_, err := l.TryAcquireAt(at(2), shed.Request{Class: batch})
		wantReason(t, err, shed.ReasonLimit)
		if snap := l.Snapshot(); snap.Classes[1].InFlight != 22 || snap.Classes[0].Protected != 28 {
			t.Fatalf("snapshot %+v", snap.Classes)
		}
	})
}

func TestLowerClassWithinItsOwnShareIsNotBlocked(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, Classes: []shed.ClassConfig{
		{Name: "high", QueueDepth: 10, MaxWait: time.Second},
		{Name: "low", Protected: 0.2},
	}})
	for i := 0; i < 10; i++ {
		mustAcquire(t, l, at(0), shed.Request{Class: 0})
	}
	var log waiterLog
	if _, queued, _ := l.EnqueueAt(at(1), shed.Request{Class: 0}, shed.NewWaiter(log.notify)); !queued {
		t.Fatal("high did not queue")
	}
	// low is rejected (full), which records low's demand ...
	_, err := l.TryAcquireAt(at(2), shed.Request{Class: 1})
	wantReason(t, err, shed.ReasonLimit)
	if snap := l.Snapshot(); snap.Classes[1].Protected != 2 {
		t.Fatalf("low protects %d", snap.Classes[1].Protected)
	}
}

func TestStrictPriority(t *testing.T) {
	for _, strict := range []bool{false, true} {
		l := mustNew(t, shed.Config{Limit: 4, Strict: strict, DemandHold: time.Second, Classes: []shed.ClassConfig{{Name: "high"}, {Name: "low"}}})
		var held []shed.Permit
		for i := 0; i < 4; i++ {
			held = append(held, mustAcquire(t, l, at(0), shed.Request{Class: 1}))
		}
		_, err := l.TryAcquireAt(at(1), shed.Request{Class: 0}) // high goes short
		wantReason(t, err, shed.ReasonLimit)
		held[0].ReleaseAt(at(2), shed.Success)
		_, err = l.TryAcquireAt(at(3), shed.Request{Class: 1})
		if strict {
			// Strict: high's unmet demand blocks low for DemandHold.
			wantReason(t, err, shed.ReasonLimit)
			if _, err := l.TryAcquireAt(at(1001), shed.Request{Class: 1}); err != nil {
				t.Fatalf("strict: low still blocked after the demand hold: %v", err)
			}
		} else if err != nil {
			// Not strict, and high protects nothing: low competes freely.
			t.Fatalf("non-strict: low rejected: %v", err)
		}
	}
}

func TestHigherClassWaitersAreServedFirst(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{
		{Name: "high", QueueDepth: 5, MaxWait: time.Minute},
		{Name: "low", QueueDepth: 5, MaxWait: time.Minute},
	}})
	p := mustAcquire(t, l, at(0), shed.Request{Class: 1})
	var log waiterLog
	low := shed.NewWaiter(log.notify)
	high := shed.NewWaiter(log.notify)
	l.EnqueueAt(at(1), shed.Request{Class: 1}, low)
	l.EnqueueAt(at(2), shed.Request{Class: 0}, high)
	// A new low request may not jump the queue.
	_, queued, err := l.EnqueueAt(at(3), shed.Request{Class: 1}, shed.NewWaiter(log.notify))
	if !queued || err != nil {
		t.Fatalf("third waiter: queued %v err %v", queued, err)
	}
	p.ReleaseAt(at(4), shed.Success)
	got := log.take()
	if len(got) != 1 || got[0] != high {
		t.Fatalf("first release woke %d waiters, want exactly the high one", len(got))
	}
	hp, _ := high.Result()
	hp.ReleaseAt(at(5), shed.Success)
	if got := log.take(); len(got) != 1 || got[0] != low {
		t.Fatalf("second release woke %v, want the first low waiter", got)
	}
}

func TestQueueOrder(t *testing.T) {
	for _, lifo := range []bool{false, true} {
		l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 3, MaxWait: time.Minute, LIFO: lifo}}})
		p := mustAcquire(t, l, at(0), shed.Request{})
		var log waiterLog
		ws := []*shed.Waiter{shed.NewWaiter(log.notify), shed.NewWaiter(log.notify), shed.NewWaiter(log.notify)}
		for i, w := range ws {
			l.EnqueueAt(at(i+1), shed.Request{}, w)
		}
		var order []*shed.Waiter
		for i := 0; i < 3; i++ {
			p.ReleaseAt(at(10+i), shed.Success)
			got := log.take()
			if len(got) != 1 {
				t.Fatalf("lifo=%v: a release woke %d waiters", lifo, len(got))
			}
			order = append(order, got[0])
			p, _ = got[0].Result()
		}
		want := ws
		if lifo {
			want = []*shed.Waiter{ws[2], ws[1], ws[0]}
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("lifo=%v: service order wrong at %d", lifo, i)
			}
		}
	}
}

func TestQueueBounds(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, MaxQueue: 3, Classes: []shed.ClassConfig{
		{Name: "a", QueueDepth: 2, MaxWait: time.Minute},
		{Name: "b", QueueDepth: 2, MaxWait: time.Minute},
	}})
	mustAcquire(t, l, t0, shed.Request{})
	var log waiterLog
	enq := func(c shed.Class) error {
		_, queued, err := l.EnqueueAt(t0, shed.Request{Class: c}, shed.NewWaiter(log.notify))
		if queued {
			return nil
		}
		return err
	}
	for i := 0; i < 2; i++ {
		if err := enq(0); err != nil {
			t.Fatalf("class a waiter %d: %v", i, err)
		}
	}
	wantReason(t, enq(0), shed.ReasonQueueFull) // class depth
	if err := enq(1); err != nil {
		t.Fatal(err)
	}
	wantReason(t, enq(1), shed.ReasonQueueFull) // total depth 3
	if snap := l.Snapshot(); snap.Queued != 3 || snap.Classes[0].Queued != 2 || snap.Classes[1].Queued != 1 {
		t.Fatalf("queued %d (%d, %d)", snap.Queued, snap.Classes[0].Queued, snap.Classes[1].Queued)
	}
}

func TestQueueTimeout(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: 100 * time.Millisecond}}})
	p := mustAcquire(t, l, at(0), shed.Request{})
	var log waiterLog
	a, b := shed.NewWaiter(log.notify), shed.NewWaiter(log.notify)
	l.EnqueueAt(at(0), shed.Request{}, a)
	l.EnqueueAt(at(50), shed.Request{Deadline: at(70)}, b) // its own deadline is earlier
	if !b.Deadline().Equal(at(70)) || !a.Deadline().Equal(at(100)) {
		t.Fatalf("deadlines %v %v", a.Deadline(), b.Deadline())
	}
	l.ExpireAt(at(69))
	if got := log.take(); len(got) != 0 {
		t.Fatalf("expired %d waiters before any deadline", len(got))
	}
	l.ExpireAt(at(70))
	if got := log.take(); len(got) != 1 || got[0] != b {
		t.Fatalf("ExpireAt(70ms) expired %v", got)
	}
	_, err := b.Result()
	wantReason(t, err, shed.ReasonQueueTimeout)
	// A release after a's deadline does not grant it: it times out.
	p.ReleaseAt(at(150), shed.Success)
	got := log.take()
	if len(got) != 1 || got[0] != a {
		t.Fatalf("release woke %v", got)
	}
	_, err = a.Result()
	wantReason(t, err, shed.ReasonQueueTimeout)
	if snap := l.Snapshot(); snap.Queued != 0 || snap.Classes[0].Rejected[shed.ReasonQueueTimeout] != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestDeadlineShorterThanExpectedWait(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 10, MaxWait: time.Minute}}})
	var log waiterLog
	// Before any latency is known nothing is rejected for its deadline.
	p := mustAcquire(t, l, at(0), shed.Request{})
	_, queued, err := l.EnqueueAt(at(0), shed.Request{Deadline: at(1)}, shed.NewWaiter(log.notify))
	if !queued {
		t.Fatalf("rejected before any latency was known: %v", err)
	}
	p.ReleaseAt(at(100), shed.Success) // learn: work takes 100 ms
	_, err = log.take()[0].Result()
	wantReason(t, err, shed.ReasonQueueTimeout) // its deadline passed meanwhile
	p = mustAcquire(t, l, at(100), shed.Request{})
	// One slot, 100 ms per unit: the next in line waits about 100 ms.
	_, queued, err = l.EnqueueAt(at(100), shed.Request{Deadline: at(150)}, shed.NewWaiter(log.notify))
	if queued {
		t.Fatal("queued a request that cannot be served before its deadline")
	}
	wantReason(t, err, shed.ReasonDeadline)
	if _, queued, err := l.EnqueueAt(at(100), shed.Request{Deadline: at(400)}, shed.NewWaiter(log.notify)); !queued {
		t.Fatalf("rejected a request with time to spare: %v", err)
	}
	// A deadline already past is rejected at once.
	_, _, err = l.EnqueueAt(at(200), shed.Request{Deadline: at(199)}, shed.NewWaiter(log.notify))
	wantReason(t, err, shed.ReasonDeadline)
	p.ReleaseAt(at(300), shed.Success)
}

func TestCancelPassesTheSlotOn(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Minute}}})
	p := mustAcquire(t, l, at(0), shed.Request{})
	var log waiterLog
	a, b := shed.NewWaiter(log.notify), shed.NewWaiter(log.notify)
	l.EnqueueAt(at(1), shed.Request{}, a)
	l.EnqueueAt(at(2), shed.Request{}, b)
	if !l.CancelAt(at(3), a) {
		t.Fatal("CancelAt of a queued waiter returned false")
	}
	if l.CancelAt(at(3), a) {
		t.Fatal("CancelAt twice returned true")
	}
	p.ReleaseAt(at(4), shed.Success)
	if got := log.take(); len(got) != 1 || got[0] != b {
		t.Fatalf("release woke %v, want b", got)
	}
	bp, _ := b.Result()
	if l.CancelAt(at(5), b) {
		t.Fatal("CancelAt of a granted waiter returned true")
	}
	bp.ReleaseAt(at(6), shed.Success)
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.Classes[0].Cancelled != 1 || snap.Classes[0].AdmittedAfterWait != 1 {
		t.Fatalf("snapshot %+v", snap.Classes[0])
	}
	// A waiter may be reused once its outcome was delivered.
	if _, queued, err := l.EnqueueAt(at(7), shed.Request{}, b); queued || err != nil {
		t.Fatalf("reusing a waiter: queued %v err %v", queued, err)
	}
}

func TestOneReleaseWakesOneWaiter(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 100, MaxWait: time.Minute}}})
	p := mustAcquire(t, l, at(0), shed.Request{})
	var log waiterLog
	for i := 0; i < 50; i++ {
		l.EnqueueAt(at(1), shed.Request{}, shed.NewWaiter(log.notify))
	}
	for i := 0; i < 50; i++ {
		p.ReleaseAt(at(2+i), shed.Success)
		got := log.take()
		if len(got) != 1 {
			t.Fatalf("release %d woke %d waiters", i, len(got))
		}
		p, _ = got[0].Result()
	}
	if l.InFlight() != 1 || l.Snapshot().Queued != 0 {
		t.Fatalf("in flight %d queued %d", l.InFlight(), l.Snapshot().Queued)
	}
}

func TestEnqueuingABusyWaiterFails(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Minute}}})
	mustAcquire(t, l, at(0), shed.Request{})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	l.EnqueueAt(at(1), shed.Request{}, w)
	if _, queued, err := l.EnqueueAt(at(2), shed.Request{}, w); queued || !errors.Is(err, shed.ErrInvalidRequest) {
		t.Fatalf("enqueueing a queued waiter: queued %v err %v", queued, err)
	}
}

func TestDryRunAdmitsButReports(t *testing.T) {
	rec := &recorder{}
	l := mustNew(t, shed.Config{Limit: 1, DryRun: true, Observer: rec, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Second}}})
	a := mustAcquire(t, l, at(0), shed.Request{})
	b := mustAcquire(t, l, at(1), shed.Request{})
	if a.DryRun() != shed.ReasonNone || b.DryRun() != shed.ReasonLimit {
		t.Fatalf("dry-run reasons %v %v", a.DryRun(), b.DryRun())
	}
	var log waiterLog
	c, queued, err := l.EnqueueAt(at(2), shed.Request{}, shed.NewWaiter(log.notify))
	if queued || err != nil || !c.Valid() {
		t.Fatalf("dry run queued %v err %v", queued, err)
	}
	snap := l.Snapshot()
	if snap.InFlight != 3 || !snap.DryRun || snap.Classes[0].Rejected[shed.ReasonLimit] != 2 || snap.Queued != 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	want := []shed.EventKind{shed.EventAdmitted, shed.EventRejected, shed.EventAdmitted, shed.EventRejected, shed.EventAdmitted}
	got := rec.Kinds()
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	for _, p := range []*shed.Permit{&a, &b, &c} {
		p.ReleaseAt(at(3), shed.Success)
	}
	if l.InFlight() != 0 {
		t.Fatal("dry run leaked capacity")
	}
}

// Dry-run mode still rejects a cost above MaxCost (see Config.DryRun): no
// limit would ever admit it, so the dry run reports it as the rejection it
// is, counted as such and not as a dry-run admission.
func TestDryRunRejectsCostTooLarge(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, MaxCost: 100, DryRun: true})
	_, err := l.TryAcquireAt(t0, shed.Request{Cost: 101})
	wantReason(t, err, shed.ReasonCostTooLarge)
	p := mustAcquire(t, l, t0, shed.Request{Cost: 100})
	p.ReleaseAt(t0, shed.Success)
	if s := l.Snapshot(); s.InFlight != 0 || s.Classes[0].Rejected[shed.ReasonCostTooLarge] != 1 {
		t.Errorf("snapshot %+v, want one cost_too_large rejection and nothing in flight", s)
	}
}

func TestDrainAt(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 2, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Minute}}})
	a := mustAcquire(t, l, at(0), shed.Request{})
	c := mustAcquire(t, l, at(0), shed.Request{})
	c.ReleaseAt(at(0), shed.Success)
	b := mustAcquire(t, l, at(0), shed.Request{})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	l.EnqueueAt(at(1), shed.Request{}, w)
	l.DrainAt(at(2))
	if got := log.take(); len(got) != 1 {
		t.Fatalf("drain delivered %d waiter outcomes", len(got))
	}
	_, err := w.Result()
	wantReason(t, err, shed.ReasonDraining)
	b.ReleaseAt(at(3), shed.Success)
	_, err = l.TryAcquireAt(at(4), shed.Request{})
	wantReason(t, err, shed.ReasonDraining)
	snap := l.Snapshot()
	if !snap.Draining || snap.InFlight != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	a.ReleaseAt(at(5), shed.Success)
	if l.InFlight() != 0 {
		t.Fatal("in flight after draining")
	}
}

func TestSnapshotAndEvents(t *testing.T) {
	rec := &recorder{}
	l := mustNew(t, shed.Config{Limit: 1, Observer: rec, Classes: []shed.ClassConfig{
		{Name: "i", QueueDepth: 1, MaxWait: time.Second},
		{Name: "b"},
	}})
	p := mustAcquire(t, l, at(0), shed.Request{Class: 0, Cost: 3})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	l.EnqueueAt(at(1), shed.Request{Class: 0}, w)
	_, _, err := l.EnqueueAt(at(1), shed.Request{Class: 0}, shed.NewWaiter(log.notify))
	wantReason(t, err, shed.ReasonQueueFull)
	_, err = l.TryAcquireAt(at(1), shed.Request{Class: 1})
	wantReason(t, err, shed.ReasonLimit)
	p.ReleaseAt(at(10), shed.Dropped)
	wp, _ := w.Result()
	wp.ReleaseAt(at(20), shed.Success)

	snap := l.Snapshot()
	i, b := snap.Classes[0], snap.Classes[1]
	if i.Admitted != 2 || i.AdmittedAfterWait != 1 || i.Rejected[shed.ReasonQueueFull] != 1 || i.Released != [3]uint64{1, 1, 0} || i.Rejections() != 1 {
		t.Errorf("interactive counters %+v", i)
	}
	if b.Admitted != 0 || b.Rejected[shed.ReasonLimit] != 1 {
		t.Errorf("batch counters %+v", b)
	}
	want := []shed.EventKind{shed.EventAdmitted, shed.EventQueued, shed.EventRejected, shed.EventRejected, shed.EventAdmitted, shed.EventReleased, shed.EventReleased}
	got := rec.Kinds()
	// The grant (admitted after wait) is reported when the release that
	// freed the slot hands it over, before that release's own event.
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	ev := rec.events[4]
	if !ev.Queued || ev.Wait != 9*time.Millisecond || ev.Class != 0 {
		t.Errorf("admitted-after-wait event %+v", ev)
	}
	rel := rec.events[5]
	if rel.Outcome != shed.Dropped || rel.Latency != 10*time.Millisecond || rel.Cost != 3 {
		t.Errorf("release event %+v", rel)
	}
}

func TestRejectionsDoNotAllocate(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1})
	mustAcquire(t, l, t0, shed.Request{})
	l.TryAcquire(shed.Request{}) // first use creates the shared value
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := l.TryAcquire(shed.Request{}); err == nil {
			t.Fatal("admitted")
		}
	})
	if allocs != 0 {
		t.Fatalf("a rejection allocates %v times", allocs)
	}
}

func TestAdmissionDoesNotAllocate(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, Classes: []shed.ClassConfig{{Name: "a", Protected: 0.5}, {Name: "b"}}})
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := l.TryAcquire(shed.Request{Class: 1})
		if err != nil {
			t.Fatal(err)
		}
		p.Release(shed.Success)
		q, _ := l.TryAcquireAt(t0, shed.Request{})
		q.ReleaseAt(t0, shed.Dropped)
	})
	if allocs != 0 {
		t.Fatalf("acquire + release allocates %v times", allocs)
	}
}
