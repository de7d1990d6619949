package main

import (
	"fmt"
	"time"
)

// schedule is the upstream's latency over the run: healthy, then Factor
// times slower from SlowStart for SlowFor, then healthy again.
type schedule struct {
	Healthy   time.Duration // median service time when healthy
	Factor    float64       // slowdown factor
	SlowStart time.Duration // offset of the slowdown from the start of a run
	SlowFor   time.Duration
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

// phaseAt names the phase at offset t, for the progress lines.
func (s schedule) phaseAt(t time.Duration) string {
	switch {
	case t < s.SlowStart:
		return "healthy"
	case t < s.SlowStart+s.SlowFor:
		return fmt.Sprintf("%gx slow", s.Factor)
	default:
		return "recovered"
	}
}
