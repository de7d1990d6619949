package fanout_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// saturated returns a limiter of 4 whose every slot is held by one of 4
// requests, and those requests' contexts, each carrying its permit as the
// middleware's does. The class queues briefly, as in the README.
func saturated(t *testing.T) (*shed.Limiter, []context.Context) {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: "api", QueueDepth: 32, MaxWait: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	var ctxs []context.Context
	for range 4 {
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Release(shed.Ignored) })
		ctxs = append(ctxs, shed.ContextWithPermit(t.Context(), &p))
	}
	return l, ctxs
}

// TestOwnPermitUnderSaturation is the README's fan-out under the
// middleware's own limiter: 4 requests fill the limiter, and each fans out
// 8 items. Every item must succeed, running on its request's own permit
// one at a time. Before, every task waited for a second permit from the
// pool the requests held, and all 32 items failed with queue_timeout.
func TestOwnPermitUnderSaturation(t *testing.T) {
	l, ctxs := saturated(t)
	var failed, ran atomic.Int64
	var wg sync.WaitGroup
	for _, ctx := range ctxs {
		wg.Go(func() {
			var running, peak atomic.Int64
			err := fanout.Run(ctx, slices.Values(make([]int, 8)),
				func(ctx context.Context, in int) (int, error) {
					maxInt64(&peak, running.Add(1))
					time.Sleep(time.Millisecond)
					running.Add(-1)
					ran.Add(1)
					return in, nil
				},
				fanout.Config[int]{Bound: 8, Limiter: l, PermitWait: 10 * time.Second},
				func(r fanout.Result[int]) error {
					if r.Err != nil {
						failed.Add(1)
					}
					return nil
				})
			if err != nil {
				t.Error(err)
			}
			if peak.Load() != 1 {
				t.Errorf("%d tasks of one request ran at once on a full limiter, want 1 (its own permit)", peak.Load())
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || ran.Load() != 32 {
		t.Fatalf("%d of 32 items failed, %d ran", failed.Load(), ran.Load())
	}
	if snap := l.Snapshot(); snap.InFlight != 4 || snap.Queued != 0 {
		t.Fatalf("in flight %d, queued %d after the fan-outs: want the 4 requests' permits only", snap.InFlight, snap.Queued)
	}
}

// TestOwnPermitWithRoom: with free capacity, tasks run on pool permits
// beside the one on the request's own permit, which is handed back on every
// path (here a panic) for the next task.
func TestOwnPermitWithRoom(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	own, _ := l.TryAcquire(shed.Request{})
	defer own.Release(shed.Ignored)
	ctx := shed.ContextWithPermit(t.Context(), &own)
	var peak, running atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	var results []fanout.Result[int]
	err = fanout.Run(ctx, slices.Values([]int{0, 1, 2, 3, 4, 5}),
		func(ctx context.Context, in int) (int, error) {
			n := running.Add(1)
			defer running.Add(-1)
			maxInt64(&peak, n)
			if n == 3 {
				once.Do(func() { close(release) }) // own + 2 pool permits at once
			}
			<-release
			if in == 0 {
				panic("first")
			}
			return in, nil
		},
		fanout.Config[int]{Bound: 3, Limiter: l},
		func(r fanout.Result[int]) error { results = append(results, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 3 {
		t.Errorf("peak %d tasks, want 3: the own permit and the two free ones", peak.Load())
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	if len(results) != 6 || failed != 1 {
		t.Errorf("%d results, %d failed; want 6, 1 (the panic)", len(results), failed)
	}
	if n := l.InFlight(); n != 1 {
		t.Errorf("in flight %d after the fan-out, want the request's own", n)
	}
}

// TestOwnPermitOnlyForCapacity: a task that the limiter turns away
// because its deadline is too short does not fall back on the request's
// permit, and a permit of another limiter is not capacity of this one.
func TestOwnPermitOnlyForCapacity(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4, DeadlineMargin: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, _ := l.TryAcquireAt(now.Add(-time.Second), shed.Request{})
	p.ReleaseAt(now, shed.Success) // work takes a second
	own, _ := l.TryAcquire(shed.Request{})
	defer own.Release(shed.Ignored)
	ctx, cancel := context.WithTimeout(shed.ContextWithPermit(t.Context(), &own), 100*time.Millisecond)
	defer cancel()
	first, second := make(chan struct{}), make(chan struct{})
	items := func(yield func(int) bool) {
		if yield(0) {
			<-first // item 1 comes once item 0 runs on the own permit
			yield(1)
		}
	}
	errs := map[int]error{}
	err = fanout.Run(ctx, items,
		func(ctx context.Context, in int) (int, error) {
			if in == 0 {
				close(first)
				<-second // holds the own permit until item 1 is decided
			}
			return in, nil
		},
		fanout.Config[int]{Bound: 2, Limiter: l},
		func(r fanout.Result[int]) error {
			errs[r.Index] = r.Err
			if r.Index == 1 {
				close(second)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || shed.ReasonOf(errs[1]) != shed.ReasonDeadline {
		t.Fatalf("errors %v: want item 0 on the own permit, item 1 refused for its deadline", errs)
	}

	full, _ := saturated(t)
	other, _ := shed.New(shed.Config{Limit: 1})
	op, _ := other.TryAcquire(shed.Request{})
	defer op.Release(shed.Ignored)
	var got error
	err = fanout.Run(shed.ContextWithPermit(t.Context(), &op), slices.Values([]int{1}),
		func(ctx context.Context, in int) (int, error) { return in, nil },
		fanout.Config[int]{Bound: 1, Limiter: full},
		func(r fanout.Result[int]) error { got = r.Err; return nil })
	if err != nil || shed.ReasonOf(got) != shed.ReasonQueueTimeout {
		t.Fatalf("under another limiter's permit: %v, %v; want a queue timeout", err, got)
	}
}

// TestKnownLengthRefusedUpfront: RunSlice (or Config.Len) refuses an input
// longer than MaxItems before any task starts. Before, the refusal came
// when item MaxItems+1 was pulled, after MaxItems tasks had run.
func TestKnownLengthRefusedUpfront(t *testing.T) {
	var started atomic.Int64
	task := func(ctx context.Context, in int) (int, error) { started.Add(1); return in, nil }
	err := fanout.RunSlice(t.Context(), make([]int, 12), task, fanout.Config[int]{Bound: 4, MaxItems: 10}, nil)
	var tm *fanout.TooManyItemsError
	if !errors.As(err, &tm) || tm.Max != 10 || tm.Len != 12 || started.Load() != 0 {
		t.Fatalf("RunSlice = %v after %d tasks, want *TooManyItemsError{10, 12} before any", err, started.Load())
	}
	src := newSource(12)
	err = fanout.Run(t.Context(), src.seq(), func(ctx context.Context, in *item) (int, error) { return 0, nil },
		fanout.Config[*item]{Bound: 4, MaxItems: 10, Len: 12}, nil)
	if !errors.Is(err, fanout.ErrTooManyItems) || src.pulled.Load() != 0 {
		t.Fatalf("Run with Len = %v after %d pulls, want ErrTooManyItems before any", err, src.pulled.Load())
	}
	if err := fanout.RunSlice(t.Context(), make([]int, 10), task, fanout.Config[int]{Bound: 4, MaxItems: 10}, nil); err != nil || started.Load() != 10 {
		t.Fatalf("RunSlice at the maximum = %v with %d tasks", err, started.Load())
	}
}
