package shed

import "sync/atomic"

// hotCounters are the counters every admission and release of a class
// touches. The in-flight count and cost of the class are derived from them
// (admitted - released - leaked, costIn - costOut), so per-class accounting
// costs one atomic add on each side and no extra state. Class 0's live in
// the same cache line as the limiter's state word, which that line's owner
// has just written anyway.
type hotCounters struct {
	admitted atomic.Uint64
	released [3]atomic.Uint64 // by Outcome
	leaked   atomic.Uint64
	costIn   atomic.Int64 // cost reserved by admissions and reconciliations
	costOut  atomic.Int64 // cost given back by releases
}

// inflight returns the class's admitted work not yet released. It can be
// off by the operations in progress on other goroutines. Only valid with
// several classes: a lone class does not count its successes.
func (c *hotCounters) inflight() int64 {
	out := c.released[0].Load() + c.released[1].Load() + c.released[2].Load() + c.leaked.Load()
	return int64(c.admitted.Load() - out)
}

// cost returns the class's in-flight cost (same caveat as inflight).
func (c *hotCounters) cost() int64 { return c.costIn.Load() - c.costOut.Load() }

// classCounters are the counters of one class: the hot ones (unused for
// class 0, whose hot counters sit beside the state word) on their own
// cache line, then those of the queueing and rejection paths.
type classCounters struct {
	hot       hotCounters
	_         [8]byte
	afterWait atomic.Uint64
	queued    atomic.Uint64
	cancelled atomic.Uint64
	rejected  [numReasons]atomic.Uint64
	misused   atomic.Uint64
	// service is the class's expected service time (see deadline.go), in
	// nanoseconds (per unit of cost with ServiceTimePerCost), as float64
	// bits, 0 when unknown; serviceAt is when its last sample (or probe)
	// came (for a probe: when it was admitted), in nanoseconds since the
	// limiter's epoch.
	service   atomic.Uint64
	serviceAt atomic.Int64
	// probeMark is the class's count of deadline rejections when it last
	// let a probe through, and probeAt one more than the probe's admission
	// time until its sample comes (0: none).
	probeMark atomic.Uint64
	probeAt   atomic.Int64
	// probeClaim is when the last probe was claimed, and probeSince and
	// probeWas what serviceAt and probeMark were before: a probe that
	// measured nothing is given back (see giveBackProbe).
	probeClaim atomic.Int64
	probeSince atomic.Int64
	probeWas   atomic.Uint64
}

// hot returns the hot counters of class c.
func (l *Limiter) hot(c Class) *hotCounters {
	if c == 0 {
		return &l.hot0
	}
	return &l.counts[c].hot
}
