package shed_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// t0 is the start of virtual time in these tests.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// fakeClock is a settable clock for the wall-clock API.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fakeSource is a settable LimitSource that records what it observes.
type fakeSource struct {
	limit   atomic.Int64
	mu      sync.Mutex
	samples []shed.Sample
}

func newFakeSource(limit int) *fakeSource {
	s := &fakeSource{}
	s.limit.Store(int64(limit))
	return s
}

func (s *fakeSource) Limit() int { return int(s.limit.Load()) }
func (s *fakeSource) Set(n int)  { s.limit.Store(int64(n)) }

func (s *fakeSource) Observe(x shed.Sample) {
	s.mu.Lock()
	s.samples = append(s.samples, x)
	s.mu.Unlock()
}

func (s *fakeSource) Samples() []shed.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]shed.Sample(nil), s.samples...)
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []shed.Event
}

func (r *recorder) Observe(e shed.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) Kinds() []shed.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var k []shed.EventKind
	for _, e := range r.events {
		k = append(k, e.Kind)
	}
	return k
}

func mustNew(t testing.TB, cfg shed.Config) *shed.Limiter {
	t.Helper()
	l, err := shed.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func mustAcquire(t testing.TB, l *shed.Limiter, now time.Time, req shed.Request) shed.Permit {
	t.Helper()
	p, err := l.TryAcquireAt(now, req)
	if err != nil {
		t.Fatalf("TryAcquireAt(%v, %+v): %v", now, req, err)
	}
	return p
}

func wantReason(t testing.TB, err error, want shed.Reason) {
	t.Helper()
	if got := shed.ReasonOf(err); got != want {
		t.Fatalf("rejection reason = %v (err %v), want %v", got, err, want)
	}
}

// waiterLog collects the outcomes delivered to waiters, in order.
type waiterLog struct {
	mu  sync.Mutex
	got []*shed.Waiter
}

func (w *waiterLog) notify(x *shed.Waiter) {
	w.mu.Lock()
	w.got = append(w.got, x)
	w.mu.Unlock()
}

func (w *waiterLog) take() []*shed.Waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.got
	w.got = nil
	return g
}
