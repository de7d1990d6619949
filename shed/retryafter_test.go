package shed_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// retryAfterFor returns the Retry-After of a ReasonLimit rejection when
// the limiter's latency estimate is exactly latency: with one slot and an
// empty queue, the hint is the latency itself.
func retryAfterFor(t *testing.T, min, max, latency time.Duration) time.Duration {
	t.Helper()
	l := mustNew(t, shed.Config{Limit: 1, RetryAfterMin: min, RetryAfterMax: max})
	p := mustAcquire(t, l, t0, shed.Request{})
	p.ReleaseAt(t0.Add(latency), shed.Success) // the first sample sets the estimate
	p = mustAcquire(t, l, t0, shed.Request{})
	defer p.ReleaseAt(t0, shed.Ignored)
	_, err := l.TryAcquireAt(t0, shed.Request{})
	var rej *shed.Rejection
	if !errors.As(err, &rej) || rej.Reason != shed.ReasonLimit {
		t.Fatalf("want a ReasonLimit rejection, got %v", err)
	}
	return rej.RetryAfter
}

// TestRetryAfterRounding: the hint is raised to RetryAfterMin, rounded up
// to the documented steps (100 ms below 1 s, 1 s up to 1 min, 10 s up to
// 10 min, 1 min above), whatever RetryAfterMax is, then capped at
// RetryAfterMax.
func TestRetryAfterRounding(t *testing.T) {
	const ms, s, min = time.Millisecond, time.Second, time.Minute
	cases := []struct {
		min, max, latency, want time.Duration
	}{
		{0, 0, 10 * ms, s}, // defaults: 1 s to 30 s
		{0, 0, 1200 * ms, 2 * s},
		{0, 0, 29500 * ms, 30 * s},
		{0, 0, 45 * s, 30 * s},
		{100 * ms, 10 * s, 10 * ms, 100 * ms},
		{100 * ms, 10 * s, 250 * ms, 300 * ms},
		{100 * ms, 10 * s, s, s},
		{100 * ms, 10 * s, 1050 * ms, 2 * s},
		{150 * ms, 10 * s, 10 * ms, 200 * ms}, // the minimum is rounded up too
		// A large maximum does not coarsen the steps (it used to: 8 s here).
		{s, shed.MaxRetryAfter, s, s},
		{s, shed.MaxRetryAfter, 1001 * ms, 2 * s},
		{s, shed.MaxRetryAfter, 59 * s, 59 * s},
		{s, shed.MaxRetryAfter, 61 * s, 70 * s},
		{s, shed.MaxRetryAfter, 10 * min, 10 * min},
		{s, shed.MaxRetryAfter, 10*min + s, 11 * min},
		{s, shed.MaxRetryAfter, 2 * time.Hour, time.Hour},
		// Rounding never goes past the maximum (it used to: 3 s here).
		{s, 2500 * ms, 2200 * ms, 2500 * ms},
		{s, 2500 * ms, 5 * s, 2500 * ms},
		{50 * ms, 50 * ms, s, 50 * ms},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v-%v/%v", tc.min, tc.max, tc.latency), func(t *testing.T) {
			if got := retryAfterFor(t, tc.min, tc.max, tc.latency); got != tc.want {
				t.Errorf("Retry-After = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRetryAfterMaxOnCostTooLarge: the rejections that carry the maximum
// as their hint carry it exactly, up to MaxRetryAfter, without allocating.
func TestRetryAfterMaxOnCostTooLarge(t *testing.T) {
	for _, max := range []time.Duration{time.Second, 2500 * time.Millisecond, 30 * time.Second, 61 * time.Second, shed.MaxRetryAfter - 1, shed.MaxRetryAfter} {
		t.Run(max.String(), func(t *testing.T) {
			l := mustNew(t, shed.Config{Limit: 1, MaxCost: 5, RetryAfterMax: max})
			_, err := l.TryAcquireAt(t0, shed.Request{Cost: 6})
			var rej *shed.Rejection
			if !errors.As(err, &rej) || rej.Reason != shed.ReasonCostTooLarge || rej.RetryAfter != max {
				t.Fatalf("got %v, want cost_too_large with Retry-After %v", err, max)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := l.TryAcquireAt(t0, shed.Request{Cost: 6}); err != rej {
					t.Fatalf("got %v, want the shared %v", err, rej)
				}
			})
			if allocs != 0 {
				t.Errorf("a rejection allocates %v times", allocs)
			}
		})
	}
}
