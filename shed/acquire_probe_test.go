package shed_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestAcquireKeepsDeadlineProbe: the blocking Acquire asks twice when it
// must wait, once without a waiter and once with one. The deadline check
// of the first pass claims the class's probe; a second deadline check
// finds the probe taken and rejects the very request it was claimed for,
// so a class shut out by a stale service-time estimate stays shut out
// whenever its probe would have to queue.
func TestAcquireKeepsDeadlineProbe(t *testing.T) {
	const limit = 10
	clk := newFakeClock()
	queued := make(chan struct{}, 1)
	l := mustNew(t, shed.Config{
		Limit:          limit,
		DeadlineMargin: 1,
		Clock:          clk.Now,
		Classes:        []shed.ClassConfig{{Name: "q", QueueDepth: 4, MaxWait: time.Hour}},
		Observer: shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.EventQueued {
				queued <- struct{}{}
			}
		}),
	})
	// A service time of 10 s: the estimate, and the mean latency.
	p := mustAcquire(t, l, clk.Now(), shed.Request{Deadline: clk.Now().Add(time.Hour)})
	clk.Advance(10 * time.Second)
	p.ReleaseAt(clk.Now(), shed.Success)
	// Long after that sample, enough deadline rejections to earn a probe.
	clk.Advance(time.Minute)
	short := func() shed.Request { return shed.Request{Deadline: clk.Now().Add(5 * time.Second)} }
	for range 3 {
		_, err := l.TryAcquireAt(clk.Now(), short())
		wantReason(t, err, shed.ReasonDeadline)
	}
	// The class is full, so the probe must queue: its expected wait,
	// 10 s / limit, leaves it time.
	var held []shed.Permit
	for range limit {
		held = append(held, mustAcquire(t, l, clk.Now(), shed.Request{}))
	}
	type result struct {
		p   shed.Permit
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := l.Acquire(context.Background(), short())
		res <- result{p, err}
	}()
	select {
	case r := <-res:
		t.Fatalf("the probe was not queued: permit %v, error %v", r.p.Valid(), r.err)
	case <-queued:
	}
	held[0].ReleaseAt(clk.Now(), shed.Ignored)
	r := <-res
	if r.err != nil {
		t.Fatalf("queued probe: %v", r.err)
	}
	r.p.Release(shed.Ignored)
	for i := range held[1:] {
		held[i+1].Release(shed.Ignored)
	}
}

// TestQueuedProbeReplacesStaleEstimate: a probe that comes back faster
// than the stale estimate replaces it at once (see deadline.go), also
// when the probe had to queue, as Acquire's and EnqueueAt's may. The
// probe was recognised by its claim time, which a queued probe's start
// (its grant) is not, nor that of Acquire's second pass on a clock that
// moves: its sample only moved the estimate by a tenth, and the class
// stayed shut out for tens of probes more.
func TestQueuedProbeReplacesStaleEstimate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		enqueue func(l *shed.Limiter, now time.Time, req shed.Request) func() (shed.Permit, error)
	}{
		{"EnqueueAt", enqueueProbe},
		{"Acquire", acquireProbe},
	} {
		t.Run(tt.name, func(t *testing.T) { testQueuedProbe(t, tt.enqueue) })
	}
}

// enqueueProbe queues req with EnqueueAt and returns its outcome's getter.
func enqueueProbe(l *shed.Limiter, now time.Time, req shed.Request) func() (shed.Permit, error) {
	done := make(chan *shed.Waiter, 1)
	w := shed.NewWaiter(func(w *shed.Waiter) { done <- w })
	if p, queued, err := l.EnqueueAt(now, req, w); !queued {
		return func() (shed.Permit, error) { return p, err }
	}
	return func() (shed.Permit, error) { return (<-done).Result() }
}

// acquireProbe runs Acquire for req until it is queued (or decided).
func acquireProbe(l *shed.Limiter, _ time.Time, req shed.Request) func() (shed.Permit, error) {
	return acquireUntilQueued(context.Background(), l, req)
}

// acquireUntilQueued runs Acquire(ctx, req) until it is queued (or
// decided) and returns its outcome's getter.
func acquireUntilQueued(ctx context.Context, l *shed.Limiter, req shed.Request) func() (shed.Permit, error) {
	type result struct {
		p   shed.Permit
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := l.Acquire(ctx, req)
		res <- result{p, err}
	}()
	for {
		if l.Snapshot().Queued > 0 {
			return func() (shed.Permit, error) { r := <-res; return r.p, r.err }
		}
		select {
		case r := <-res:
			return func() (shed.Permit, error) { return r.p, r.err }
		default:
			runtime.Gosched()
		}
	}
}

func testQueuedProbe(t *testing.T, enqueue func(*shed.Limiter, time.Time, shed.Request) func() (shed.Permit, error)) {
	// A slowdown (a service time of probeSvc) has ended; every request
	// with half of it left is refused, which earns a probe, and the class
	// is full, so the probe queues.
	clk := newFakeClock()
	l, held := shutOutClass(t, clk, time.Hour, 1)
	short := func() shed.Request { return shortRequest(clk) }
	result := enqueue(l, clk.Now(), short())
	if l.Snapshot().Queued != 1 {
		p, err := result()
		t.Fatalf("the probe was not queued: permit %v, error %v", p.Valid(), err)
	}
	// Granted a second later, it takes 1 s: the service is fast again.
	clk.Advance(time.Second)
	held[0].ReleaseAt(clk.Now(), shed.Ignored)
	probe, err := result()
	if err != nil {
		t.Fatalf("queued probe: %v", err)
	}
	clk.Advance(time.Second)
	probe.ReleaseAt(clk.Now(), shed.Success)
	if got := l.Snapshot().Classes[0].ServiceTime; got != time.Second {
		t.Errorf("service time %v after a probe of 1 s replaced the stale 10 s, want 1s", got)
	}
	if p, err := l.TryAcquireAt(clk.Now(), short()); err != nil {
		t.Errorf("a request with 5 s left after a 1 s probe: %v", err)
	} else {
		p.ReleaseAt(clk.Now(), shed.Ignored)
	}
	for _, p := range held[1:] {
		p.ReleaseAt(clk.Now(), shed.Ignored)
	}
}
