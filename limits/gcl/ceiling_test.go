package gcl

import (
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/shedkit/shedkit/shed"
)

// TestAIMDMaxLimitHoldsPastTheLimit: AIMD's estimate stops near MaxLimit
// even when the work in flight exceeds the limit (a shed.Limiter's dry
// run admits everything), so that drops lower the reported limit at once
// instead of backing off from an estimate grown hidden above the cap.
func TestAIMDMaxLimitHoldsPastTheLimit(t *testing.T) {
	s, err := NewAIMDTuned(Config{}, Tuning{InitialLimit: 10, MaxLimit: 50})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	window := func(drop bool) {
		for i := range 100 {
			now = now.Add(10 * time.Millisecond)
			// DryRun: 500 in flight, whatever the limit.
			s.Observe(shed.Sample{Now: now, Timed: true, Latency: 10 * time.Millisecond, InFlight: 500, Dropped: drop && i == 50})
		}
	}
	for range 200 {
		window(false)
	}
	t.Logf("after 200 windows: limit %d, library estimate %d", s.Limit(), s.Core().EstimatedLimit())
	for range 10 {
		window(true) // every window has a drop
	}
	t.Logf("after 10 windows with drops: limit %d, library estimate %d", s.Limit(), s.Core().EstimatedLimit())
	if s.Limit() >= 50 {
		t.Fatalf("10 windows with drops in a row did not lower the reported limit: %d (library estimate %d, doc says at most MaxLimit+1)",
			s.Limit(), s.Core().EstimatedLimit())
	}
}

// TestLimitAtMostShedMaxLimit: the limit a Source reports is at most
// shed.MaxLimit, the most a Limiter enforces, whatever the library says.
func TestLimitAtMostShedMaxLimit(t *testing.T) {
	sl := limit.NewSettableLimit("x", 1<<30, nil)
	s := newSource(t, sl, Config{})
	if s.Limit() > shed.MaxLimit {
		t.Errorf("FromCore(Settable 1<<30).Limit() = %d > shed.MaxLimit %d", s.Limit(), shed.MaxLimit)
	}

	a, err := NewAIMDTuned(Config{PerSample: true}, Tuning{InitialLimit: shed.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	a.Observe(shed.Sample{Now: t0, Timed: true, Latency: time.Millisecond, InFlight: shed.MaxLimit})
	if a.Limit() > shed.MaxLimit {
		t.Errorf("NewAIMD: Limit() = %d > shed.MaxLimit %d", a.Limit(), shed.MaxLimit)
	}
}
