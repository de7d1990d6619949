package shed

import "time"

// Outcome says how a unit of admitted work ended. It decides what the
// limit source learns from the work when its permit is released.
type Outcome uint8

const (
	// Success means the work completed normally. Its latency, when it was
	// timed, is a sample for the limit source.
	Success Outcome = iota
	// Dropped means the work failed in a way that signals overload: an
	// upstream timeout, a 503 from a dependency, a deadline that expired
	// while the work ran. Limit sources treat it as congestion.
	Dropped
	// Ignored means the outcome says nothing about capacity: a client
	// error, a cancellation by the caller. No sample is recorded.
	Ignored
)

// String returns the lower-case name of the outcome.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Dropped:
		return "dropped"
	case Ignored:
		return "ignored"
	}
	return "unknown"
}

// Sample is what one finished unit of work tells a [LimitSource].
type Sample struct {
	// Now is when the work finished (the release time).
	Now time.Time
	// Latency is how long the work held its permit, valid when Timed is
	// true. Any duration counts, zero included (virtual time can produce
	// it): nothing is discarded below a cutoff.
	Latency time.Duration
	// Timed reports whether Latency was measured. The wall-clock API times
	// a subset of requests (see Config.MaxSamplesPerSecond); a drop of an
	// untimed permit is still reported so that congestion is never missed.
	Timed bool
	// InFlight is the limiter's in-flight count when the work was
	// admitted, the work itself included. Limit sources use it to avoid
	// growing a limit that is not being used.
	InFlight int
	// Dropped reports an overload signal (Outcome Dropped).
	Dropped bool
	// Cost is the work's cost when it was released (its reservation, or
	// the actual cost given to Reconcile), at least 1. Limit sources may
	// normalize latency by it: with mixed costs (LLM tokens), a window's
	// mean latency otherwise swings with its few large requests.
	Cost int64
}

// LimitSource supplies the concurrency limit that a [Limiter] enforces and
// learns from finished work. A static limit, the adaptive algorithms of
// package limits, or an adapter for another library all satisfy it.
//
// Both methods are called concurrently from the admission hot path: they
// must be safe for concurrent use, must not block and should not allocate.
//
// Neither method may panic. If one does, the panic propagates to the caller
// of the Limiter method that called it (TryAcquire, Release, ExpireAt...),
// as a panicking [Observer]'s does, and the limiter stays consistent:
//   - Limit is called before the limiter takes its lock or changes its
//     state, so the call that panicked decided nothing; capacity it had
//     just given back (a release) goes to waiters at the next decision;
//   - a release whose Observe panics is still counted with its outcome and
//     still gives back its capacity (to waiters too); only its
//     EventReleased is lost.
type LimitSource interface {
	// Limit returns the current limit on in-flight work, at least 1
	// (0 only for a [Prober] that is closed; the limiter reads less as
	// 1, and New refuses a source that reports less when it is made).
	// The limiter reads it on every admission, so it should cost no more
	// than an atomic load. The limit may change at any time; shrinking it
	// never revokes admitted work.
	Limit() int
	// Observe records one finished unit of work: every drop, and every
	// success that was timed. Ignored outcomes are not reported.
	Observe(s Sample)
}

// Prober is a [LimitSource] that may close: while its Limit is 0, the
// limiter admits nothing but the requests Probe lets through, each one
// beyond the work still in flight. A limit at its floor that still admits
// work back to back cannot let a dependency drain work that its callers
// stopped waiting for (see package limits); a closed limit admits a
// probe now and then until one succeeds. limits.Gradient and limits.AIMD
// implement it.
type Prober interface {
	LimitSource
	// Probe reports whether a request arriving at now, while Limit
	// returns 0, may be admitted, and if so claims the probe: it must
	// report true to one caller at a time. It is called concurrently, off
	// the hot path (only while the limit is 0), and must not block.
	Probe(now time.Time) bool
}
