package core

import (
	"context"

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
	// w is the handler's writer when it wraps net/http's HTTP/1 writer,
	// kept here so that wrapping allocates nothing.
	w h1Writer
	// body is the handler's request body when WatchBody wrapped it, and
	// admitted when (monoNow) it did.
	body     clientBody
	admitted int64
}

type stateKey struct{}

// Value returns st for the middleware's key and defers to the request's
// context for every other key.
func (st *State) Value(key any) any {
	if key == (stateKey{}) {
		return st
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

// annotateAdmitted sets the admission attributes on ctx's span, if it is
// recording. dryReason is the reason a dry run admitted the request, "" if
// it was admitted for real.
func (e *Engine) annotateAdmitted(ctx context.Context, p *shed.Permit, dryReason string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	decision := shedhttp.DecisionAdmitted
	if dryReason != "" {
		decision = shedhttp.DecisionDryRun
	}
	attrs := [5]attribute.KeyValue{
		attribute.String(shedhttp.AttrDecision, decision),
		attribute.String(shedhttp.AttrClass, e.className(p.Class())),
		attribute.Float64(shedhttp.AttrQueueWait, p.Wait().Seconds()),
		attribute.Int64(shedhttp.AttrCost, p.Cost()),
	}
	n := 4
	if dryReason != "" {
		attrs[4] = attribute.String(shedhttp.AttrReason, dryReason)
		n = 5
	}
	span.SetAttributes(attrs[:n]...)
}

// annotateRejected sets the rejection attributes on ctx's span, if it is
// recording.
func (e *Engine) annotateRejected(ctx context.Context, reason string, c shed.Class, cost int64, classified bool) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := [4]attribute.KeyValue{
		attribute.String(shedhttp.AttrDecision, shedhttp.DecisionRejected),
		attribute.String(shedhttp.AttrReason, reason),
	}
	n := 2
	if classified {
		attrs[2] = attribute.String(shedhttp.AttrClass, e.className(c))
		attrs[3] = attribute.Int64(shedhttp.AttrCost, max(cost, 1))
		n = 4
	}
	span.SetAttributes(attrs[:n]...)
}
