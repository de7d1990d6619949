package shed_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// probingSource is a fakeSource that may close: Probe lets through the
// requests it is told to, and counts the calls.
type probingSource struct {
	*fakeSource
	allow atomic.Int64 // probes still to grant
	calls atomic.Int64
}

func (s *probingSource) Probe(time.Time) bool {
	s.calls.Add(1)
	for {
		n := s.allow.Load()
		if n <= 0 {
			return false
		}
		if s.allow.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func TestClosedLimitAdmitsOnlyProbes(t *testing.T) {
	src := &probingSource{fakeSource: newFakeSource(2)}
	l, err := shed.New(shed.Config{Source: src, Classes: []shed.ClassConfig{{Name: "all", QueueDepth: 4, MaxWait: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.TryAcquireAt(at(0), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	src.Set(0)
	if got := l.Limit(); got != 0 {
		t.Fatalf("Limit() = %d while the source is closed, want 0", got)
	}
	if _, err := l.TryAcquireAt(at(1), shed.Request{}); !errors.Is(err, shed.ErrRejected) {
		t.Fatalf("closed, no probe: err = %v, want a rejection", err)
	}
	// A waiter is not granted while the limit is closed, even when the
	// work in flight ends.
	var granted atomic.Bool
	w := shed.NewWaiter(func(w *shed.Waiter) {
		if p, err := w.Result(); err == nil {
			granted.Store(true)
			p.ReleaseAt(at(3), shed.Success)
		}
	})
	if _, queued, err := l.EnqueueAt(at(2), shed.Request{}, w); err != nil || !queued {
		t.Fatalf("EnqueueAt: queued %v, err %v; want queued", queued, err)
	}
	held.ReleaseAt(at(3), shed.Dropped)
	if granted.Load() {
		t.Fatal("a waiter was granted capacity while the limit was closed")
	}
	l.CancelAt(at(4), w)
	// The probe is admitted beyond the work in flight, and only it.
	src.allow.Store(1)
	other, err := l.TryAcquireAt(at(5), shed.Request{})
	if err != nil {
		t.Fatalf("the probe was rejected: %v", err)
	}
	if _, err := l.TryAcquireAt(at(6), shed.Request{}); !errors.Is(err, shed.ErrRejected) {
		t.Fatalf("a second request passed a closed limit: err = %v", err)
	}
	src.allow.Store(1)
	probe, err := l.TryAcquireAt(at(7), shed.Request{})
	if err != nil {
		t.Fatalf("a probe with work in flight was rejected: %v", err)
	}
	if got := l.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d, want 2", got)
	}
	other.ReleaseAt(at(8), shed.Success)
	probe.ReleaseAt(at(8), shed.Success)
	// Reopened, the limit admits as usual and Probe is no longer asked.
	src.Set(1)
	calls := src.calls.Load()
	p, err := l.TryAcquireAt(at(9), shed.Request{})
	if err != nil {
		t.Fatalf("reopened: %v", err)
	}
	p.ReleaseAt(at(10), shed.Success)
	if src.calls.Load() != calls {
		t.Fatal("Probe was called while the limit was open")
	}
}

// The wall-clock API reads the clock for a probe, and a closed limit's
// rejection has a finite Retry-After hint.
func TestClosedLimitWallClock(t *testing.T) {
	src := &probingSource{fakeSource: newFakeSource(1)}
	clk := newFakeClock()
	l, err := shed.New(shed.Config{Source: src, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	src.Set(0)
	_, err = l.TryAcquire(shed.Request{})
	var rej *shed.Rejection
	if !errors.As(err, &rej) || rej.RetryAfter < 0 {
		t.Fatalf("closed: err = %v, want a rejection with a hint >= 0", err)
	}
	src.allow.Store(1)
	p, err := l.Acquire(context.Background(), shed.Request{})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	p.Release(shed.Success)
}

// A source that is not a Prober and reports 0 keeps a limit of 1.
func TestZeroLimitWithoutProber(t *testing.T) {
	src := newFakeSource(1)
	l, err := shed.New(shed.Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	src.Set(0)
	if got := l.Limit(); got != 1 {
		t.Fatalf("Limit() = %d, want 1", got)
	}
	p, err := l.TryAcquireAt(at(0), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAt(at(0), shed.Request{}); err == nil {
		t.Fatal("a second request passed a limit of 1")
	}
	p.ReleaseAt(at(1), shed.Success)
}

// A probe that the source granted is admitted whatever its class or
// tenant: while the limit is closed nothing else is admitted, so a probe
// refused by the class rules (a higher class's demand under Strict,
// another class's protected share) or by its tenant's share spends the
// probe interval on nobody, and the limit stays closed an interval longer
// for every class and tenant.
func TestClosedLimitProbeIsNotRefusedByShares(t *testing.T) {
	two := []shed.ClassConfig{{Name: "hi"}, {Name: "lo"}}
	cases := []struct {
		name    string
		strict  bool
		classes []shed.ClassConfig
		held    []shed.Request // in flight at the close
		other   shed.Request   // rejected while closed: unmet demand
		probe   shed.Request
	}{
		{name: "strict, higher class rejected", strict: true, classes: two,
			other: shed.Request{Class: 0}, probe: shed.Request{Class: 1}},
		{name: "higher class's protected share", classes: []shed.ClassConfig{{Name: "hi", Protected: 0.5}, {Name: "lo"}},
			held: []shed.Request{{Class: 1}}, other: shed.Request{Class: 0}, probe: shed.Request{Class: 1}},
		{name: "tenant over its share",
			held:  []shed.Request{{Tenant: "a"}, {Tenant: "a"}, {Tenant: "a"}, {Tenant: "b"}},
			other: shed.Request{Tenant: "b"}, probe: shed.Request{Tenant: "a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := &probingSource{fakeSource: newFakeSource(4)}
			l := mustNew(t, shed.Config{Source: src, Strict: tc.strict, Classes: tc.classes})
			for _, r := range tc.held {
				mustAcquire(t, l, at(0), r)
			}
			src.Set(0)
			_, err := l.TryAcquireAt(at(1), tc.other)
			wantReason(t, err, shed.ReasonLimit)
			src.allow.Store(1)
			p, err := l.TryAcquireAt(at(2), tc.probe)
			if err != nil {
				t.Fatalf("the probe was claimed (probes left %d) and then refused: %v", src.allow.Load(), err)
			}
			if got := l.InFlight(); got != len(tc.held)+1 {
				t.Errorf("InFlight = %d, want %d", got, len(tc.held)+1)
			}
			p.ReleaseAt(at(3), shed.Success)
			if got := l.InFlight(); got != len(tc.held) {
				t.Errorf("after the probe's release: InFlight = %d, want %d", got, len(tc.held))
			}
		})
	}
}

// A request that cannot fit the cost budget does not take the probe: it
// would be rejected anyway, and the probe interval would be spent on
// nobody, while a cheaper request in the same interval fits.
func TestClosedLimitProbeNotSpentOverBudget(t *testing.T) {
	src := &probingSource{fakeSource: newFakeSource(4)}
	l := mustNew(t, shed.Config{Source: src, MaxCost: 10})
	mustAcquire(t, l, at(0), shed.Request{Cost: 8})
	src.Set(0)
	src.allow.Store(1)
	_, err := l.TryAcquireAt(at(1), shed.Request{Cost: 5})
	wantReason(t, err, shed.ReasonLimit)
	p, err := l.TryAcquireAt(at(2), shed.Request{Cost: 2})
	if err != nil {
		t.Fatalf("a request that fits the budget found the probe spent (probes left %d): %v", src.allow.Load(), err)
	}
	p.ReleaseAt(at(3), shed.Success)
}
