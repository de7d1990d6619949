package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestReleaseGrantsAfterDemandHold: a class's unmet demand lasts
// DemandHold, also when nothing but releases comes: the capacity a release
// frees inside another class's protected share goes to a waiter once that
// class's demand has expired, and a clock that went back since the demand
// was marked counts as no time passed from when the limiter sees it (here
// at ExpireAt, as a simulation calls it). The release's hand-off to the
// queue once kept the demand as it was until the next admission, however
// old it was: the waiter timed out with capacity free.
func TestReleaseGrantsAfterDemandHold(t *testing.T) {
	const hold = time.Second
	T := t0.Add(24 * time.Hour)
	for _, tt := range []struct {
		name    string
		seen    time.Time // when the limiter next reads the time (ExpireAt)
		release time.Time // when the borrowed slot is released
	}{
		{"after the hold", T, T.Add(2 * hold)},
		{"after a step back of an hour", T.Add(-time.Hour), T.Add(-time.Hour + 2*hold)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := mustNew(t, shed.Config{Limit: 2, DemandHold: hold, Classes: []shed.ClassConfig{
				{Name: "hi", Protected: 0.5},
				{Name: "lo", QueueDepth: 1, MaxWait: time.Hour},
			}})
			lo := shed.Request{Class: 1}
			a := mustAcquire(t, l, T, lo)
			b := mustAcquire(t, l, T, lo) // borrows hi's idle share
			_, err := l.TryAcquireAt(T, shed.Request{Class: 0})
			wantReason(t, err, shed.ReasonLimit) // hi's demand: until T+hold
			var log waiterLog
			w := shed.NewWaiter(log.notify)
			if _, queued, err := l.EnqueueAt(T, lo, w); !queued || err != nil {
				t.Fatalf("EnqueueAt: queued %v, %v", queued, err)
			}
			l.ExpireAt(tt.seen)
			a.ReleaseAt(tt.release, shed.Ignored)
			got := log.take()
			if len(got) != 1 {
				t.Fatalf("lo's waiter still queued when a slot was released at T%+v (hi's demand at T, the clock seen at T%+v; DemandHold %v), with hi idle",
					tt.release.Sub(T), tt.seen.Sub(T), hold)
			}
			p, err := got[0].Result()
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			p.ReleaseAt(tt.release, shed.Ignored)
			b.ReleaseAt(tt.release, shed.Ignored)
		})
	}
}
