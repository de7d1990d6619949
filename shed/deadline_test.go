package shed_test

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// learn teaches class c of l that its work takes d, with n permits held
// for d each, ending at end.
func learn(t *testing.T, l *shed.Limiter, c shed.Class, d time.Duration, n int, end time.Time) {
	t.Helper()
	for i := 0; i < n; i++ {
		p := mustAcquire(t, l, end.Add(-d), shed.Request{Class: c})
		p.ReleaseAt(end, shed.Success)
	}
}

// TestDeadlineCountsServiceTime: a request whose remaining time is shorter
// than half of its class's service time is rejected at once, without
// queueing or taking capacity, even while capacity is free; one with
// enough time is admitted. Before the service time counted, the deadline
// was compared with the expected queue wait only, which is zero while
// capacity is free: the first request was admitted.
func TestDeadlineCountsServiceTime(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: 0.5, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Second}}})
	learn(t, l, 0, 500*time.Millisecond, 1, at(500))
	if got := l.Snapshot().Classes[0].ServiceTime; got != 500*time.Millisecond {
		t.Fatalf("service time %v, want 500ms", got)
	}
	now := at(1000)
	_, queued, err := l.EnqueueAt(now, shed.Request{Deadline: now.Add(100 * time.Millisecond)}, shed.NewWaiter(func(*shed.Waiter) {}))
	wantReason(t, err, shed.ReasonDeadline)
	if queued || l.InFlight() != 0 {
		t.Fatalf("queued %v, in flight %d: the request touched the limiter", queued, l.InFlight())
	}
	// 250 ms is half the service time: still too late; 251 ms is not.
	_, err = l.TryAcquireAt(now, shed.Request{Deadline: now.Add(250 * time.Millisecond)})
	wantReason(t, err, shed.ReasonDeadline)
	p := mustAcquire(t, l, now, shed.Request{Deadline: now.Add(251 * time.Millisecond)})
	p.ReleaseAt(now.Add(time.Millisecond), shed.Ignored)
	if n := l.Snapshot().Classes[0].Rejected[shed.ReasonDeadline]; n != 2 {
		t.Fatalf("%d deadline rejections, want 2", n)
	}
}

// TestDeadlineMargin: the margin scales the service time; a negative one
// (zero, the default) leaves it out and stops estimating it.
func TestDeadlineMargin(t *testing.T) {
	for _, tc := range []struct {
		margin float64
		left   time.Duration
		late   bool
	}{
		{1, 499 * time.Millisecond, true},
		{1, 501 * time.Millisecond, false},
		{2, 999 * time.Millisecond, true},
		{0, time.Millisecond, false},
	} {
		l := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: tc.margin})
		learn(t, l, 0, 500*time.Millisecond, 1, at(500))
		now := at(1000)
		p, err := l.TryAcquireAt(now, shed.Request{Deadline: now.Add(tc.left)})
		if late := shed.ReasonOf(err) == shed.ReasonDeadline; late != tc.late {
			t.Errorf("margin %v, %v left: rejected %v (%v), want %v", tc.margin, tc.left, late, err, tc.late)
		}
		p.ReleaseAt(now, shed.Ignored)
		if st := l.Snapshot().Classes[0].ServiceTime; (tc.margin == 0) != (st == 0) {
			t.Errorf("margin %v: service time %v", tc.margin, st)
		}
	}
}

// TestPassedDeadlineNeverAdmitted: a request whose deadline has passed is
// rejected, by every entry point, before anything is known about the
// service time and with the service time turned off; a dry run admits it
// and reports the rejection. Before, TryAcquire and a request that did not
// need to queue ignored the deadline entirely.
func TestPassedDeadlineNeverAdmitted(t *testing.T) {
	clock := newFakeClock()
	l := mustNew(t, shed.Config{Limit: 10, Clock: clock.Now,
		Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Second}}})
	for _, dl := range []time.Time{t0, t0.Add(-time.Nanosecond), t0.Add(-time.Hour)} {
		_, err := l.TryAcquireAt(t0, shed.Request{Deadline: dl})
		wantReason(t, err, shed.ReasonDeadline)
		_, err = l.TryAcquire(shed.Request{Deadline: dl})
		wantReason(t, err, shed.ReasonDeadline)
		_, _, err = l.EnqueueAt(t0, shed.Request{Deadline: dl}, shed.NewWaiter(func(*shed.Waiter) {}))
		wantReason(t, err, shed.ReasonDeadline)
		_, err = l.Acquire(context.Background(), shed.Request{Deadline: dl})
		wantReason(t, err, shed.ReasonDeadline)
	}
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.Classes[0].Admitted != 0 || snap.Classes[0].Rejected[shed.ReasonDeadline] != 12 {
		t.Fatalf("snapshot %+v", snap.Classes[0])
	}
	// A context whose deadline passed is rejected for it too (on the wall
	// clock, which context deadlines use), unless it only bounded the wait
	// of a request whose own deadline is later.
	wall := mustNew(t, shed.Config{Limit: 10})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := wall.Acquire(ctx, shed.Request{})
	wantReason(t, err, shed.ReasonDeadline)
	if _, err := wall.Acquire(ctx, shed.Request{Deadline: time.Now().Add(time.Hour)}); err != context.DeadlineExceeded {
		t.Fatalf("a wait bound that ended: %v, want the context's error", err)
	}

	dry := mustNew(t, shed.Config{Limit: 10, DryRun: true})
	p, err := dry.TryAcquireAt(t0, shed.Request{Deadline: t0})
	if err != nil || p.DryRun() != shed.ReasonDeadline {
		t.Fatalf("dry run: %v, shadow %v", err, p.DryRun())
	}
	p.ReleaseAt(t0, shed.Ignored)
	if n := dry.Snapshot().Classes[0].Rejected[shed.ReasonDeadline]; n != 1 {
		t.Fatalf("dry run counted %d deadline rejections", n)
	}
}

// TestDrainingBeatsDeadline: while draining, every rejection says so.
func TestDrainingBeatsDeadline(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10})
	l.DrainAt(t0)
	_, err := l.TryAcquireAt(t0, shed.Request{Deadline: t0})
	wantReason(t, err, shed.ReasonDraining)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = l.Acquire(ctx, shed.Request{})
	wantReason(t, err, shed.ReasonDraining)
}

// TestServiceTimePerClassAndCost: each class has its own estimate, and
// ServiceTimePerCost scales it by each request's cost.
func TestServiceTimePerClassAndCost(t *testing.T) {
	classes := []shed.ClassConfig{{Name: "fast"}, {Name: "slow"}}
	l := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: 0.5, Classes: classes})
	learn(t, l, 0, 10*time.Millisecond, 1, at(100))
	learn(t, l, 1, time.Second, 1, at(1000))
	now := at(2000)
	p := mustAcquire(t, l, now, shed.Request{Class: 0, Deadline: now.Add(100 * time.Millisecond)})
	p.ReleaseAt(now, shed.Ignored)
	_, err := l.TryAcquireAt(now, shed.Request{Class: 1, Deadline: now.Add(100 * time.Millisecond)})
	wantReason(t, err, shed.ReasonDeadline)

	pc := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: 0.5, MaxCost: 1000, ServiceTimePerCost: true})
	p = mustAcquire(t, pc, at(0), shed.Request{Cost: 100})
	p.ReleaseAt(at(1000), shed.Success) // 10 ms per unit
	if st := pc.Snapshot().Classes[0].ServiceTime; st != 10*time.Millisecond {
		t.Fatalf("per-cost service time %v, want 10ms", st)
	}
	now = at(2000)
	p = mustAcquire(t, pc, now, shed.Request{Cost: 10, Deadline: now.Add(100 * time.Millisecond)}) // expects 100 ms
	p.ReleaseAt(now, shed.Ignored)
	_, err = pc.TryAcquireAt(now, shed.Request{Cost: 50, Deadline: now.Add(100 * time.Millisecond)}) // expects 500 ms
	wantReason(t, err, shed.ReasonDeadline)
}

// TestServiceTimeTracksTheMedian: with heavy-tailed service times the
// estimate settles near the median, far below the mean, so that slow
// outliers do not make the limiter refuse typical requests.
func TestServiceTimeTracksTheMedian(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: 0.5})
	rng := rand.New(rand.NewPCG(1, 2))
	var xs []float64
	now := t0
	for i := 0; i < 5000; i++ {
		d := time.Duration(float64(100*time.Millisecond) * math.Exp(1.5*rng.NormFloat64())) // log-normal, sigma 1.5
		p := mustAcquire(t, l, now, shed.Request{})
		now = now.Add(d)
		p.ReleaseAt(now, shed.Success)
		xs = append(xs, float64(d))
	}
	sort.Float64s(xs)
	median := xs[len(xs)/2]
	got := float64(l.Snapshot().Classes[0].ServiceTime)
	if got < median/1.5 || got > median*1.5 {
		t.Fatalf("estimate %v, median %v (mean is about 3x the median)", time.Duration(got), time.Duration(median))
	}
}

// TestDeadlineProbe: after a slowdown left the estimate above every
// caller's deadline, one request per estimated service time is admitted
// (and timed) as a probe once the class has refused a few, so that the
// estimate can come down again instead of shutting the class out for
// good; a probe that comes back fast replaces the stale estimate.
func TestDeadlineProbe(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 10, DeadlineMargin: 0.5})
	learn(t, l, 0, 4*time.Second, 1, at(4000)) // estimate 4 s, last sample at 4 s
	req := func(now time.Time) shed.Request { return shed.Request{Deadline: now.Add(time.Second)} }
	// Long after the last sample, but nothing refused yet: no probe.
	for i := 0; i < 3; i++ {
		_, err := l.TryAcquireAt(at(9000), req(at(9000)))
		wantReason(t, err, shed.ReasonDeadline)
	}
	now := at(10000)
	p, err := l.TryAcquireAt(now, req(now))
	if err != nil {
		t.Fatalf("no probe after three refusals and the estimated service time: %v", err)
	}
	// One probe at a time: the next requests are rejected, however many.
	for i := 0; i < 5; i++ {
		_, err = l.TryAcquireAt(now.Add(time.Second), req(now.Add(time.Second)))
		wantReason(t, err, shed.ReasonDeadline)
	}
	// A passed deadline never makes a probe.
	_, err = l.TryAcquireAt(at(60000), shed.Request{Deadline: at(60000)})
	wantReason(t, err, shed.ReasonDeadline)
	// The service is fast again: the probe's sample replaces the estimate.
	p.ReleaseAt(now.Add(50*time.Millisecond), shed.Success)
	if st := l.Snapshot().Classes[0].ServiceTime; st != 50*time.Millisecond {
		t.Fatalf("estimate after a fast probe %v, want 50ms", st)
	}
	now = now.Add(100 * time.Millisecond)
	p = mustAcquire(t, l, now, req(now))
	p.ReleaseAt(now, shed.Ignored)
}

// TestWaiterLeavesWhenItCanNoLongerFinish: a queued request stops waiting
// once too little time is left for its expected service time, not at its
// deadline, where it would have taken a slot it could not use.
func TestWaiterLeavesWhenItCanNoLongerFinish(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, DeadlineMargin: 0.5, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Minute}}})
	learn(t, l, 0, 200*time.Millisecond, 1, at(200))
	p := mustAcquire(t, l, at(1000), shed.Request{})
	w := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, err := l.EnqueueAt(at(1000), shed.Request{Deadline: at(2000)}, w); !queued {
		t.Fatalf("not queued: %v", err)
	}
	if want := at(1900); !w.Deadline().Equal(want) {
		t.Fatalf("waiter deadline %v, want %v (deadline less half of 200 ms)", w.Deadline(), want)
	}
	p.ReleaseAt(at(1950), shed.Success)
	if _, err := w.Result(); shed.ReasonOf(err) != shed.ReasonQueueTimeout {
		t.Fatalf("granted a slot it could not use: %v", err)
	}
}

// TestQueuedRequestCheckedAgainAtItsTurn: a queued request whose class's
// expected service time rose while it waited is not granted a slot it can
// no longer use. Its waiter deadline was set from the estimate when it was
// queued (none yet, here); at its turn the estimate says 800 ms and only
// 200 ms are left, so it leaves the queue (ReasonQueueTimeout) and the
// request behind it, with time enough, gets the slot.
func TestQueuedRequestCheckedAgainAtItsTurn(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 2, DeadlineMargin: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 5, MaxWait: time.Minute}}})
	p := mustAcquire(t, l, at(0), shed.Request{})
	held := mustAcquire(t, l, at(0), shed.Request{})
	defer held.ReleaseAt(at(900), shed.Ignored)
	short, long := shed.NewWaiter(func(*shed.Waiter) {}), shed.NewWaiter(func(*shed.Waiter) {})
	for _, q := range []struct {
		w        *shed.Waiter
		deadline time.Time
	}{{short, at(1000)}, {long, at(5000)}} {
		if _, queued, err := l.EnqueueAt(at(0), shed.Request{Deadline: q.deadline}, q.w); !queued {
			t.Fatalf("not queued: %v", err)
		}
	}
	p.ReleaseAt(at(800), shed.Success) // the first sample: 800 ms
	if got := l.Snapshot().Classes[0].ServiceTime; got != 800*time.Millisecond {
		t.Fatalf("service time %v, want 800ms", got)
	}
	if pr, err := short.Result(); shed.ReasonOf(err) != shed.ReasonQueueTimeout {
		pr.ReleaseAt(at(800), shed.Ignored)
		t.Fatalf("200 ms before its deadline, with 800 ms of work expected: got %v, want a queue timeout", err)
	}
	pr, err := long.Result()
	if err != nil || !pr.Valid() {
		t.Fatalf("the request with 4.2 s left: %v, want admitted", err)
	}
	pr.ReleaseAt(at(900), shed.Ignored)
}
