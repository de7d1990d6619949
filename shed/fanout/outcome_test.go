package fanout_test

import (
	"context"
	"errors"
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
