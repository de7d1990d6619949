package retrybudget

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Reason says why a [Transport] did not make an attempt it would otherwise
// have made. Its String form is the value of the shedkit.retry.reason
// metric attribute and span event attribute.
type Reason uint8

const (
	// ReasonNone: nothing was denied; the last attempt's outcome was final
	// (a success, a non-retryable status or error, a request that is not
	// safe to replay).
	ReasonNone Reason = iota
	// ReasonBudget: the retry budget had no balance left.
	ReasonBudget
	// ReasonBreaker: the destination's circuit breaker is open.
	ReasonBreaker
	// ReasonThrottle: the adaptive throttle rejected the attempt locally.
	ReasonThrottle
	// ReasonNoRetryHeader: the response carried [NoRetryHeader].
	ReasonNoRetryHeader
	// ReasonDeadline: the attempt could not finish before the caller's
	// deadline.
	ReasonDeadline
	// ReasonRetryAfter: the server asked for a longer wait than
	// [TransportConfig.MaxRetryAfter].
	ReasonRetryAfter
	// ReasonMaxAttempts: the attempts allowed per logical request were
	// used up.
	ReasonMaxAttempts
	// ReasonInbound: the inbound request is itself retried by an outer
	// layer and the [InboundPolicy] forbids retrying under it.
	ReasonInbound
	// ReasonBodyNotReplayable: a retry was wanted, but the request's
	// GetBody failed to produce its body again.
	ReasonBodyNotReplayable
)

var reasonNames = [...]string{
	ReasonNone:              "none",
	ReasonBudget:            "budget",
	ReasonBreaker:           "breaker",
	ReasonThrottle:          "throttle",
	ReasonNoRetryHeader:     "no_retry_header",
	ReasonDeadline:          "deadline",
	ReasonRetryAfter:        "retry_after",
	ReasonMaxAttempts:       "max_attempts",
	ReasonInbound:           "inbound_retry",
	ReasonBodyNotReplayable: "body_not_replayable",
}

// String returns the reason's low-cardinality name, such as "budget".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// ErrInvalidConfig is wrapped by every configuration error of the
// package's constructors; the error names the invalid field.
var ErrInvalidConfig = errors.New("retrybudget: invalid config")

// Sentinel errors, reached with errors.Is through a [*RetryError].
var (
	ErrBudgetExhausted   = errors.New("retrybudget: retry budget exhausted")
	ErrCircuitOpen       = errors.New("retrybudget: circuit breaker open")
	ErrThrottled         = errors.New("retrybudget: rejected by adaptive throttling")
	ErrDeadline          = errors.New("retrybudget: attempt cannot finish before the deadline")
	ErrAttemptsExhausted = errors.New("retrybudget: attempts exhausted")
	ErrInboundRetry      = errors.New("retrybudget: inbound request is already a retry")
	ErrBodyNotReplayable = errors.New("retrybudget: request body cannot be produced again (GetBody failed)")
)

// Err returns the sentinel error of the reason, nil for reasons that
// never surface as errors (they need a response to happen).
func (r Reason) Err() error {
	switch r {
	case ReasonBudget:
		return ErrBudgetExhausted
	case ReasonBreaker:
		return ErrCircuitOpen
	case ReasonThrottle:
		return ErrThrottled
	case ReasonDeadline:
		return ErrDeadline
	case ReasonMaxAttempts:
		return ErrAttemptsExhausted
	case ReasonInbound:
		return ErrInboundRetry
	case ReasonBodyNotReplayable:
		return ErrBodyNotReplayable
	}
	return nil
}

// RetryError is returned by a [Transport] when it has no response to give:
// an attempt was denied and the previous attempt, if any, ended in an
// error (or its response was already discarded). When a retry is denied
// after a response, the caller gets that response untouched and a nil
// error; the reason is then visible in metrics, span events and
// [Report].
//
// errors.Is matches the reason's sentinel (ErrBudgetExhausted...) and
// the last attempt's error.
type RetryError struct {
	Reason   Reason
	Attempts int   // attempts sent on the wire
	Status   int   // status of the last, discarded, response; 0 if none
	Err      error // last attempt's error; nil if none
}

func (e *RetryError) Error() string {
	s := "retrybudget: not retried (" + e.Reason.String() + ") after " + strconv.Itoa(e.Attempts) + " attempt"
	if e.Attempts != 1 {
		s += "s"
	}
	if e.Status != 0 {
		s += ", last status " + strconv.Itoa(e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Timeout reports whether the last attempt timed out (AttemptTimeout,
// the caller's deadline, the base transport's own timeouts). http.Client
// wraps a RoundTripper's error in a *url.Error, whose Timeout looks at
// the error it holds and not further down: without this method a timed-out
// call would not read as a timeout there.
func (e *RetryError) Timeout() bool {
	var te interface{ Timeout() bool }
	return e.Err != nil && errors.As(e.Err, &te) && te.Timeout()
}

// Unwrap returns the reason's sentinel and the last attempt's error.
func (e *RetryError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if s := e.Reason.Err(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Report is filled by a [Transport] for the logical request whose context
// carries it (see [WithReport]). It is how a caller learns why a response
// was not retried. Read it after RoundTrip (or http.Client.Do) returns.
type Report struct {
	Attempts int           // attempts sent on the wire
	Denied   Reason        // why the transport stopped; ReasonNone if it did not need to retry
	Waited   time.Duration // total backoff wait
}

type reportKey struct{}

// WithReport returns a context that makes a [Transport] fill r.
func WithReport(ctx context.Context, r *Report) context.Context {
	return context.WithValue(ctx, reportKey{}, r)
}

func reportFrom(ctx context.Context) *Report {
	r, _ := ctx.Value(reportKey{}).(*Report)
	return r
}
