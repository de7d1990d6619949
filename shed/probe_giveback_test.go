package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// TestRejectedProbeIsGivenBack: a class shut out by a stale service-time
// estimate lets one request through as a probe (see deadline.go). A
// request that claimed the probe and was then rejected for another
// reason (the limit reached, the queue full) used it up: the class's
// next request that could have been the probe was refused for its
// deadline for a whole service time, and only after three more such
// refusals could another be let through.
func TestRejectedProbeIsGivenBack(t *testing.T) {
	const svc = 10 * time.Second
	for _, c := range []struct {
		name   string
		queue  int
		tenant string
		want   shed.Reason
	}{
		{"limit", 0, "", shed.ReasonLimit},
		{"limit_tenant", 0, "t1", shed.ReasonLimit},
		{"queue_full", 1, "", shed.ReasonQueueFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			class := shed.ClassConfig{Name: "q", QueueDepth: c.queue}
			if c.queue > 0 {
				class.MaxWait = time.Hour
			}
			l := mustNew(t, shed.Config{Limit: 1, DeadlineMargin: 1, Clock: clk.Now, Classes: []shed.ClassConfig{class}})
			// The estimate: one sample of svc, long ago.
			p := mustAcquire(t, l, clk.Now(), shed.Request{})
			clk.Advance(svc)
			p.ReleaseAt(clk.Now(), shed.Success)
			clk.Advance(time.Minute)
			short := func() shed.Request {
				return shed.Request{Deadline: clk.Now().Add(svc / 2), Tenant: c.tenant}
			}
			for range 3 {
				_, err := l.TryAcquireAt(clk.Now(), short())
				wantReason(t, err, shed.ReasonDeadline)
			}
			// The class is full (and its queue, if any): the request
			// that claims the probe is rejected for that.
			held := mustAcquire(t, l, clk.Now(), shed.Request{})
			var waiter *shed.Waiter
			if c.queue > 0 {
				waiter = shed.NewWaiter(func(*shed.Waiter) {})
				if _, queued, err := l.EnqueueAt(clk.Now(), shed.Request{}, waiter); !queued || err != nil {
					t.Fatalf("filling the queue: queued %v, err %v", queued, err)
				}
			}
			_, _, err := l.EnqueueAt(clk.Now(), short(), shed.NewWaiter(func(*shed.Waiter) {}))
			wantReason(t, err, c.want)
			if waiter != nil {
				l.CancelAt(clk.Now(), waiter)
			}
			held.ReleaseAt(clk.Now(), shed.Ignored)
			// Well within a service time, the probe is still the class's.
			clk.Advance(svc / 10)
			p, err = l.TryAcquireAt(clk.Now(), short())
			if err != nil {
				t.Fatalf("the next request after the rejected probe: %v, want it admitted as the probe", err)
			}
			p.ReleaseAt(clk.Now(), shed.Ignored)
			// The probe is taken again: the one after it is refused.
			_, err = l.TryAcquireAt(clk.Now(), short())
			wantReason(t, err, shed.ReasonDeadline)
		})
	}
}
