package grpc

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// PushbackKey is the trailer key by which a server tells gRPC clients how
// long to wait before retrying (a non-negative number of milliseconds) or
// not to retry (a negative number). gRPC's own retry policy honours it,
// and so does this package's Client.
const PushbackKey = "grpc-retry-pushback-ms"

// Status messages of rejections. They are stable (clients and dashboards
// may match them) and name no internal state: no limit, in-flight count,
// class or reason. The status code is what clients should act on.
const (
	MsgRateLimited = "shedkit: too many requests from this client; retry after grpc-retry-pushback-ms"
	MsgOverloaded  = "shedkit: the server is overloaded; retry after grpc-retry-pushback-ms"
	MsgTooLarge    = "shedkit: the request is larger than the server accepts"
	MsgDeadline    = "shedkit: the deadline passed while the call waited for admission"
	MsgInternal    = "shedkit: the server could not process the request"
)

// Rejection errors are built once and shared: a status error is read,
// never modified, by the gRPC server that sends it, and rejecting must
// stay cheap under overload.
var (
	errRateLimited = status.Error(codes.ResourceExhausted, MsgRateLimited)
	errOverloaded  = status.Error(codes.Unavailable, MsgOverloaded)
	errTooLarge    = status.Error(codes.ResourceExhausted, MsgTooLarge)
	errDeadline    = status.Error(codes.DeadlineExceeded, MsgDeadline)
	errInternal    = status.Error(codes.Internal, MsgInternal)
)

// rejection is a rejection's status error and its pushback, carried by
// value so that rejecting allocates nothing of its own, and what a
// recording says of it: the status code, the reason, and whether the call
// gave up while it waited (cancelled) rather than being turned away.
type rejection struct {
	err       error         // the shared status error
	pushback  time.Duration // < 0: do not retry; 0: no trailer
	code      codes.Code    // err's
	reason    shed.Reason
	cancelled bool
}

// pushback rounds d up to a whole number of milliseconds, at least 1: a
// zero would tell gRPC's retry policy to retry at once.
func pushbackMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++ // d/ms + 1 cannot overflow: d is at most MaxInt64 ns
	}
	return max(ms, 1)
}

// pushbackCache holds the trailers of the common pushbacks, the limiter's
// Retry-After hints below 10 s (multiples of 100 ms), so that a rejection
// under overload allocates no metadata. Trailers are merged by copy into
// the stream's, never modified.
var pushbackCache = func() (c [101]metadata.MD) {
	for i := range c {
		ms := int64(i) * 100
		if i == 0 {
			ms = -1
		}
		c[i] = metadata.MD{PushbackKey: []string{strconv.FormatInt(ms, 10)}}
	}
	return c
}()

// pushbackMD returns the trailer announcing d (negative: do not retry).
func pushbackMD(d time.Duration) metadata.MD {
	if d < 0 {
		return pushbackCache[0]
	}
	ms := pushbackMillis(d)
	if ms%100 == 0 && ms/100 < int64(len(pushbackCache)) {
		return pushbackCache[ms/100]
	}
	return metadata.MD{PushbackKey: []string{strconv.FormatInt(ms, 10)}}
}

// answer sets the pushback trailer of a unary call's rejection and
// returns the status error to return. Streams use answerStream, which sets
// it on their ServerStream: one function for both made stream callers pass
// a nil context, a trap for the next change (staticcheck SA1012).
func (s *Server) answer(ctx context.Context, r rejection) error {
	if r.pushback != 0 {
		_ = grpc.SetTrailer(ctx, pushbackMD(r.pushback)) // fails only outside a gRPC call
	}
	return r.err
}

// answerStream is answer for a stream: the trailer goes on ss.
func (s *Server) answerStream(ss grpc.ServerStream, r rejection) error {
	if r.pushback != 0 {
		ss.SetTrailer(pushbackMD(r.pushback))
	}
	return r.err
}

// rateLimited returns the rejection of a call over its key's rate.
func (s *Server) rateLimited(wait time.Duration) rejection {
	if s.noRetry {
		return rejection{err: errRateLimited, pushback: -1, code: codes.ResourceExhausted, reason: shed.ReasonRateLimited}
	}
	return rejection{err: errRateLimited, pushback: max(wait, time.Millisecond), code: codes.ResourceExhausted, reason: shed.ReasonRateLimited}
}

// rejection turns an Acquire error into the status to answer with.
func (s *Server) rejection(ctx context.Context, cl shedhttp.Classification, err error) rejection {
	rj, ok := err.(*shed.Rejection)
	if !ok {
		rj = asRejection(err)
	}
	if rj == nil {
		switch {
		case errors.Is(err, shed.ErrInvalidRequest):
			// A Classify that returns an unknown class or a negative
			// cost: a configuration bug, not a reason to retry.
			return rejection{err: errInternal, code: codes.Internal}
		case errors.Is(err, context.DeadlineExceeded):
			// The call's own deadline passed while it waited.
			s.annotateRejected(ctx, shed.ReasonQueueTimeout.String(), cl.Class, cl.Cost, true)
			return rejection{err: errDeadline, code: codes.DeadlineExceeded, reason: shed.ReasonQueueTimeout}
		default:
			// The context ended while the call waited: its client went
			// away (the status reaches nobody), or the server cancelled
			// it while the client still waits: that client must not
			// read a success for work that never ran.
			s.annotateRejected(ctx, shedhttp.ReasonCancelled, cl.Class, cl.Cost, true)
			return rejection{err: errOverloaded, pushback: s.hint(time.Second), code: codes.Unavailable, cancelled: true}
		}
	}
	s.annotateRejected(ctx, rj.Reason.String(), cl.Class, cl.Cost, true)
	if rj.Reason == shed.ReasonQueueTimeout && deadlinePassed(ctx) {
		// The call's deadline passed while it waited, as above: the
		// limiter's timer fired first (it usually does, and shed.Acquire
		// answers a queue timeout when the context's does). The answer
		// must not depend on which timer won.
		return rejection{err: errDeadline, code: codes.DeadlineExceeded, reason: rj.Reason}
	}
	if rj.Reason == shed.ReasonCostTooLarge {
		// It can never be admitted: any retry would fail the same way.
		return rejection{err: errTooLarge, pushback: -1, code: codes.ResourceExhausted, reason: rj.Reason}
	}
	pushback := s.hint(rj.RetryAfter)
	if rj.Reason == shed.ReasonDraining && pushback > 0 {
		// A replica that drains cannot say when the channel's other
		// backends take the call: no pushback, so the client's own
		// backoff retries it soon (elsewhere), not after RetryAfterMax.
		pushback = 0
	}
	return rejection{err: errOverloaded, pushback: pushback, code: codes.Unavailable, reason: rj.Reason}
}

// deadlinePassed reports whether ctx's deadline, if any, has passed.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// asRejection is errors.As for a wrapped *shed.Rejection, apart so that
// the common case (a bare *shed.Rejection) does not allocate its target.
func asRejection(err error) *shed.Rejection {
	var rj *shed.Rejection
	if errors.As(err, &rj) {
		return rj
	}
	return nil
}

// hint is the pushback of a shedding rejection: the limiter's hint, or
// "do not retry" under NoRetryPushback.
func (s *Server) hint(d time.Duration) time.Duration {
	if s.noRetry {
		return -1
	}
	return max(d, time.Millisecond)
}

// className returns the name of class c.
func (s *Server) className(c shed.Class) string {
	if int(c) < len(s.classNames) {
		return s.classNames[c]
	}
	return ""
}

// annotateAdmitted sets the admission attributes on ctx's span (an
// otelgrpc server span, typically), if it is recording. dryReason is the
// reason a dry run admitted the call, "" if it was admitted for real.
func (s *Server) annotateAdmitted(ctx context.Context, p *shed.Permit, dryReason string) {
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
		attribute.String(shedhttp.AttrClass, s.className(p.Class())),
		attribute.Float64(shedhttp.AttrQueueWait, p.Wait().Seconds()),
		attribute.Int64(shedhttp.AttrCost, p.Cost()),
	)
	if dryReason != "" {
		attrs = append(attrs, attribute.String(shedhttp.AttrReason, dryReason))
	}
	span.SetAttributes(appendInbound(ctx, attrs)...)
}

// appendInbound appends what the span says about the caller: the attempt
// number its retrying client sent (AttemptMetadata) and the time left
// before the call's deadline, when it has one.
func appendInbound(ctx context.Context, attrs []attribute.KeyValue) []attribute.KeyValue {
	if n := inboundAttempt(ctx); n > 0 {
		attrs = append(attrs, attribute.Int(shedhttp.AttrAttempt, n))
	}
	if dl, ok := ctx.Deadline(); ok {
		attrs = append(attrs, attribute.Float64(shedhttp.AttrDeadlineBudget, max(time.Until(dl), 0).Seconds()))
	}
	return attrs
}

// annotateRejected sets the rejection attributes on ctx's span, if it is
// recording.
func (s *Server) annotateRejected(ctx context.Context, reason string, c shed.Class, cost int64, classified bool) {
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
		attrs = append(attrs, attribute.String(shedhttp.AttrClass, s.className(c)), attribute.Int64(shedhttp.AttrCost, max(cost, 1)))
	}
	span.SetAttributes(appendInbound(ctx, attrs)...)
}
