package shed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// probeSvc is the stale service-time estimate of the probe tests.
const probeSvc = 10 * time.Second

// probeLimit is the limit of the probe tests: high enough that the
// expected queue wait (the service time over the limit) leaves a short
// request time to queue.
const probeLimit = 10

// shutOutClass returns a limiter (one queued class with maxWait) whose
// estimate is probeSvc from one sample long ago, whose class has refused
// enough requests for their deadline to earn a probe, and which is full:
// the permits returned hold every slot.
func shutOutClass(t *testing.T, clk *fakeClock, maxWait time.Duration, margin float64) (*shed.Limiter, heldPermits) {
	t.Helper()
	l := mustNew(t, shed.Config{
		Limit: probeLimit, DeadlineMargin: margin, Clock: clk.Now,
		Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 4, MaxWait: maxWait}},
	})
	p := mustAcquire(t, l, clk.Now(), shed.Request{})
	clk.Advance(probeSvc)
	p.ReleaseAt(clk.Now(), shed.Success)
	clk.Advance(time.Minute)
	for range 3 {
		_, err := l.TryAcquireAt(clk.Now(), shortRequest(clk))
		wantReason(t, err, shed.ReasonDeadline)
	}
	held := make(heldPermits, probeLimit)
	for i := range held {
		held[i] = mustAcquire(t, l, clk.Now(), shed.Request{})
	}
	return l, held
}

// heldPermits fill a limiter.
type heldPermits []shed.Permit

// ReleaseAt releases them all at now, measuring nothing.
func (h heldPermits) ReleaseAt(now time.Time, o shed.Outcome) {
	for i := range h {
		h[i].ReleaseAt(now, o)
	}
}

// shortRequest has half the estimated service time left: refused by the
// estimate alone, so only a probe is let through.
func shortRequest(clk *fakeClock) shed.Request {
	return shed.Request{Deadline: clk.Now().Add(probeSvc / 2)}
}

// shutOutFor sends a short request every tenth of the service time until
// one is admitted (released at once, measuring nothing) and returns how
// long the class was shut out, in virtual time; at most limit.
func shutOutFor(t *testing.T, l *shed.Limiter, clk *fakeClock, limit time.Duration) time.Duration {
	t.Helper()
	var waited time.Duration
	for ; waited <= limit; waited += probeSvc / 10 {
		p, err := l.TryAcquireAt(clk.Now(), shortRequest(clk))
		if err == nil {
			p.ReleaseAt(clk.Now(), shed.Ignored)
			return waited
		}
		wantReason(t, err, shed.ReasonDeadline)
		clk.Advance(probeSvc / 10)
	}
	return waited
}

// queuedProbe is a probe waiting in the queue, by either API.
type queuedProbe struct {
	w      *shed.Waiter       // EnqueueAt's waiter; nil for Acquire
	cancel context.CancelFunc // Acquire's
	result func() (shed.Permit, error)
}

// enqueueShort queues a short request (which claims the probe) with
// EnqueueAt, or with Acquire when blocking is set.
func enqueueShort(t *testing.T, l *shed.Limiter, clk *fakeClock, blocking bool) queuedProbe {
	t.Helper()
	if !blocking {
		done := make(chan *shed.Waiter, 1)
		w := shed.NewWaiter(func(w *shed.Waiter) { done <- w })
		if _, queued, err := l.EnqueueAt(clk.Now(), shortRequest(clk), w); !queued {
			t.Fatalf("the probe was not queued: %v", err)
		}
		return queuedProbe{w: w, result: func() (shed.Permit, error) { return (<-done).Result() }}
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := acquireUntilQueued(ctx, l, shortRequest(clk))
	if l.Snapshot().Queued == 0 {
		p, err := result()
		t.Fatalf("the probe was not queued: permit %v, error %v", p.Valid(), err)
	}
	return queuedProbe{cancel: cancel, result: result}
}

// TestQueuedProbeThatLeavesIsGivenBack: a probe that queued and left the
// queue without being admitted measured nothing, so it is given back as a
// rejected probe is: the class's next request may be the probe at once.
// It was kept: the class stayed shut out until a whole service time after
// the claim (and probeAfter more deadline refusals), however early the
// probe left the queue.
func TestQueuedProbeThatLeavesIsGivenBack(t *testing.T) {
	for _, tt := range []struct {
		name     string
		blocking bool
		maxWait  time.Duration
		wait     time.Duration // before the probe leaves
		leave    func(l *shed.Limiter, clk *fakeClock, q queuedProbe)
		want     error // the probe's outcome
	}{
		{"max_wait", false, time.Second, time.Second, expire, reasonErr(shed.ReasonQueueTimeout)},
		{"deadline", false, time.Hour, probeSvc / 2, expire, reasonErr(shed.ReasonQueueTimeout)},
		{"cancel", false, time.Hour, time.Second, cancelAt, nil},
		{"acquire_deadline", true, time.Hour, probeSvc / 2, expire, reasonErr(shed.ReasonQueueTimeout)},
		{"acquire_cancel", true, time.Hour, time.Second, cancelCtx, context.Canceled},
		{"drain", false, time.Hour, time.Second, drain, reasonErr(shed.ReasonDraining)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			l, held := shutOutClass(t, clk, tt.maxWait, 1)
			q := enqueueShort(t, l, clk, tt.blocking)
			clk.Advance(tt.wait)
			tt.leave(l, clk, q)
			if tt.want != nil {
				if _, err := q.result(); !sameOutcome(err, tt.want) {
					t.Fatalf("the probe left the queue with %v, want %v", err, tt.want)
				}
			}
			held.ReleaseAt(clk.Now(), shed.Ignored)
			if tt.name == "drain" {
				// Nothing is admitted any more; the claim is what must
				// not be left held.
				if shed.ProbeHeld(l, 0) {
					t.Fatalf("the probe rejected as draining still holds its class's claim")
				}
				return
			}
			if d := shutOutFor(t, l, clk, 2*probeSvc); d != 0 {
				t.Fatalf("the probe left the queue %v after its claim; the class was then shut out for %v more, want 0 (the probe given back)", tt.wait, d)
			}
		})
	}
}

func expire(l *shed.Limiter, clk *fakeClock, _ queuedProbe) { l.ExpireAt(clk.Now()) }

func cancelAt(l *shed.Limiter, clk *fakeClock, q queuedProbe) {
	if !l.CancelAt(clk.Now(), q.w) {
		panic("the probe was no longer queued")
	}
}

func cancelCtx(_ *shed.Limiter, _ *fakeClock, q queuedProbe) { q.cancel() }

func drain(l *shed.Limiter, clk *fakeClock, _ queuedProbe) { l.DrainAt(clk.Now()) }

func reasonErr(r shed.Reason) error { return &shed.Rejection{Reason: r} }

// sameOutcome compares a rejection by its reason, anything else by identity.
func sameOutcome(err, want error) bool {
	var r *shed.Rejection
	if errors.As(want, &r) {
		return shed.ReasonOf(err) == r.Reason
	}
	return errors.Is(err, want)
}

// TestGrantedProbeKeepsItsClaim: a probe admitted from the queue is the
// class's probe until its sample comes; the class's next short request is
// refused meanwhile. A probe released as Ignored keeps its claim too: the
// limiter cannot tell a client that gave up before any work from one that
// gave up because the service really is that slow, and giving the latter
// back would keep a probe running all the time.
func TestGrantedProbeKeepsItsClaim(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		clk := newFakeClock()
		l, held := shutOutClass(t, clk, time.Hour, 1)
		q := enqueueShort(t, l, clk, blocking)
		clk.Advance(time.Second)
		held.ReleaseAt(clk.Now(), shed.Ignored)
		probe, err := q.result()
		if err != nil {
			t.Fatalf("blocking %v: the queued probe: %v", blocking, err)
		}
		_, err = l.TryAcquireAt(clk.Now(), shortRequest(clk))
		wantReason(t, err, shed.ReasonDeadline)
		probe.ReleaseAt(clk.Now(), shed.Ignored)
		_, err = l.TryAcquireAt(clk.Now(), shortRequest(clk))
		wantReason(t, err, shed.ReasonDeadline)
	}
}

// TestOlderQueuedProbeLeavesNewerClaim: with a margin above 1 a probe may
// wait longer than a service time, long enough for its class to claim
// another probe. The older one leaving the queue gives back its own claim
// only, never the newer one's, which would let a third request be a probe
// while the second still waits.
func TestOlderQueuedProbeLeavesNewerClaim(t *testing.T) {
	const margin = 3
	clk := newFakeClock()
	l, held := shutOutClass(t, clk, time.Hour, margin)
	defer held.ReleaseAt(clk.Now(), shed.Ignored)
	long := func() shed.Request { return shed.Request{Deadline: clk.Now().Add(2 * probeSvc)} }
	first := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, err := l.EnqueueAt(clk.Now(), long(), first); !queued {
		t.Fatalf("the first probe was not queued: %v", err)
	}
	// A service time later, after more refusals, the second probe.
	clk.Advance(probeSvc)
	for range 3 {
		_, err := l.TryAcquireAt(clk.Now(), long())
		wantReason(t, err, shed.ReasonDeadline)
	}
	second := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, err := l.EnqueueAt(clk.Now(), long(), second); !queued {
		t.Fatalf("the second probe was not queued: %v", err)
	}
	l.CancelAt(clk.Now(), first)
	if _, _, err := l.EnqueueAt(clk.Now(), long(), shed.NewWaiter(func(*shed.Waiter) {})); shed.ReasonOf(err) != shed.ReasonDeadline {
		t.Fatalf("a third request while the second probe waits: %v, want a deadline rejection", err)
	}
}
