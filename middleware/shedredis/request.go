package shedredis

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// AllowRequest implements shedhttp.RequestKeyStore, which the shedkit
// middleware prefers to AllowAt: the decision is bounded by the request's
// context as well as by Config.Timeout, it charges n tokens (the request's
// cost under shedhttp.Options.RateLimitCost), and the request's span, when
// it records, says whether the decision fell back to this replica's share
// (AttrFallback, and AttrCause when it did).
func (s *Store) AllowRequest(r *http.Request, now time.Time, class shed.Class, key string, limit shedhttp.RateLimit, n int) (bool, time.Duration) {
	d := s.Decide(r.Context(), now, class, key, limit, n)
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		if d.FellBack {
			span.SetAttributes(attribute.Bool(AttrFallback, true), AttrCause.String(d.Cause))
		} else {
			span.SetAttributes(attribute.Bool(AttrFallback, false))
		}
	}
	return d.Allowed, d.RetryAfter
}

// The middleware must see the request through the store.
var _ shedhttp.RequestKeyStore = (*Store)(nil)
