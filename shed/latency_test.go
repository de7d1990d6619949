package shed_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// A release at a time before its admission has latency 0, however far
// before: the zero time too, ~292 years before the epoch, where the
// difference of the two offsets from the epoch would overflow. The source
// and the mean latency behind Retry-After hints see no bogus sample.
func TestReleaseAtZeroTimeHasZeroLatency(t *testing.T) {
	src := newFakeSource(4)
	l := mustNew(t, shed.Config{Source: src, Clock: func() time.Time { return t0 }})
	p := mustAcquire(t, l, t0.Add(time.Second), shed.Request{})
	p.ReleaseAt(time.Time{}, shed.Success)
	samples := src.Samples()
	if len(samples) != 1 || !samples[0].Timed || samples[0].Latency != 0 {
		t.Fatalf("samples %+v, want one timed sample of latency 0", samples)
	}
	now := t0.Add(2 * time.Second)
	for range 4 {
		q := mustAcquire(t, l, now, shed.Request{})
		defer q.ReleaseAt(now, shed.Success)
	}
	_, err := l.TryAcquireAt(now, shed.Request{})
	var rej *shed.Rejection
	if !errors.As(err, &rej) || rej.RetryAfter != shed.DefaultRetryAfterMin {
		t.Errorf("rejection %v, want Retry-After %v: no work took measurable time", err, shed.DefaultRetryAfterMin)
	}
}
