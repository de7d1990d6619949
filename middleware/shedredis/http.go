package shedredis

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// AttrFallback is the span attribute (bool) the concurrency middleware
// sets on the request's span: whether its decision was taken on the
// local share because Redis could not be used. MetricLeaseDecisions
// carries it too, so that traces and metrics use one word.
const AttrFallback = "shedkit.store.fallback"

// ReasonConcurrencyLimited is the AttrReason (shedhttp) of a request the
// concurrency middleware rejected because its key was at its fleet limit.
const ReasonConcurrencyLimited = "concurrency_limited"

// MiddlewareConfig configures ConcurrencyMiddleware.
type MiddlewareConfig struct {
	// Concurrency keeps the leases. Required.
	Concurrency *Concurrency
	// Key returns the request's key (tenant). A request whose key is ""
	// is not limited. Required.
	Key func(r *http.Request) string
	// Limit is the number of requests of one key in flight across the
	// fleet. Required, >= 1.
	Limit int
	// KeyLimit, when set, returns the limit of a key; a result < 1 means
	// Limit.
	KeyLimit func(key string) int
	// Reject writes the 429, after Retry-After and the no-retry header
	// were set. Default shedhttp.WriteProblem.
	Reject shedhttp.RejectFunc
	// DisableNoRetryHeader stops the middleware from setting the
	// retrybudget no-retry header (Shedkit-No-Retry: overloaded) on its
	// 429s, as the shedkit middleware's option of the same name.
	DisableNoRetryHeader bool
}

var noRetryValues = []string{"overloaded"}[:1:1]

// ConcurrencyMiddleware bounds the requests of each key in flight across
// the fleet: a request takes a lease of its key before the next handler
// runs and releases it when the handler returns (or panics). A key at its
// limit is answered 429 with Retry-After (503 when the request's context
// ended while the lease was asked for, or after Concurrency.Close). Put it
// outside the shedkit middleware (nethttp.New), so that a tenant at its
// limit does not take a place in the admission queue; the per-replica
// adaptive limit still bounds what each replica runs.
//
// The release is a Redis call made before the handler's response is
// complete (net/http sends a buffered response once the handler returns),
// so each response waits for one more round trip: up to Config.Timeout
// while Redis is slow, none while its breaker is open. In exchange, a
// client that sends its next request once it has the answer finds its
// slot free in Redis. The simulator does not model this wait (its leases
// release after the answer).
func ConcurrencyMiddleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Concurrency == nil:
		return nil, configError("Concurrency", "required")
	case cfg.Key == nil:
		return nil, configError("Key", "required")
	case cfg.Limit < 1:
		return nil, configError("Limit", "must be >= 1, got %d", cfg.Limit)
	}
	if cfg.Reject == nil {
		cfg.Reject = shedhttp.WriteProblem
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := cfg.Key(r)
			if key == "" {
				next.ServeHTTP(w, r)
				return
			}
			limit := cfg.Limit
			if cfg.KeyLimit != nil {
				if n := cfg.KeyLimit(key); n >= 1 {
					limit = n
				}
			}
			span := trace.SpanFromContext(r.Context())
			lease, err := cfg.Concurrency.Acquire(r.Context(), key, limit)
			if err != nil {
				le, _ := err.(*LimitError)
				if span.IsRecording() {
					reason := shedhttp.ReasonCancelled
					if le != nil {
						reason = ReasonConcurrencyLimited
						span.SetAttributes(attribute.Bool(AttrFallback, le.FellBack))
					}
					span.SetAttributes(
						attribute.String(shedhttp.AttrDecision, shedhttp.DecisionRejected),
						attribute.String(shedhttp.AttrReason, reason))
				}
				rej := shedhttp.Rejection{Status: http.StatusTooManyRequests, Reason: shed.ReasonRateLimited, RetryAfter: time.Second, Err: err}
				if le != nil {
					rej.RetryAfter = le.RetryAfter
				} else {
					// The request's context ended during the call (the
					// client went away, or the server is cancelling it),
					// or the Concurrency was closed (ErrClosed).
					rej.Status, rej.Reason = http.StatusServiceUnavailable, shed.ReasonNone
				}
				h := w.Header()
				h["Retry-After"] = shedhttp.RetryAfterValue(rej.RetryAfter)
				if !cfg.DisableNoRetryHeader {
					h["Shedkit-No-Retry"] = noRetryValues
				}
				cfg.Reject(w, r, rej)
				return
			}
			defer lease.Release()
			if span.IsRecording() {
				span.SetAttributes(attribute.Bool(AttrFallback, lease.FellBack()))
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}
