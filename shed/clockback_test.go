package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestClockStepBackHoldsNothing: when the clock goes back, the time-based
// state made at the later time must not stay in force until the clock has
// caught up with the step: a step back counts as no time passed. Each
// subtest marks the state at time T, steps back by an hour, reads the
// state once (which notices the step), then lets a little more than the
// state's own duration pass.
func TestClockStepBackHoldsNothing(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"protected demand", stepBackProtectedDemand},
		{"tenant shortfall", stepBackTenantShortfall},
		{"deadline probe", stepBackDeadlineProbe},
		{"queue deadline", stepBackQueueDeadline},
	} {
		t.Run(tt.name, tt.run)
	}
}

// The step back of TestClockStepBackHoldsNothing: from T to back, with
// holds of stepHold.
const stepHold = time.Second

var (
	stepT    = t0.Add(24 * time.Hour)
	stepBack = stepT.Add(-time.Hour)
)

func stepBackProtectedDemand(t *testing.T) {
	const hold = stepHold
	T, back := stepT, stepBack
	l := mustNew(t, shed.Config{Limit: 2, DemandHold: hold, Classes: []shed.ClassConfig{
		{Name: "hi", Protected: 0.5}, {Name: "lo"},
	}})
	lo := shed.Request{Class: 1}
	a := mustAcquire(t, l, T, lo)
	b := mustAcquire(t, l, T, lo)
	_, err := l.TryAcquireAt(T, shed.Request{Class: 0})
	wantReason(t, err, shed.ReasonLimit) // hi's demand holds its share until T+hold
	a.ReleaseAt(T, shed.Ignored)
	b.ReleaseAt(T, shed.Ignored)
	a = mustAcquire(t, l, back, lo)
	b, err = l.TryAcquireAt(back.Add(2*hold), lo)
	if err != nil {
		t.Fatalf("lo refused hi's share %v after the step back: %v", 2*hold, err)
	}
	a.ReleaseAt(back.Add(2*hold), shed.Ignored)
	b.ReleaseAt(back.Add(2*hold), shed.Ignored)
}

func stepBackTenantShortfall(t *testing.T) {
	const hold = stepHold
	T, back := stepT, stepBack
	l := mustNew(t, shed.Config{Limit: 6, DemandHold: hold})
	var bs []shed.Permit
	for range 5 {
		bs = append(bs, mustAcquire(t, l, T, shed.Request{Tenant: "b"}))
	}
	a := mustAcquire(t, l, T, shed.Request{Tenant: "a"})
	_, err := l.TryAcquireAt(T, shed.Request{Tenant: "a"})
	wantReason(t, err, shed.ReasonLimit) // a shortfall: contended until T+hold
	a.ReleaseAt(T, shed.Ignored)
	for _, p := range bs[1:] {
		p.ReleaseAt(T, shed.Ignored)
	}
	as := []shed.Permit{mustAcquire(t, l, back, shed.Request{Tenant: "a"})}
	later := back.Add(2 * hold)
	for range 3 {
		p, err := l.TryAcquireAt(later, shed.Request{Tenant: "a"})
		if err != nil {
			t.Fatalf("a held to its share %v after the step back, with room left: %v", 2*hold, err)
		}
		as = append(as, p)
	}
	for _, p := range append(as, bs[0]) {
		p.ReleaseAt(later, shed.Ignored)
	}
}

func stepBackDeadlineProbe(t *testing.T) {
	T, back := stepT, stepBack
	const svc = 10 * time.Second
	l := mustNew(t, shed.Config{Limit: 4, DeadlineMargin: 1})
	p := mustAcquire(t, l, T.Add(-svc), shed.Request{Deadline: T.Add(time.Hour)})
	p.ReleaseAt(T, shed.Success) // the estimate: svc, last sample at T
	short := func(now time.Time) shed.Request { return shed.Request{Deadline: now.Add(svc / 2)} }
	for range 4 {
		_, err := l.TryAcquireAt(back, short(back))
		wantReason(t, err, shed.ReasonDeadline)
	}
	later := back.Add(svc + time.Second)
	p, err := l.TryAcquireAt(later, short(later))
	if err != nil {
		t.Fatalf("no probe %v after the step back, with no sample since: %v", svc+time.Second, err)
	}
	p.ReleaseAt(later, shed.Ignored)
}

func stepBackQueueDeadline(t *testing.T) {
	const hold = stepHold
	T, back := stepT, stepBack
	l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 1, MaxWait: hold}}})
	held := mustAcquire(t, l, T, shed.Request{})
	var log waiterLog
	w := shed.NewWaiter(log.notify)
	if _, queued, err := l.EnqueueAt(T, shed.Request{}, w); !queued || err != nil {
		t.Fatalf("EnqueueAt: queued %v, %v", queued, err)
	}
	l.ExpireAt(back)
	l.ExpireAt(back.Add(2 * hold))
	got := log.take()
	if len(got) != 1 {
		t.Fatalf("the waiter is still queued %v after the step back (MaxWait %v)", 2*hold, hold)
	}
	_, err := got[0].Result()
	wantReason(t, err, shed.ReasonQueueTimeout)
	if wait := back.Add(2 * hold).Sub(w.Deadline()); wait < 0 || wait > hold {
		t.Errorf("deadline %v, expired at %v", w.Deadline(), back.Add(2*hold))
	}
	held.ReleaseAt(back.Add(2*hold), shed.Ignored)
}

// TestClockStepBackKeepsSampling: the wall-clock API re-estimates the
// admission rate every 100 ms to decide which permits it times. After a
// step back, the rate must be measured again from the step, not once the
// clock has caught up: until then the sampling chosen under a past burst
// would stay in force, however quiet the traffic became.
func TestClockStepBackKeepsSampling(t *testing.T) {
	clk := newFakeClock()
	var timed, released int
	l := mustNew(t, shed.Config{Limit: 20000, MaxSamplesPerSecond: 1000, Clock: clk.Now,
		Observer: shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.EventReleased {
				released++
				if e.Timed {
					timed++
				}
			}
		})})
	// A burst of 50,000/s: about one admission in 64 is timed after it.
	clk.Advance(200 * time.Millisecond)
	burst := make([]shed.Permit, 10000)
	for i := range burst {
		var err error
		if burst[i], err = l.TryAcquire(shed.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range burst {
		burst[i].Release(shed.Success)
	}
	// An hour back, 100 admissions a second: well under the cap, so
	// after a few windows every admission is timed again.
	clk.Advance(-time.Hour)
	for i := range 300 {
		if i == 250 {
			timed, released = 0, 0
		}
		clk.Advance(10 * time.Millisecond)
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			t.Fatal(err)
		}
		p.Release(shed.Success)
	}
	if timed != released {
		t.Errorf("%d of the last %d permits timed at 100/s, MaxSamplesPerSecond 1000", timed, released)
	}
}
