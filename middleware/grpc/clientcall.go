package grpc

import (
	"context"
	"strconv"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shedkit/shedkit/retrybudget"
)

// logicalCall is the state of one logical unary call.
type logicalCall struct {
	c        *Client
	ctx      context.Context // the caller's
	lctx     context.Context // with the logical span
	span     trace.Span
	rec      bool
	method   string
	spanName string // of the attempt spans, see startSpan
	tg       *target
	attrs    []attribute.KeyValue // attempt span attributes, when recording
	done     func(error)          // reports the outcome to the breaker, once, when set
	outcome  error                // for done: the last attempt's, see breakerOutcome
	attempts int

	// The invocation, repeated per attempt.
	req, reply any
	cc         *grpc.ClientConn
	invoker    grpc.UnaryInvoker
	opts       []grpc.CallOption
}

func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	now := time.Now()
	ctx = withoutAttempt(ctx)
	lc := logicalCall{c: c, ctx: ctx, method: method, tg: c.targets.get(cc.Target()), outcome: errAttemptExcluded,
		req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
	c.inst.requests.Add(ctx, 1, c.inst.clientOpts...)
	if c.budget != nil {
		c.budget.DepositAt(now)
	}
	lc.startSpan(opts)
	err := lc.runGuarded(now)
	if lc.done != nil {
		lc.done(lc.outcome) // one logical call, one count
	}
	if lc.rec {
		code := status.Code(err)
		lc.span.SetAttributes(attrAttempts.Int(lc.attempts), attrRPCStatus.String(codeName(code)))
		if err != nil {
			lc.span.SetAttributes(attrErrorType.String(errorType(err, code)))
			lc.span.SetStatus(otelcodes.Error, "")
		}
	}
	lc.span.End()
	return err
}

// startSpan starts the logical span. Its name and rpc.method are the
// method's only when the client recognises it (knownMethod), else fixed
// (otherSpanName, otherMethod), so that the names a proxy's clients send
// cannot multiply span names.
func (lc *logicalCall) startSpan(opts []grpc.CallOption) {
	c := lc.c
	name := methodName(lc.method)
	known := c.knownMethod(lc.method, opts)
	logicalName := "retry " + otherSpanName // a constant: no allocation
	lc.spanName = otherSpanName
	if known {
		lc.spanName, logicalName = name, "retry "+name
	}
	lc.lctx, lc.span = c.tracer.Start(lc.ctx, logicalName, internalKind)
	lc.rec = lc.span.IsRecording()
	if !lc.rec {
		return
	}
	lc.attrs = make([]attribute.KeyValue, 0, 3+len(lc.tg.attrs))
	if known {
		lc.attrs = append(lc.attrs, rpcSystemGRPC, attrRPCMethod.String(name))
	} else {
		lc.attrs = append(lc.attrs, rpcSystemGRPC, attrRPCMethod.String(otherMethod), attrRPCMethodIn.String(methodOriginal(name)))
	}
	lc.attrs = append(lc.attrs, lc.tg.attrs...)
	lc.span.SetAttributes(lc.attrs...)
}

// errorType returns error.type for a failed call: the denial reason when
// nothing was sent, else the status code's name.
func errorType(err error, code codes.Code) string {
	if ce, ok := err.(*callError); ok && ce.re.Attempts == 0 {
		return ce.re.Reason.String()
	}
	return codeName(code)
}

// deny records that an attempt was not made, for reason.
func (lc *logicalCall) deny(reason retrybudget.Reason) {
	lc.c.inst.denied.Add(lc.ctx, 1, lc.c.inst.reasonOpts[reason]...)
	if lc.rec {
		lc.span.AddEvent(eventDenied, trace.WithAttributes(attrReason.String(reason.String())))
	}
}

// runGuarded is run, except that a panic below it (a later interceptor,
// a codec, or a Sleep, Rand or Retryable hook) still reports to the
// breaker, as excluded, and ends the logical span before it goes on:
// otherwise a half-open breaker would count its probe in flight for ever
// and refuse every later call to the target.
func (lc *logicalCall) runGuarded(now time.Time) error {
	returned := false
	defer func() {
		if !returned {
			if lc.done != nil {
				lc.done(errAttemptExcluded)
			}
			lc.span.SetStatus(otelcodes.Error, "panic")
			lc.span.End()
		}
	}()
	err := lc.run(now)
	returned = true
	return err
}

func (lc *logicalCall) run(now time.Time) error {
	c := lc.c
	if err := lc.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if dl, ok := lc.ctx.Deadline(); ok && c.minAttempt > 0 && dl.Sub(now) < c.minAttempt {
		lc.deny(retrybudget.ReasonDeadline)
		return notSent(retrybudget.ReasonDeadline)
	}
	if reason := lc.begin(now); reason != retrybudget.ReasonNone {
		lc.deny(reason)
		return notSent(reason)
	}
	canRetry := c.retryable == nil || c.retryable(lc.method)
	for n := 1; ; n++ {
		start := now
		tr, err := lc.attempt(n)
		code := status.Code(err)
		pb, pushback := parsePushback(tr)
		callerDone := err != nil && lc.ctx.Err() != nil
		if lc.done != nil {
			lc.outcome = breakerOutcome(code, pb, callerDone)
		}
		retryable := canRetry && !callerDone &&
			(code == codes.Unavailable || code == codes.ResourceExhausted && pb == pushbackWait)
		if c.throttle == nil && !retryable {
			return err // the common success path reads the clock once
		}
		end := time.Now()
		lc.accepted(end, code, pb)
		if !retryable {
			return err
		}
		reason, wait := lc.decide(n, pb, pushback, end, end.Sub(start))
		if reason == retrybudget.ReasonNone {
			reason = lc.admit(end)
		}
		if reason != retrybudget.ReasonNone {
			lc.deny(reason)
			return notRetried(err, reason, n)
		}
		if lc.rec {
			lc.span.AddEvent(eventBackoff, trace.WithAttributes(attrAttempt.Int(n+1), attrDelay.Float64(wait.Seconds())))
		}
		if serr := c.sleep(lc.ctx, wait); serr != nil {
			return status.FromContextError(serr).Err()
		}
		now = time.Now()
	}
}

// accepted tells the throttle whether the target accepted the attempt
// (anything but a rejection for overload or quota, or a timeout) or not.
// A cancelled attempt has no known outcome and is not counted.
func (lc *logicalCall) accepted(now time.Time, code codes.Code, pb pushbackKind) {
	if lc.c.throttle == nil {
		return
	}
	switch {
	case code == codes.Canceled:
	case code == codes.Unavailable, code == codes.ResourceExhausted, code == codes.DeadlineExceeded,
		pb != pushbackNone:
		lc.c.throttle.RejectAt(now)
	default:
		lc.c.throttle.AcceptAt(now)
	}
}

// begin lets the first attempt through the breaker, which counts the
// logical call from then on, and the throttle.
func (lc *logicalCall) begin(now time.Time) retrybudget.Reason {
	if br := lc.tg.br; br != nil {
		done, err := br.Allow()
		if err != nil {
			return retrybudget.ReasonBreaker
		}
		lc.done = done
	}
	if th := lc.c.throttle; th != nil && !th.AllowAt(now, lc.c.rand()) {
		return retrybudget.ReasonThrottle // nothing sent: the outcome stays excluded
	}
	return retrybudget.ReasonNone
}

// decide applies the rules that consume nothing, and returns the wait
// before the next attempt.
func (lc *logicalCall) decide(n int, pb pushbackKind, pushback time.Duration, now time.Time, took time.Duration) (retrybudget.Reason, time.Duration) {
	c := lc.c
	if pb == pushbackStop {
		return retrybudget.ReasonNoRetryHeader, 0
	}
	if n >= c.maxAttempts {
		return retrybudget.ReasonMaxAttempts, 0
	}
	switch in := retrybudget.InboundAttempt(lc.ctx); {
	case c.inbound == retrybudget.InboundNoRetryOnRetry && in >= 2,
		c.inbound == retrybudget.InboundNoRetry && in >= 1:
		return retrybudget.ReasonInbound, 0
	}
	wait := c.backoff(n)
	if pb == pushbackWait {
		if pushback > c.maxPushback {
			return retrybudget.ReasonRetryAfter, 0
		}
		wait = max(wait, pushback)
	}
	if dl, ok := lc.ctx.Deadline(); ok && now.Add(wait+max(c.minAttempt, took)).After(dl) {
		return retrybudget.ReasonDeadline, 0
	}
	if br := lc.tg.br; br != nil && br.State() == gobreaker.StateOpen {
		return retrybudget.ReasonBreaker, 0
	}
	return retrybudget.ReasonNone, wait
}

// admit asks the throttle, then the budget, for a retry. They are asked
// last, so that nothing is consumed for a retry another rule forbids, and
// the shared budget after the throttle, so that a retry the throttle
// rejects costs it nothing.
func (lc *logicalCall) admit(now time.Time) retrybudget.Reason {
	c := lc.c
	if c.throttle != nil && !c.throttle.AllowAt(now, c.rand()) {
		return retrybudget.ReasonThrottle
	}
	if c.budget != nil && !c.budget.TryWithdrawAt(now) {
		return retrybudget.ReasonBudget
	}
	return retrybudget.ReasonNone
}

// withoutAttempt returns ctx without an attempt number in its outgoing
// metadata: a service that forwards its inbound metadata passes on its
// caller's, and the upstream, which reads only a lone value, would see
// none of this Client's attempts.
func withoutAttempt(ctx context.Context) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok || len(md[AttemptMetadata]) == 0 {
		return ctx
	}
	md.Delete(AttemptMetadata) // md is a copy
	return metadata.NewOutgoingContext(ctx, md)
}

// attemptValues are the attempt numbers as metadata values.
var attemptValues = func() (v [maxAttemptsLimit + 1]string) {
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// attempt sends attempt n on the wire, under its own CLIENT span when the
// logical span records and attempt spans are on.
func (lc *logicalCall) attempt(n int) (metadata.MD, error) {
	c := lc.c
	lc.attempts = n
	actx := lc.lctx
	var aspan trace.Span
	if lc.rec && c.attemptSpans {
		attrs := lc.attrs
		if n > 1 {
			attrs = append(attrs[:len(attrs):len(attrs)], attrResendCount.Int(n-1))
		}
		actx, aspan = c.tracer.Start(lc.lctx, lc.spanName, clientKind, trace.WithAttributes(attrs...))
		// A panic below (a later interceptor, a codec) would otherwise
		// leave the span open: never exported, the trace would lose the
		// attempt that failed. runGuarded ends the logical span the same way.
		defer func() {
			if aspan != nil {
				aspan.SetAttributes(attrErrorType.String("panic"))
				aspan.SetStatus(otelcodes.Error, "panic")
				aspan.End()
			}
		}()
	}
	actx = metadata.AppendToOutgoingContext(actx, AttemptMetadata, attemptValues[n])
	if c.attemptSpans {
		actx = inject(actx, c.propagator)
	}
	if n == 1 {
		c.inst.attempts.Add(lc.ctx, 1, c.inst.firstOpts...)
	} else {
		c.inst.attempts.Add(lc.ctx, 1, c.inst.resendOpts...)
	}
	var tr metadata.MD
	// The caller's options come first; gRPC fills every Trailer option.
	err := lc.invoker(actx, lc.method, lc.req, lc.reply, lc.cc, append(lc.opts[:len(lc.opts):len(lc.opts)], grpc.Trailer(&tr))...)
	if aspan != nil {
		code := status.Code(err)
		aspan.SetAttributes(attrRPCStatus.String(codeName(code)))
		if err != nil {
			aspan.SetAttributes(attrErrorType.String(codeName(code)))
			aspan.SetStatus(otelcodes.Error, "")
		}
		aspan.End()
		aspan = nil // ended: nothing left for the panic guard
	}
	return tr, err
}

// inject puts the trace context of ctx into its outgoing metadata, when
// the propagator carries anything.
func inject(ctx context.Context, p propagation.TextMapPropagator) context.Context {
	if len(p.Fields()) == 0 || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	p.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// metadataCarrier adapts metadata.MD to propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
