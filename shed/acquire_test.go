package shed_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shedkit/shedkit/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func queued(depth int, wait time.Duration) []shed.ClassConfig {
	return []shed.ClassConfig{{Name: "q", QueueDepth: depth, MaxWait: wait}}
}

// waitFor polls cond for up to 5 s: used only where another goroutine must
// reach a blocking point first. Nothing here asserts on timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAcquireWaitsForASlot(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: queued(5, time.Minute)})
	p, err := l.Acquire(context.Background(), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		q, err := l.Acquire(context.Background(), shed.Request{})
		if err == nil {
			q.Release(shed.Success)
		}
		got <- err
	}()
	waitFor(t, "the second Acquire to queue", func() bool { return l.Snapshot().Queued == 1 })
	p.Release(shed.Success)
	if err := <-got; err != nil {
		t.Fatalf("queued Acquire: %v", err)
	}
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d", l.InFlight())
	}
}

func TestAcquireCancelled(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: queued(5, time.Minute)})
	p, _ := l.Acquire(context.Background(), shed.Request{})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, shed.Request{})
		got <- err
	}()
	waitFor(t, "Acquire to queue", func() bool { return l.Snapshot().Queued == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v", err)
	}
	snap := l.Snapshot()
	if snap.Queued != 0 || snap.Classes[0].Cancelled != 1 {
		t.Fatalf("snapshot after cancel %+v", snap)
	}
	p.Release(shed.Success)
	if l.InFlight() != 0 {
		t.Fatal("capacity lost")
	}
	// An already-cancelled context never acquires.
	if _, err := l.Acquire(ctx, shed.Request{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a done context: %v", err)
	}
}

func TestAcquireTimesOutInTheQueue(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: queued(5, 20*time.Millisecond)})
	p, _ := l.Acquire(context.Background(), shed.Request{})
	defer p.Release(shed.Success)
	_, err := l.Acquire(context.Background(), shed.Request{})
	wantReason(t, err, shed.ReasonQueueTimeout)
	if l.Snapshot().Queued != 0 {
		t.Fatal("timed-out waiter still queued")
	}
}

func TestAcquireWithFakeClockStillTimesOut(t *testing.T) {
	clk := newFakeClock() // never advances
	l := mustNew(t, shed.Config{Limit: 1, Clock: clk.Now, Classes: queued(5, 10*time.Millisecond)})
	p, _ := l.Acquire(context.Background(), shed.Request{})
	defer p.Release(shed.Success)
	_, err := l.Acquire(context.Background(), shed.Request{})
	wantReason(t, err, shed.ReasonQueueTimeout)
}

func TestAcquireWithoutQueueRejectsAtOnce(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1})
	p, _ := l.Acquire(context.Background(), shed.Request{})
	defer p.Release(shed.Success)
	_, err := l.Acquire(context.Background(), shed.Request{})
	wantReason(t, err, shed.ReasonLimit)
}

func TestAcquireUsesTheContextDeadline(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 1, Classes: queued(5, time.Minute)})
	// Teach the limiter that work takes a second.
	for i := 0; i < 20; i++ {
		q := mustAcquire(t, l, at(0), shed.Request{})
		q.ReleaseAt(at(1000), shed.Success)
	}
	p, _ := l.Acquire(context.Background(), shed.Request{})
	defer p.Release(shed.Success)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx, shed.Request{})
	wantReason(t, err, shed.ReasonDeadline)
}

func TestDrainWaitsForInFlightWork(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 3})
	p, _ := l.Acquire(context.Background(), shed.Request{})
	done := make(chan shed.DrainReport, 1)
	go func() {
		rep, err := l.Drain(context.Background())
		if err != nil {
			t.Errorf("Drain: %v", err)
		}
		done <- rep
	}()
	waitFor(t, "draining to start", func() bool { return l.Snapshot().Draining })
	p.Release(shed.Success)
	if rep := <-done; rep.InFlight != 0 || rep.Classes != nil {
		t.Fatalf("report %+v", rep)
	}
}

func TestDrainReportsWhatWasCut(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 3, Classes: []shed.ClassConfig{{Name: "i"}, {Name: "b"}}})
	p, _ := l.Acquire(context.Background(), shed.Request{Class: 1, Cost: 7})
	defer p.Release(shed.Ignored)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	rep, err := l.Drain(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain err %v", err)
	}
	if rep.InFlight != 1 || rep.InFlightCost != 7 || rep.Classes[1].InFlight != 1 || rep.Classes[1].Name != "b" {
		t.Fatalf("report %+v", rep)
	}
	_, err = l.Acquire(context.Background(), shed.Request{})
	wantReason(t, err, shed.ReasonDraining)
}

func TestLeakedPermitsAreReclaimed(t *testing.T) {
	leaks := make(chan shed.Leak, 4)
	l := mustNew(t, shed.Config{Limit: 2, TrackLeaks: true, OnLeak: func(k shed.Leak) { leaks <- k }})
	func() {
		p, err := l.Acquire(context.Background(), shed.Request{Cost: 3})
		if err != nil {
			t.Fatal(err)
		}
		_ = p // dropped without Release: a bug the tracker must find
	}()
	var leak shed.Leak
	deadline := time.Now().Add(10 * time.Second)
	for got := false; !got; {
		runtime.GC()
		select {
		case leak = <-leaks:
			got = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the leaked permit was never reported")
			}
		}
	}
	if leak.Cost != 3 || leak.ClassName != "default" || len(leak.Stack) == 0 {
		t.Fatalf("leak report %+v", leak)
	}
	found := false
	for _, f := range leak.Stack {
		if f.Function == "github.com/shedkit/shedkit/shed_test.TestLeakedPermitsAreReclaimed.func2" {
			found = true
		}
	}
	if !found {
		t.Errorf("the leak's stack does not name the acquiring function: %+v", leak.Stack)
	}
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.Classes[0].Leaked != 1 {
		t.Fatalf("after the leak: %+v", snap)
	}
}

func TestTrackedCopiesReleaseOnce(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 5, TrackLeaks: true})
	a, _ := l.TryAcquire(shed.Request{})
	b, _ := l.TryAcquire(shed.Request{})
	c := a // a copy: with tracking, releasing both frees one slot
	c.Release(shed.Success)
	a.Release(shed.Success)
	if l.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", l.InFlight())
	}
	if err := b.Reconcile(4); err != nil || b.Cost() != 4 {
		t.Fatalf("reconcile a tracked permit: %v", err)
	}
	b.Release(shed.Success)
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.InFlightCost != 0 {
		t.Fatalf("%+v", snap)
	}
}
