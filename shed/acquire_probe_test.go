package shed_test

import (
	"context"
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
