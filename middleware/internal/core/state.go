package core

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// State is the per-request state of an admitted request. It is also the
// handler's context: it embeds the request's context and answers Value for
// its own key, which saves the separate allocation of context.WithValue.
// It is never pooled, because handlers may keep their context (and
// goroutines may outlive the request).
type State struct {
	context.Context
	// Permit is the request's one permit; the handler reaches it through
	// the context, the middleware releases it.
	Permit shed.Permit
	// Status is the final response status seen by the writer that
	// WrapWriter returned, 0 until one is written.
	Status int
	// hijacked: the handler hijacked the connection; holdHijacked: keep
	// the permit after a hijack (Config.HoldHijacked).
	hijacked, holdHijacked bool
	// h1 and h2 are the handler's writer when it wraps net/http's HTTP/1
	// or HTTP/2 writer, kept here so that wrapping allocates nothing.
	h1 h1Writer
	h2 h2Writer
	// body is the handler's request body when WatchBody wrapped it, and
	// admitted when (monoNow) it did.
	body     clientBody
	admitted int64
	// cancel ends the deadline the middleware put on the context (nil:
	// none), once the request is done.
	cancel context.CancelFunc
}

// end releases the resources of the request's context deadline, after the
// permit's outcome was read from it.
func (st *State) end() {
	if st.cancel != nil {
		st.cancel()
	}
}

type stateKey struct{}

// Value returns st for the middleware's key, the request's permit for
// shed.PermitContextKey (so that shed/fanout finds the capacity the
// request already holds), and defers to the request's context for every
// other key.
func (st *State) Value(key any) any {
	switch key {
	case stateKey{}:
		return st
	case shed.PermitContextKey{}:
		return &st.Permit
	}
	return st.Context.Value(key)
}

// String names the context for debugging.
func (st *State) String() string {
	if s, ok := st.Context.(interface{ String() string }); ok {
		return s.String() + ".WithShedkitPermit"
	}
	return "context.WithShedkitPermit"
}

// FromContext returns the state of the request ctx belongs to, or nil.
func FromContext(ctx context.Context) *State {
	if ctx == nil {
		return nil
	}
	st, _ := ctx.Value(stateKey{}).(*State)
	return st
}

// Holds reports whether ctx is the context of a request that a
// middleware on e's limiter already admitted: the middleware is mounted
// twice on its route (Echo.Use and the route's own, a group's...). The
// inner one must let it through: a second permit of the same limiter for
// the same request would wait for the first, which the request itself
// holds, and at a small limit an idle server would shed everyone.
func (e *Engine) Holds(ctx context.Context) bool {
	st := FromContext(ctx)
	return st != nil && e.lim.Holds(&st.Permit)
}

// PermitFrom returns the permit carried by ctx, nil when there is none.
func PermitFrom(ctx context.Context) *shed.Permit {
	if st := FromContext(ctx); st != nil {
		return &st.Permit
	}
	return nil
}

// Reconcile replaces the cost of ctx's permit with actual.
func Reconcile(ctx context.Context, actual int64) error {
	p := PermitFrom(ctx)
	if p == nil {
		return shedhttp.ErrNoPermit
	}
	return p.Reconcile(actual)
}

// className returns the name of class c.
func (e *Engine) className(c shed.Class) string {
	if int(c) < len(e.classNames) {
		return e.classNames[c]
	}
	return ""
}

// inbound is what the span attributes say about the caller of a request:
// the attempt number its retrying client sent, and its deadline.
type inbound struct {
	r        *http.Request
	deadline time.Time // zero: none
	arrived  time.Time // at the limiter; zero when the span is not recording
}

// append appends the inbound attributes to attrs: the attempt number when
// r carries one (AttemptHeader), the deadline budget when there is a
// deadline. It reads the clock for the budget.
func (in inbound) append(attrs []attribute.KeyValue) []attribute.KeyValue {
	if in.r != nil {
		if v := in.r.Header[AttemptHeader]; len(v) == 1 {
			if n := parseAttempt(v[0]); n > 0 {
				attrs = append(attrs, attribute.Int(shedhttp.AttrAttempt, n))
			}
		}
	}
	if !in.deadline.IsZero() {
		attrs = append(attrs, attribute.Float64(shedhttp.AttrDeadlineBudget, max(time.Until(in.deadline), 0).Seconds()))
	}
	return attrs
}

// parseAttempt parses an AttemptHeader value as retrybudget.ParseAttempt
// does: 1 to 4 ASCII digits, 0 for anything else.
func parseAttempt(v string) int {
	if len(v) == 0 || len(v) > 4 {
		return 0
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0
		}
		n = n*10 + int(v[i]-'0')
	}
	return n
}

// annotateAdmitted sets the admission attributes on ctx's span, if it is
// recording. dryReason is the reason a dry run admitted the request, "" if
// it was admitted for real.
func (e *Engine) annotateAdmitted(ctx context.Context, in inbound, p *shed.Permit, dryReason string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	decision := shedhttp.DecisionAdmitted
	if dryReason != "" {
		decision = shedhttp.DecisionDryRun
	}
	var buf [7]attribute.KeyValue
	attrs := append(buf[:0],
		attribute.String(shedhttp.AttrDecision, decision),
		attribute.String(shedhttp.AttrClass, e.className(p.Class())),
		attribute.Float64(shedhttp.AttrQueueWait, p.Wait().Seconds()),
		attribute.Int64(shedhttp.AttrCost, p.Cost()),
	)
	if dryReason != "" {
		attrs = append(attrs, attribute.String(shedhttp.AttrReason, dryReason))
	}
	span.SetAttributes(in.append(attrs)...)
	if w := p.Wait(); w > 0 {
		now := time.Now()
		e.queueSpan(ctx, span, p.Class(), now.Add(-w), now, "")
	}
}

// queueSpan records the time a request waited for admission as a child
// span of span, from start to end, so that the wait shows on the trace's
// timeline; reason is the rejection that ended the wait, if any.
func (e *Engine) queueSpan(ctx context.Context, span trace.Span, c shed.Class, start, end time.Time, reason string) {
	_, q := span.TracerProvider().Tracer(shedhttp.ScopeName).Start(ctx, shedhttp.SpanQueue,
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(shedhttp.AttrClass, e.className(c))))
	if reason != "" {
		q.SetAttributes(attribute.String(shedhttp.AttrReason, reason))
	}
	q.End(trace.WithTimestamp(end))
}

// annotateRejected sets the rejection attributes on ctx's span, if it is
// recording; queued says the request waited in the queue before it.
func (e *Engine) annotateRejected(ctx context.Context, in inbound, reason string, c shed.Class, cost int64, classified, queued bool) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var buf [6]attribute.KeyValue
	attrs := append(buf[:0],
		attribute.String(shedhttp.AttrDecision, shedhttp.DecisionRejected),
		attribute.String(shedhttp.AttrReason, reason),
	)
	if classified {
		attrs = append(attrs, attribute.String(shedhttp.AttrClass, e.className(c)), attribute.Int64(shedhttp.AttrCost, max(cost, 1)))
	}
	span.SetAttributes(in.append(attrs)...)
	if queued && !in.arrived.IsZero() {
		e.queueSpan(ctx, span, c, in.arrived, time.Now(), reason)
	}
}
