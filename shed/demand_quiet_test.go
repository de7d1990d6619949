package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestReleaseLendsShareOnceRequestsStop: hi's demand hold runs out, and
// then only releases come. A release then lends hi's idle share to lo's
// waiter, which otherwise sat in the queue until its MaxWait. While
// requests keep coming, the release leaves the hold's end to the next
// admission, which comes soon anyway (see DemandHold). A clock that went
// back counts as no time passed from when the limiter sees it (here at
// ExpireAt, as a simulation calls it).
func TestReleaseLendsShareOnceRequestsStop(t *testing.T) {
	const hold = time.Second
	T := t0.Add(24 * time.Hour)
	for _, tt := range []struct {
		name    string
		seen    time.Time // when the limiter next reads the time (ExpireAt)
		attempt time.Time // a lo request that is turned away, if not zero
		release time.Time // when the borrowed slot is released
		lent    bool
	}{
		{name: "requests stopped", seen: T, release: T.Add(2 * hold), lent: true},
		{name: "requests stopped after a step back of an hour", seen: T.Add(-time.Hour), release: T.Add(-time.Hour + 2*hold), lent: true},
		{name: "a request within the last hold", seen: T, attempt: T.Add(hold / 2), release: T.Add(hold + hold/4)},
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
			if !tt.attempt.IsZero() {
				_, err := l.TryAcquireAt(tt.attempt, lo)
				wantReason(t, err, shed.ReasonLimit)
			}
			a.ReleaseAt(tt.release, shed.Ignored)
			got := log.take()
			if lent := len(got) == 1; lent != tt.lent {
				t.Fatalf("lo's waiter granted %v when a slot was released at T%+v (hi's demand marked at T, the clock seen at T%+v, DemandHold %v, hi idle since), want %v",
					lent, tt.release.Sub(T), tt.seen.Sub(T), hold, tt.lent)
			}
			if tt.lent {
				p, err := got[0].Result()
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
				p.ReleaseAt(tt.release, shed.Ignored)
			} else if !l.CancelAt(tt.release, w) {
				t.Fatal("CancelAt: waiter not queued")
			}
			b.ReleaseAt(tt.release, shed.Ignored)
		})
	}
}
