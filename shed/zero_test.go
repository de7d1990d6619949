package shed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// EnqueueAt refuses a waiter that has no notify function (the zero Waiter,
// NewWaiter(nil)) as an invalid request: queued, it would be granted
// capacity that nobody is told about, by another caller's release.
func TestEnqueueAtRefusesWaiterWithoutNotify(t *testing.T) {
	for name, w := range map[string]*shed.Waiter{"zero Waiter": {}, "NewWaiter(nil)": shed.NewWaiter(nil), "nil": nil} {
		l := mustNew(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 1, MaxWait: time.Second}}})
		hold := mustAcquire(t, l, at(0), shed.Request{})
		_, queued, err := l.EnqueueAt(at(1), shed.Request{}, w)
		if queued || !errors.Is(err, shed.ErrInvalidRequest) {
			t.Errorf("%s: queued %v, err %v; want ErrInvalidRequest", name, queued, err)
		}
		hold.ReleaseAt(at(2), shed.Success)
		checkSettled(t, l)
	}
}

// The zero Limiter (not made by New) has no class: its admissions fail
// with ErrInvalidRequest and its other methods do nothing; none panics.
func TestZeroLimiterDoesNotPanic(t *testing.T) {
	var l shed.Limiter
	wantInvalid := func(name string, err error) {
		if !errors.Is(err, shed.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	calls := map[string]func(){
		"TryAcquire": func() { _, err := l.TryAcquire(shed.Request{}); wantInvalid("TryAcquire", err) },
		"Acquire": func() {
			_, err := l.Acquire(context.Background(), shed.Request{})
			wantInvalid("Acquire", err)
		},
		"EnqueueAt": func() {
			_, _, err := l.EnqueueAt(t0, shed.Request{}, shed.NewWaiter(func(*shed.Waiter) {}))
			wantInvalid("EnqueueAt", err)
		},
		"Snapshot": func() { _ = l.Snapshot() },
		"ExpireAt": func() { l.ExpireAt(t0) },
		"DrainAt":  func() { l.DrainAt(t0) },
		"Drain": func() {
			if rep, err := l.Drain(context.Background()); err != nil || rep.InFlight != 0 {
				t.Errorf("Drain: %+v, %v; want nothing in flight", rep, err)
			}
		},
	}
	for name, f := range calls {
		if panics(f) {
			t.Errorf("zero Limiter: %s panicked", name)
		}
	}
}
