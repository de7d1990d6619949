package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// Config.Outcome is user code that runs on a worker after the task
// returned: if it panics, the panic is recovered there (it must not crash
// the process), the permit is still released, as shed.Ignored, and the
// item's result is delivered unchanged.
func TestOutcomePanicReleasesPermit(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	cfg := fanout.Config[int]{
		Bound:   2,
		Limiter: l,
		Outcome: func(err error) shed.Outcome {
			calls.Add(1)
			panic("outcome mapper broke")
		},
	}
	boom := errors.New("boom")
	var got []fanout.Result[int]
	_ = fanout.RunSlice(context.Background(), []int{1, 2, 3}, func(ctx context.Context, in int) (int, error) {
		return in, boom
	}, cfg, func(r fanout.Result[int]) error {
		got = append(got, r)
		return nil
	})
	if len(got) != 3 {
		t.Fatalf("got %d results, want 3", len(got))
	}
	for _, r := range got {
		if !errors.Is(r.Err, boom) {
			t.Errorf("item %d: error %v, want the task's own", r.Index, r.Err)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("Outcome called %d times, want 3", n)
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("InFlight after Run = %d, want 0: a permit was kept", n)
	}
	s := l.Snapshot().Classes[0]
	if s.Released[shed.Ignored] != 3 {
		t.Errorf("released as Ignored: %d, want 3 (%+v)", s.Released[shed.Ignored], s.Released)
	}
}

// TestOutcomeGoexitWithPanickingObserver: an Outcome that calls
// runtime.Goexit leaves the permit to the fallback release, and an
// Observer that panics there raises a panic during the Goexit. The
// recovered panic does not stop the Goexit (the runtime resumes it), so
// the worker ends all the same: the scheduler must hear that it did. Before,
// the worker was reported alive, the next item was handed to it over the
// jobs channel, and Run hung with that item's input.
func TestOutcomeGoexitWithPanickingObserver(t *testing.T) {
	for _, bound := range []int{1, 2} {
		t.Run(fmt.Sprint("bound ", bound), func(t *testing.T) {
			var released atomic.Int64
			l, err := shed.New(shed.Config{Limit: 4, Observer: shed.ObserverFunc(func(e shed.Event) {
				if e.Kind == shed.EventReleased {
					released.Add(1)
					panic("observer broke")
				}
			})})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runGoexitOutcome(t, l, bound) {
				var pe *fanout.PanicError
				if !errors.Is(r.Err, fanout.ErrGoexit) || !errors.As(r.Err, &pe) || pe.Value != "observer broke" {
					t.Errorf("item %d: error %v, want ErrGoexit and the Observer's panic", r.Index, r.Err)
				}
			}
			s := l.Snapshot()
			if n := released.Load(); n != 3 || s.InFlight != 0 || s.Classes[0].Released[shed.Ignored] != 3 || s.Classes[0].Misused != 0 {
				t.Errorf("released %d times, in flight %d, %+v: want each of 3 permits released once, as Ignored", n, s.InFlight, s.Classes[0])
			}
		})
	}
}
