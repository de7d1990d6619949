package main

import (
	"sync"
	"testing"
	"time"
)

// fakePS is a psServer on a fake clock: tick moves the clock and fires the
// timer when it is due, as the real one would.
type fakePS struct {
	*psServer
	t, due time.Duration // due < 0: not armed
}

func newFakePS(capacity int) *fakePS {
	f := &fakePS{due: -1}
	f.psServer = &psServer{capacity: capacity, now: func() time.Duration { return f.t }, arm: func(d time.Duration) { f.due = f.t + d }}
	return f
}

// runUntil advances the clock timer by timer up to t.
func (f *fakePS) runUntil(t time.Duration) {
	for f.due >= 0 && f.due <= t {
		f.t, f.due = f.due, -1
		f.fire()
	}
	f.t = t
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestPSServerSharesCapacity: on 1 worker, a 100 ms request alone takes
// 100 ms; two 100 ms requests together take 200 ms each; a 10 ms request
// arriving at 50 ms beside a 100 ms one takes 20 ms, and delays the long
// one by 10 ms.
func TestPSServerSharesCapacity(t *testing.T) {
	ms := time.Millisecond
	f := newFakePS(1)
	a := f.serve(100 * ms)
	f.runUntil(99 * ms)
	if isDone(a) {
		t.Fatal("done before its work")
	}
	f.runUntil(101 * ms)
	if !isDone(a) {
		t.Fatal("not done after its work alone")
	}

	f = newFakePS(1)
	a, b := f.serve(100*ms), f.serve(100*ms)
	f.runUntil(199 * ms)
	if isDone(a) || isDone(b) {
		t.Fatal("two requests sharing a worker finished before 200ms")
	}
	f.runUntil(201 * ms)
	if !isDone(a) || !isDone(b) {
		t.Fatal("two requests sharing a worker not done at 200ms")
	}

	f = newFakePS(1)
	long := f.serve(100 * ms)
	f.runUntil(50 * ms)
	short := f.serve(10 * ms)
	f.runUntil(69 * ms)
	if isDone(short) {
		t.Fatal("the short request finished before 20ms")
	}
	f.runUntil(71 * ms)
	if !isDone(short) {
		t.Fatal("the short request not done after 20ms")
	}
	f.runUntil(109 * ms)
	if isDone(long) {
		t.Fatal("the long request was not delayed by the short one")
	}
	f.runUntil(111 * ms)
	if !isDone(long) || f.inFlight() != 0 {
		t.Fatalf("the long request not done at 110ms (%d in flight)", f.inFlight())
	}
}

// TestPSServerBelowCapacity: up to capacity requests run at full speed.
func TestPSServerBelowCapacity(t *testing.T) {
	f := newFakePS(4)
	var cs []<-chan struct{}
	for i := range 4 {
		cs = append(cs, f.serve(time.Duration(i+1)*10*time.Millisecond))
	}
	f.runUntil(40*time.Millisecond + time.Microsecond)
	for i, c := range cs {
		if !isDone(c) {
			t.Errorf("request %d (%dms) not done at 40ms", i, 10*(i+1))
		}
	}
	// Eight requests of 10ms on 4 workers: each runs at half speed.
	for range 8 {
		cs = append(cs[:0], f.serve(10*time.Millisecond))
	}
	f.runUntil(f.t + 19*time.Millisecond)
	if f.inFlight() != 8 {
		t.Errorf("%d in flight at 19ms, want 8", f.inFlight())
	}
	f.runUntil(f.t + 2*time.Millisecond)
	if f.inFlight() != 0 {
		t.Errorf("%d in flight at 21ms, want 0", f.inFlight())
	}
}

// TestPSServerRealTime: on the real clock, 20 requests of 20 ms on 10
// workers take about 40 ms each (bounded loosely: the machine is shared).
func TestPSServerRealTime(t *testing.T) {
	s := newPSServer(10)
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		c := s.serve(20 * time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-c
		}()
	}
	wg.Wait()
	if d := time.Since(start); d < 39*time.Millisecond || d > 2*time.Second {
		t.Errorf("20 x 20ms on 10 workers took %v, want about 40ms", d)
	}
}
