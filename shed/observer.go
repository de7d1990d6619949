package shed

import "time"

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventAdmitted: a permit was handed out, at once or after waiting
	// (Wait > 0 or Queued true).
	EventAdmitted EventKind = iota
	// EventQueued: the request joined the queue.
	EventQueued
	// EventRejected: the request was rejected (Reason says why). In dry-run
	// mode it is followed by an EventAdmitted with DryRun set.
	EventRejected
	// EventCancelled: a queued request gave up before a decision.
	EventCancelled
	// EventReleased: a permit was released (Outcome says how).
	EventReleased
	// EventLeaked: a permit was garbage collected without being released;
	// its capacity was reclaimed.
	EventLeaked
	// EventMisused: a permit was misused, and the misuse absorbed: it (a
	// copy of the Permit value) was released or reconciled after another
	// copy had been released, so nothing was given back twice (see
	// ClassSnapshot.Misused). Class and Cost are the permit's.
	EventMisused
)

var eventNames = [...]string{"admitted", "queued", "rejected", "cancelled", "released", "leaked", "misused"}

// String returns the kind's lower-case name.
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event describes one decision of a Limiter.
type Event struct {
	Kind EventKind
	// Time is when the decision was taken. It is zero when the wall-clock
	// API did not need the clock for it (see Config.MaxSamplesPerSecond).
	Time  time.Time
	Class Class
	// Reason is set on EventRejected, and on an EventAdmitted that dry-run
	// mode admitted although it would have rejected it.
	Reason Reason
	// Outcome is set on EventReleased.
	Outcome Outcome
	// Cost is the request's reserved cost (after any reconciliation).
	Cost int64
	// Wait is the time spent in the queue, for requests that queued.
	Wait time.Duration
	// Queued reports that the request waited in the queue.
	Queued bool
	// Latency is how long the permit was held, on EventReleased when
	// Timed is true.
	Latency time.Duration
	Timed   bool
	// DryRun is set when the decision was overridden by dry-run mode.
	DryRun bool
	// InFlight is the limiter's in-flight count after the decision.
	InFlight int
}

// Observer is told about every decision of a Limiter. It is called
// synchronously on the caller's goroutine, outside the limiter's locks,
// possibly from many goroutines at once: it must be fast, must not block,
// and must not call back into the Limiter in a way that waits.
//
// Observe must not panic. If it does, the limiter's state stays consistent
// and the panic propagates to the caller of the method that was reporting
// (TryAcquire, Acquire, EnqueueAt, Release, CancelAt, ExpireAt, DrainAt...);
// the events that call had still to report are lost. Nothing else is:
//   - an admission whose EventAdmitted (or, in dry-run mode, EventRejected)
//     panics is undone, since its caller never receives the permit: it is
//     released as Ignored, without an EventReleased;
//   - a request whose EventQueued panics is taken out of the queue again
//     and counted as cancelled, without an EventCancelled (unless its
//     outcome was already decided: it is then delivered as usual);
//   - every waiter whose outcome was decided is notified, even when the
//     event of its own outcome panicked: it holds its permit or rejection;
//   - a release frees its capacity before its EventReleased.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
