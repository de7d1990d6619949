package shed_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func Example() {
	l, err := shed.New(shed.Config{Limit: 2})
	if err != nil {
		panic(err)
	}
	a, _ := l.TryAcquire(shed.Request{})
	b, _ := l.TryAcquire(shed.Request{})
	if _, err := l.TryAcquire(shed.Request{}); errors.Is(err, shed.ErrRejected) {
		fmt.Println("third request:", shed.ReasonOf(err))
	}
	a.Release(shed.Success)
	b.Release(shed.Dropped) // an upstream timeout: a congestion signal
	fmt.Println("in flight:", l.InFlight())
	// Output:
	// third request: limit_exceeded
	// in flight: 0
}

func ExampleLimiter_Acquire() {
	l, err := shed.New(shed.Config{
		Limit: 1,
		Classes: []shed.ClassConfig{
			{Name: "interactive", QueueDepth: 10, MaxWait: 100 * time.Millisecond},
		},
	})
	if err != nil {
		panic(err)
	}
	handle := func(ctx context.Context, work func(context.Context) error) error {
		p, err := l.Acquire(ctx, shed.Request{})
		if err != nil {
			return err // a *shed.Rejection, or ctx's error
		}
		// The outcome is read at release: a deferred p.Release(shed.Success)
		// would report every failure as a success.
		outcome := shed.Ignored // a client error says nothing about capacity
		defer func() { p.Release(outcome) }()
		err = work(ctx)
		switch {
		case err == nil:
			outcome = shed.Success // its latency is a sample
		case errors.Is(err, context.DeadlineExceeded):
			outcome = shed.Dropped // overload: what cuts an adaptive limit
		}
		return err
	}
	ok := func(context.Context) error { return nil }
	timeout := func(context.Context) error { return context.DeadlineExceeded }
	notFound := func(context.Context) error { return errors.New("not found") }
	for _, work := range []func(context.Context) error{ok, timeout, notFound} {
		fmt.Println(handle(context.Background(), work))
	}
	r := l.Snapshot().Classes[0].Released
	fmt.Println("success:", r[shed.Success], "dropped:", r[shed.Dropped], "ignored:", r[shed.Ignored])
	// Output:
	// <nil>
	// context deadline exceeded
	// not found
	// success: 1 dropped: 1 ignored: 1
}

// Interactive work protects 28 of 32 slots; batch borrows them while
// interactive is idle and gives them back as it finishes.
func ExampleClassConfig() {
	l, _ := shed.New(shed.Config{
		Limit: 32,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 28.0 / 32},
			{Name: "batch"},
		},
	})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	batch := make([]shed.Permit, 32)
	for i := range batch {
		batch[i], _ = l.TryAcquireAt(now, shed.Request{Class: 1})
	}
	_, err := l.TryAcquireAt(now, shed.Request{Class: 0})
	fmt.Println("interactive while batch holds every slot:", shed.ReasonOf(err))
	batch[0].ReleaseAt(now, shed.Success)
	_, err = l.TryAcquireAt(now, shed.Request{Class: 1})
	fmt.Println("batch, after a slot freed:", shed.ReasonOf(err))
	_, err = l.TryAcquireAt(now, shed.Request{Class: 0})
	fmt.Println("interactive, after a slot freed:", err)
	// Output:
	// interactive while batch holds every slot: limit_exceeded
	// batch, after a slot freed: limit_exceeded
	// interactive, after a slot freed: <nil>
}

// Reserve an estimate of an LLM call's tokens, then reconcile with what it
// really used.
func ExamplePermit_Reconcile() {
	l, _ := shed.New(shed.Config{Limit: 100, MaxCost: 50_000})
	p, err := l.TryAcquire(shed.Request{Cost: 1_200 + 4_096}) // prompt + max output
	if err != nil {
		panic(err)
	}
	fmt.Println("reserved:", l.Snapshot().InFlightCost)
	_ = p.Reconcile(1_200 + 350) // the reply was short
	fmt.Println("after reconcile:", l.Snapshot().InFlightCost)
	p.Release(shed.Success)
	// Output:
	// reserved: 5296
	// after reconcile: 1550
}

// The explicit-time core: what package sim drives in virtual time.
func ExampleLimiter_EnqueueAt() {
	l, _ := shed.New(shed.Config{
		Limit:   1,
		Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 4, MaxWait: time.Second}},
	})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, _ := l.TryAcquireAt(t0, shed.Request{})
	w := shed.NewWaiter(func(w *shed.Waiter) {
		p, err := w.Result()
		fmt.Println("waiter admitted after", p.Wait(), err)
	})
	_, queued, _ := l.EnqueueAt(t0, shed.Request{}, w)
	fmt.Println("queued:", queued)
	first.ReleaseAt(t0.Add(250*time.Millisecond), shed.Success)
	// Output:
	// queued: true
	// waiter admitted after 250ms <nil>
}

func ExampleLimiter_Drain() {
	l, _ := shed.New(shed.Config{Limit: 10})
	p, _ := l.TryAcquire(shed.Request{})
	go func() {
		time.Sleep(10 * time.Millisecond)
		p.Release(shed.Success)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := l.Drain(ctx)
	fmt.Println("still running:", rep.InFlight, err)
	_, err = l.TryAcquire(shed.Request{})
	fmt.Println("after drain:", shed.ReasonOf(err))
	// Output:
	// still running: 0 <nil>
	// after drain: draining
}

func ExampleConfig_dryRun() {
	l, _ := shed.New(shed.Config{Limit: 1, DryRun: true})
	a, _ := l.TryAcquire(shed.Request{})
	b, err := l.TryAcquire(shed.Request{})
	fmt.Println("admitted:", err == nil, "would have been:", b.DryRun())
	a.Release(shed.Success)
	b.Release(shed.Success)
	// Output: admitted: true would have been: limit_exceeded
}

// A tenant alone may use the whole class; once another tenant is active
// and the class is contended, each is held to its share.
func ExampleRequest_tenant() {
	l, err := shed.New(shed.Config{Limit: 4})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var held []shed.Permit
	for range 3 { // the class is idle: "noisy" may take what it wants
		p, _ := l.TryAcquireAt(now, shed.Request{Tenant: "noisy"})
		held = append(held, p)
	}
	// The last free place: taking it would leave the class contended with
	// "noisy" over its share (2 of 4, with "quiet" active).
	q, _ := l.TryAcquireAt(now, shed.Request{Tenant: "quiet"})
	held[0].ReleaseAt(now, shed.Success)
	_, err = l.TryAcquireAt(now, shed.Request{Tenant: "noisy"})
	fmt.Println("noisy:", shed.ReasonOf(err))
	p, err := l.TryAcquireAt(now, shed.Request{Tenant: "quiet"})
	fmt.Println("quiet:", err, "- tenants tracked:", l.Snapshot().Tenants)
	for _, p := range append(held[1:], q, p) {
		p.ReleaseAt(now, shed.Success)
	}
	fmt.Println("tenants tracked after release:", l.Snapshot().Tenants)
	// Output:
	// noisy: tenant_share
	// quiet: <nil> - tenants tracked: 2
	// tenants tracked after release: 0
}
