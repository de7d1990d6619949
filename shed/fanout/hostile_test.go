package fanout_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// runBounded runs f and fails the test if it has not returned within a
// generous bound: the defects it guards against are hangs.
func runBounded(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: it waits for a result that never comes")
	}
}

// TestReleasePanicReturnedAsError: an Observer that panics as a permit is
// released (shed says the panic goes to the caller of Release) must not
// crash the process from a worker goroutine the caller cannot recover:
// the panic is the item's error, and the capacity is given back. Before,
// the panic escaped on the worker and killed the test binary.
func TestReleasePanicReturnedAsError(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4, Observer: shed.ObserverFunc(func(e shed.Event) {
		if e.Kind == shed.EventReleased {
			panic("observer broke")
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	var got []fanout.Result[int]
	runBounded(t, func() {
		err = fanout.RunSlice(t.Context(), []int{1, 2, 3}, func(ctx context.Context, in int) (int, error) {
			return in, nil
		}, fanout.Config[int]{Bound: 2, Limiter: l}, func(r fanout.Result[int]) error {
			got = append(got, r)
			return nil
		})
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("%d results, want 3", len(got))
	}
	for _, r := range got {
		var pe *fanout.PanicError
		if !errors.As(r.Err, &pe) || pe.Value != "observer broke" {
			t.Errorf("item %d: error %v, want the Observer's panic as a *PanicError", r.Index, r.Err)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight after Run = %d, want 0", n)
	}
}

// TestOutcomeGoexitReleasesPermit: an Outcome that calls runtime.Goexit
// (t.FailNow in a test's Outcome) ends its worker as a task's Goexit does:
// the item is reported with ErrGoexit, the permit is released and Run
// returns. Before, the result was never sent: Run hung and the permit
// stayed in flight.
func TestOutcomeGoexitReleasesPermit(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runGoexitOutcome(t, l, 2) {
		if !errors.Is(r.Err, fanout.ErrGoexit) {
			t.Errorf("item %d: error %v, want ErrGoexit", r.Index, r.Err)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight after Run = %d, want 0: a permit was kept", n)
	}
}

// TestOwnPermitWhileDraining: a request admitted before the limiter
// started draining is work in flight, which a drain lets finish; its
// items run on its own permit one at a time. Before, an item that found
// the own permit busy failed with ReasonDraining while its siblings that
// found it free succeeded: which items of the request failed depended on
// timing.
func TestOwnPermitWhileDraining(t *testing.T) {
	refused := make(chan struct{}, 1)
	l, err := shed.New(shed.Config{Limit: 4, Observer: shed.ObserverFunc(func(e shed.Event) {
		if e.Kind == shed.EventRejected && e.Reason == shed.ReasonDraining {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	own, err := l.TryAcquire(shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release(shed.Ignored)
	l.DrainAt(time.Now())
	ctx := shed.ContextWithPermit(t.Context(), &own)
	running := make(chan struct{})
	items := func(yield func(int) bool) {
		if yield(0) {
			<-running // item 1 comes once item 0 runs on the own permit
			yield(1)
		}
	}
	errs := map[int]error{}
	err = fanout.Run(ctx, items, func(ctx context.Context, in int) (int, error) {
		if in == 0 {
			close(running)
			<-refused // item 1 asked the limiter while item 0 held the own permit
		}
		return in, nil
	}, fanout.Config[int]{Bound: 2, Limiter: l}, func(r fanout.Result[int]) error {
		errs[r.Index] = r.Err
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v: want both items run on the request's own permit", errs)
	}
}

// TestOwnPermitOverTenantShare: a tenant over its share of a contended
// class may not take more of the limiter, but its request's own permit is
// capacity the tenant holds already: an item refused with
// ReasonTenantShare waits for it, as one refused for the limit does.
// Before, such an item failed while its siblings ran.
func TestOwnPermitOverTenantShare(t *testing.T) {
	refused := make(chan struct{})
	l, err := shed.New(shed.Config{Limit: 4, Observer: shed.ObserverFunc(func(e shed.Event) {
		if e.Kind == shed.EventRejected && e.Reason == shed.ReasonTenantShare {
			close(refused)
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.TryAcquire(shed.Request{Tenant: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(shed.Ignored)
	own, err := l.TryAcquire(shed.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release(shed.Ignored)
	// Item 0 runs on the own permit, item 1 takes a free one, item 2 would
	// take the last slot: contended, and tenant a over its share of 2.
	running := make(chan int)
	items := func(yield func(int) bool) {
		for i := range 3 {
			if !yield(i) {
				return
			}
			if i < 2 {
				<-running
			}
		}
	}
	errs := map[int]error{}
	ctx := shed.ContextWithPermit(t.Context(), &own)
	err = fanout.Run(ctx, items, func(ctx context.Context, in int) (int, error) {
		if in < 2 {
			running <- in
			<-refused
		}
		return in, nil
	}, fanout.Config[int]{Bound: 3, Limiter: l, Request: func(int) shed.Request { return shed.Request{Tenant: "a"} }},
		func(r fanout.Result[int]) error {
			errs[r.Index] = r.Err
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v: want every item run, item 2 on the request's own permit", errs)
	}
	if n := l.InFlight(); n != 2 {
		t.Errorf("InFlight after Run = %d, want the two requests'", n)
	}
}

// TestOwnPermitRefusesInvalidRequest: a Request that returns a malformed
// admission request (an unknown class, a negative cost) is a caller bug,
// reported as the item's error wrapping shed.ErrInvalidRequest whether or
// not the request's own permit is free. Before, an item that found the own
// permit free ran without the check, so a one-item request never showed
// the bug, and a longer one showed it only for the items that found the
// permit busy.
func TestOwnPermitRefusesInvalidRequest(t *testing.T) {
	for name, req := range map[string]shed.Request{
		"unknown class": {Class: 7},
		"negative cost": {Cost: -1},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := shed.New(shed.Config{Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			own, err := l.TryAcquire(shed.Request{})
			if err != nil {
				t.Fatal(err)
			}
			defer own.Release(shed.Ignored)
			var ran int
			var got error
			err = fanout.RunSlice(shed.ContextWithPermit(t.Context(), &own), []int{1},
				func(ctx context.Context, in int) (int, error) { ran++; return in, nil },
				fanout.Config[int]{Bound: 1, Limiter: l, Request: func(int) shed.Request { return req }},
				func(r fanout.Result[int]) error { got = r.Err; return nil })
			if err != nil || !errors.Is(got, shed.ErrInvalidRequest) || ran != 0 {
				t.Fatalf("Run = %v, item error %v after %d runs; want shed.ErrInvalidRequest and no run", err, got, ran)
			}
		})
	}
}

// TestPermitWaitIsNotTheWorkDeadline: PermitWait bounds the wait for a
// permit, not the work. With DeadlineMargin the limiter refuses a request
// whose deadline leaves less than its class's expected service time; an
// item of a request without a deadline must not be refused so because its
// PermitWait is shorter than the service time, least of all by an idle
// limiter. Before, PermitWait became the item's deadline and every item
// failed with deadline_too_short.
func TestPermitWaitIsNotTheWorkDeadline(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4, DeadlineMargin: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, _ := l.TryAcquireAt(now.Add(-time.Second), shed.Request{})
	p.ReleaseAt(now, shed.Success) // the work takes a second
	var got []error
	err = fanout.RunSlice(t.Context(), []int{1, 2}, func(ctx context.Context, in int) (int, error) { return in, nil },
		fanout.Config[int]{Bound: 2, Limiter: l, PermitWait: 100 * time.Millisecond},
		func(r fanout.Result[int]) error { got = append(got, r.Err); return nil })
	if err != nil || len(got) != 2 || got[0] != nil || got[1] != nil {
		t.Fatalf("Run = %v, item errors %v; want both admitted by the idle limiter", err, got)
	}
}

// TestRunSliceBuffersFollowLength: a slice cannot grow, so RunSlice sizes
// Run's buffers for its length when that is below Bound: three items at
// the largest Bound allocate for three. Before, they allocated for 65,536
// results (megabytes per call for a large Out).
func TestRunSliceBuffersFollowLength(t *testing.T) {
	task := func(ctx context.Context, in int) (int, error) { return in, nil }
	for _, ordered := range []bool{false, true} {
		cfg := fanout.Config[int]{Bound: fanout.MaxBound, Ordered: ordered}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n := 0
		if err := fanout.RunSlice(t.Context(), []int{1, 2, 3}, task, cfg, func(fanout.Result[int]) error { n++; return nil }); err != nil || n != 3 {
			t.Fatalf("RunSlice = %v with %d results", err, n)
		}
		runtime.ReadMemStats(&after)
		if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<16 {
			t.Errorf("ordered %v: %d bytes allocated for three items", ordered, grown)
		}
	}
}

// runGoexitOutcome runs three items through l, bound at a time, with an
// Outcome that calls runtime.Goexit, and returns their results; it fails
// the test unless Run returns (see runBounded) with all three.
func runGoexitOutcome(t *testing.T, l *shed.Limiter, bound int) []fanout.Result[int] {
	t.Helper()
	cfg := fanout.Config[int]{Bound: bound, Limiter: l, Outcome: func(error) shed.Outcome {
		runtime.Goexit()
		return shed.Success
	}}
	var got []fanout.Result[int]
	var err error
	runBounded(t, func() {
		err = fanout.RunSlice(t.Context(), []int{1, 2, 3}, func(ctx context.Context, in int) (int, error) {
			return in, nil
		}, cfg, func(r fanout.Result[int]) error {
			got = append(got, r)
			return nil
		})
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("Run = %v with %d results, want 3", err, len(got))
	}
	return got
}
