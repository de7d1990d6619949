package shedhttp

import "github.com/shedkit/shedkit/shed/shedotel"

// Span attribute keys set by the middleware on the request's span. They are
// the keys of shedkit's metrics (package shed/shedotel), so traces and
// metrics share one vocabulary.
const (
	// AttrDecision is the admission decision: one of DecisionAdmitted,
	// DecisionRejected, DecisionDryRun.
	AttrDecision = string(shedotel.AttrDecision)
	// AttrReason is the rejection reason, shed.Reason.String() (for
	// example "queue_full", "rate_limited"), "body_too_large" for a 413
	// on body size, or "cancelled" for a 503 to a request whose context
	// ended while it was queued. Set only when the decision is rejected or
	// dry_run.
	AttrReason = string(shedotel.AttrReason)
	// AttrClass is the name of the request's priority class.
	AttrClass = string(shedotel.AttrClass)
	// AttrQueueWait is the time the request waited for admission, in
	// seconds (float64). Set only when admitted.
	AttrQueueWait = string(shedotel.AttrQueueWait)
	// AttrCost is the cost the request reserved (int).
	AttrCost = string(shedotel.AttrCost)
	// AttrAttempt is the attempt number the request's retrying client
	// sent (the Shedkit-Attempt header of retrybudget.Transport: 1 for a
	// first attempt, 2 for the first retry...), when it sent one (int).
	AttrAttempt = string(shedotel.AttrAttempt)
	// AttrDeadlineBudget is the time left before the request's deadline
	// when it was admitted or rejected, in seconds (float64, 0 when it had
	// passed), when the request has a deadline.
	AttrDeadlineBudget = string(shedotel.AttrDeadlineBudget)
)

// SpanQueue names the child span that covers the time a request waited in
// its class's queue, from its arrival at the limiter to its admission or
// to the rejection that ended its wait (queue_timeout, cancelled), so that
// the wait shows on the trace's timeline. Only requests that waited have
// one, and only when the request's span is recording; it carries
// AttrClass, and AttrReason when the wait ended in a rejection.
const SpanQueue = "shedkit.queue"

// ScopeName is the instrumentation scope of the spans the middleware
// starts (SpanQueue). The server span itself is the caller's (otelhttp,
// otelecho).
const ScopeName = "github.com/shedkit/shedkit/middleware"

// Values of AttrDecision.
const (
	DecisionAdmitted = "admitted"
	DecisionRejected = "rejected"
	// DecisionDryRun: a dry run (of the limiter, or of the rate limit)
	// admitted a request it would have rejected; AttrReason says why.
	DecisionDryRun = "dry_run"
)

// ReasonBodyTooLarge is the AttrReason of a request rejected (413) because
// its body exceeds the configured maximum. It is not a shed.Reason: the
// limiter never sees such requests.
const ReasonBodyTooLarge = "body_too_large"

// ReasonCancelled is the AttrReason of a request answered 503 because its
// context ended while it waited for admission: its client went away, or
// the server cancelled it (at shutdown, or an outer middleware). The
// limiter counts it as cancelled, not as a rejection.
const ReasonCancelled = "cancelled"
