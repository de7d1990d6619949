package shedredis

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
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
	// Recorder, when set, records the tenants refused at their limit,
	// which the shedkit middleware inside never sees: each 429 as a
	// refusal on sight (record.KindRefused, counted in the ticks'
	// refusals) with shed.ReasonKeyConcurrency, the class Class gives
	// it, the key's hash (Recorder.KeyHash, as the shedkit middleware
	// hashes its rate-limit key: pass the same Recorder) and the key's
	// leases counted (Record.InFlight: its limit, or this replica's
	// share when the decision fell back), so that shedsim fit can count
	// them and infer the limit. Sampled as the recorder samples; the
	// requests that pass are the inner middleware's to record.
	Recorder *record.Recorder
	// Class returns the class of a request the Recorder records, by the
	// index of the recording's classes (the shedkit middleware's
	// classes, in their order). Default: class 0.
	Class func(r *http.Request) shed.Class
	// Clock replaces time.Now for the Recorder's times, read only for a
	// refusal it records.
	Clock func() time.Time
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
// slot free in Redis. The simulator (sim, with service.store) models this
// wait.
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
	if cfg.Clock == nil {
		cfg.Clock = time.Now
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
				if le != nil {
					cfg.recRefused(r, key, le)
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

// recRefused records request r of tenant key, refused at its limit (le),
// when the Recorder samples it: only then are the clock read and the key
// hashed. A refusal, not an arrival: the request never reached the
// limiter (see MiddlewareConfig.Recorder).
func (cfg *MiddlewareConfig) recRefused(r *http.Request, key string, le *LimitError) {
	rec := cfg.Recorder
	if rec == nil {
		return
	}
	var c shed.Class
	if cfg.Class != nil {
		c = cfg.Class(r)
	}
	if rec.Refuse(c) {
		rec.Add(record.Record{Kind: record.KindRefused, Time: cfg.Clock(), Class: c, Reason: shed.ReasonKeyConcurrency,
			Status: http.StatusTooManyRequests, InFlight: le.InFlight, Key: rec.KeyHash(key)})
	}
}
