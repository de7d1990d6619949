package main

import (
	"fmt"
	"time"
)

// schedule is the upstream's latency over the run: healthy, then Factor
// times slower from SlowStart for SlowFor, then healthy again. An optional
// outage (DownFor > 0) makes the upstream answer 503 at once, as a host
// with nothing healthy behind it does: the only thing in the demo that
// trips the retrying client's circuit breaker, which ignores slowness.
type schedule struct {
	Healthy   time.Duration // median service time when healthy
	Factor    float64       // slowdown factor
	SlowStart time.Duration // offset of the slowdown from the start of a run
	SlowFor   time.Duration
	DownStart time.Duration // offset of the outage from the start of a run
	DownFor   time.Duration // 0: no outage
	Duration  time.Duration // length of one run
}

func (s schedule) validate() error {
	switch {
	case s.Healthy <= 0:
		return fmt.Errorf("-latency must be > 0, got %v", s.Healthy)
	case s.Factor < 1:
		return fmt.Errorf("-slow-factor must be >= 1, got %v", s.Factor)
	case s.SlowStart < 0 || s.SlowFor < 0:
		return fmt.Errorf("-slow-start and -slow-for must be >= 0")
	case s.Duration <= 0:
		return fmt.Errorf("-duration must be > 0, got %v", s.Duration)
	case s.SlowStart+s.SlowFor > s.Duration:
		return fmt.Errorf("the slowdown (%v from %v) does not fit in -duration %v", s.SlowFor, s.SlowStart, s.Duration)
	case s.DownStart < 0 || s.DownFor < 0:
		return fmt.Errorf("-outage-start and -outage-for must be >= 0")
	case s.DownStart+s.DownFor > s.Duration:
		return fmt.Errorf("the outage (%v from %v) does not fit in -duration %v", s.DownFor, s.DownStart, s.Duration)
	}
	return nil
}

// factorAt returns the slowdown factor at offset t into a run.
func (s schedule) factorAt(t time.Duration) float64 {
	if t >= s.SlowStart && t < s.SlowStart+s.SlowFor {
		return s.Factor
	}
	return 1
}

// downAt reports whether the upstream is down at offset t into a run.
func (s schedule) downAt(t time.Duration) bool {
	return s.DownFor > 0 && t >= s.DownStart && t < s.DownStart+s.DownFor
}

// phaseAt names the phase at offset t, for the progress lines.
func (s schedule) phaseAt(t time.Duration) string {
	switch {
	case s.downAt(t):
		return "down"
	case t < s.SlowStart:
		return "healthy"
	case t < s.SlowStart+s.SlowFor:
		return fmt.Sprintf("%gx slow", s.Factor)
	default:
		return "recovered"
	}
}
