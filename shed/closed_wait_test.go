package shed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestQueuedDeadlineIsQueueTimeout: a request queued behind a closed limit
// (nothing but a probe is admitted, so it waits out its deadline) whose
// context's deadline, its own, passes while it waits is rejected with
// ReasonQueueTimeout, counted and observed as one. It was counted as
// cancelled (a caller that gave up) whenever the context's timer fired
// before Acquire's own, which can happen when the waiter's deadline is
// the request's (no DeadlineMargin, or no service time yet), and always
// does behind a limiter clock that lags the wall clock (a coarse, cached
// one): dashboards read a closed limit as clients leaving. A context that
// only bounds the wait (earlier than Request.Deadline, or ending before
// the deadline it reports) still ends it as a cancellation.
func TestQueuedDeadlineIsQueueTimeout(t *testing.T) {
	for _, tt := range []struct {
		name     string
		lag      time.Duration // of the limiter's clock behind the wall clock
		explicit time.Duration // Request.Deadline after the ctx's; 0: none; < 0: reportsLater
		want     shed.Reason   // ReasonNone: ctx's error, counted cancelled
	}{
		{"the context's deadline", 0, 0, shed.ReasonQueueTimeout},
		{"the context's deadline, a lagging clock", 10 * time.Millisecond, 0, shed.ReasonQueueTimeout},
		{"a context that bounds the wait", 0, time.Hour, shed.ReasonNone},
		{"a context that ends before the deadline it reports", 0, -1, shed.ReasonNone},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := &probingSource{fakeSource: newFakeSource(0)} // closed, no probe
			rec := &recorder{}
			clock := func() time.Time { return time.Now().Add(-tt.lag) }
			l := mustNew(t, shed.Config{Source: src, Observer: rec, Clock: clock, Classes: queued(4, time.Minute)})
			const n = 5
			for range n {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				var req shed.Request
				switch {
				case tt.explicit > 0:
					req.Deadline = time.Now().Add(tt.explicit)
				case tt.explicit < 0:
					ctx = reportsLater{ctx, time.Now().Add(time.Hour)}
				}
				_, err := l.Acquire(ctx, req)
				cancel()
				if tt.want == shed.ReasonNone {
					if !errors.Is(err, context.DeadlineExceeded) || shed.ReasonOf(err) != shed.ReasonNone {
						t.Fatalf("err = %v, want the context's error", err)
					}
					continue
				}
				wantReason(t, err, tt.want)
			}
			c := l.Snapshot().Classes[0]
			var cancelled, timedOut int
			for _, k := range rec.Kinds() {
				switch k {
				case shed.EventCancelled:
					cancelled++
				case shed.EventRejected:
					timedOut++
				}
			}
			wantCancelled := uint64(n)
			if tt.want != shed.ReasonNone {
				wantCancelled = 0
			}
			if c.Cancelled != wantCancelled || c.Rejected[shed.ReasonQueueTimeout] != n-wantCancelled ||
				cancelled != int(wantCancelled) || timedOut != n-int(wantCancelled) {
				t.Fatalf("counted %d cancelled, %d queue timeouts (events: %d, %d); want %d cancelled of %d",
					c.Cancelled, c.Rejected[shed.ReasonQueueTimeout], cancelled, timedOut, wantCancelled, n)
			}
		})
	}
}

// reportsLater is a context that ends when its Context does but reports a
// later deadline, as shed/fanout's PermitWait context does: the wait is
// bounded, the work's deadline is not.
type reportsLater struct {
	context.Context
	deadline time.Time
}

func (c reportsLater) Deadline() (time.Time, bool) { return c.deadline, true }
