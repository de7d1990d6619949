package grpc

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// UnaryInterceptor returns the unary server interceptor.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor { return s.unary }

// StreamInterceptor returns the stream server interceptor. A stream holds
// one permit for its whole life, unless its method is one of
// PerMessageStreams.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor { return s.stream }

// ServerOptions returns both interceptors as server options, chained after
// any interceptors set by earlier options: put recovery interceptors
// before them (outside), so that a panic still releases its permit first.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.unary), grpc.ChainStreamInterceptor(s.stream)}
}

func (s *Server) skipped(method string) bool {
	if s.skip == nil {
		return false
	}
	_, ok := s.skip[method]
	return ok
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.skipped(info.FullMethod) || s.holds(ctx) {
		return handler(ctx, req)
	}
	call := Call{FullMethod: info.FullMethod, Request: req}
	st, rej := s.admit(ctx, &call)
	if st == nil {
		return nil, s.answer(ctx, rej)
	}
	// Release on every path. Without recover, a panic keeps its stack:
	// the deferred call releases the permit and the panic goes on to
	// whatever recovery interceptor sits outside.
	returned := false
	defer func() {
		if !returned {
			s.releasePanicked(st)
		}
	}()
	resp, herr := handler(st, req)
	returned = true
	s.finish(st, &call, herr)
	return resp, herr
}

// classifyCall returns the default classification of a call: the class
// from the trusted class metadata, else from Methods, else DefaultClass;
// the key from the trusted key metadata, else the peer's address when a
// key is needed; the deadline from the context.
func (s *Server) classifyCall(ctx context.Context, call *Call) shedhttp.Classification {
	cl := shedhttp.Classification{Class: s.classOf(ctx, call.FullMethod)}
	if s.keyMD != "" {
		if v := metadata.ValueFromIncomingContext(ctx, s.keyMD); len(v) == 1 && v[0] != "" {
			cl.Key = v[0]
		}
	}
	if cl.Key == "" && s.needPeerKey {
		cl.Key = s.peerKey(ctx)
	}
	if d, ok := ctx.Deadline(); ok {
		cl.Deadline = d
	}
	if s.classify != nil {
		key := cl.Key
		cl = s.classify(ctx, *call, cl)
		s.reclassified(key, cl.Key)
		// The earlier of Classify's and the call's own, as the HTTP
		// middleware takes it: a Classify cannot extend the call.
		if d, ok := ctx.Deadline(); ok && (cl.Deadline.IsZero() || cl.Deadline.After(d)) {
			cl.Deadline = d
		}
	}
	return cl
}

func (s *Server) classOf(ctx context.Context, method string) shed.Class {
	if s.classMD != "" {
		// Exactly one value: a repeated key means a client value travelled
		// next to the proxy's, and neither can be trusted.
		if v := metadata.ValueFromIncomingContext(ctx, s.classMD); len(v) == 1 {
			if c, ok := s.lim.ClassByName(v[0]); ok {
				return c
			}
		}
	}
	if s.exact == nil {
		return s.defClass
	}
	if c, ok := s.exact[method]; ok {
		return c
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(method, p.prefix) {
			return p.class
		}
	}
	return s.defClass
}

// peerKey returns the default rate-limit key: the peer's address.
func (s *Server) peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return addrKey(remoteHost(p.Addr.String()), s.v6Bits)
}

// admit rate limits and admits the call. On admission it returns the
// call's state; else nil and the rejection to answer with.
func (s *Server) admit(ctx context.Context, call *Call) (*state, rejection) {
	p, dryReason, rq, deadline, rej := s.acquire(ctx, call)
	if rej.err != nil {
		return nil, rej
	}
	st := &state{ctx: ctx, permit: p, rq: rq, lim: s.lim}
	if d, ok := ctx.Deadline(); !deadline.IsZero() && (!ok || deadline.Before(d)) {
		// Classify shortened the call's deadline: the handler's context
		// ends at it, as the HTTP middleware's does.
		st.ctx, st.cancel = context.WithDeadline(ctx, deadline)
	}
	if n := inboundAttempt(ctx); n > 0 {
		// Like retrybudget.Propagate: a Transport (or this package's
		// Client) used by the handler applies its InboundPolicy. Built
		// on st.ctx, not ctx: a deadline Classify set above must stay.
		st.ctx = retrybudget.WithInboundAttempt(st.ctx, n)
	}
	s.annotateAdmitted(ctx, &st.permit, dryReason)
	return st, rejection{}
}

// acquire classifies, rate limits and admits one unit of work: a call, or
// a message of a stream admitted per message. It returns the permit, its
// recording (a rejection is recorded here), the deadline it was
// classified with and, when a dry run let it through, the reason it would
// have been rejected.
func (s *Server) acquire(ctx context.Context, call *Call) (p shed.Permit, dryReason string, rq recording, deadline time.Time, rej rejection) {
	cl := s.classifyCall(ctx, call)
	rq = s.recBegin(&cl)
	p, dryReason, rej = s.limit(ctx, &cl)
	if rej.err != nil {
		s.recRejected(&rq, &rej)
		return shed.Permit{}, "", rq, time.Time{}, rej
	}
	rq.live = true
	return p, dryReason, rq, cl.Deadline, rejection{}
}

// limit rate limits and admits the unit of work classified as cl.
func (s *Server) limit(ctx context.Context, cl *shedhttp.Classification) (shed.Permit, string, rejection) {
	dryReason := ""
	if s.anyRate && int(cl.Class) < len(s.classNames) {
		if rule := &s.rates[cl.Class]; rule.on {
			now := s.clock()
			if ok, wait := s.store.AllowAt(now, cl.Class, cl.Key, rule.limit); !ok {
				if o := s.observer; o != nil {
					o.Observe(shed.Event{Kind: shed.EventRejected, Time: now, Class: cl.Class, Reason: shed.ReasonRateLimited, Cost: max(cl.Cost, 1), DryRun: s.rateDryRun, InFlight: s.lim.InFlight()})
				}
				if !s.rateDryRun {
					s.annotateRejected(ctx, shed.ReasonRateLimited.String(), cl.Class, cl.Cost, true)
					return shed.Permit{}, "", s.rateLimited(wait)
				}
				dryReason = shed.ReasonRateLimited.String()
			}
		}
	}
	tenant := cl.Tenant
	if tenant == "" && s.tenantKey {
		tenant = cl.Key
	}
	p, err := s.lim.Acquire(ctx, shed.Request{Class: cl.Class, Cost: cl.Cost, Deadline: cl.Deadline, Tenant: tenant})
	if err != nil {
		return shed.Permit{}, "", s.rejection(ctx, *cl, err)
	}
	if dryReason == "" && p.DryRun() != shed.ReasonNone {
		dryReason = p.DryRun().String()
	}
	return p, dryReason, rejection{}
}

// finish releases st's permit after the handler returned err, and
// records the work.
func (s *Server) finish(st *state, call *Call, err error) {
	if st.cancel != nil {
		defer st.cancel()
	}
	actual := st.permit.Cost()
	o := s.release(st, call, err)
	s.recDone(&st.rq, &st.permit, actual, o, err, false)
}

// releasePanicked releases st's permit, and records the work, when the
// handler panicked: a bug is not an overload signal, nor a latency
// sample.
func (s *Server) releasePanicked(st *state) {
	if st.cancel != nil {
		defer st.cancel()
	}
	actual := st.permit.Cost()
	st.permit.Release(shed.Ignored)
	s.recDone(&st.rq, &st.permit, actual, shed.Ignored, nil, true)
}

// release ends st's permit after the handler returned err, and returns
// the outcome. It does nothing, and returns Ignored, when the handler
// released the permit itself.
func (s *Server) release(st *state, call *Call, err error) shed.Outcome {
	if !st.permit.Valid() {
		return shed.Ignored
	}
	// Released in a defer: a panicking Outcome still returns the permit
	// (as Ignored) while its panic goes on to a recovery interceptor.
	o := shed.Ignored
	defer func() { st.permit.Release(o) }()
	switch cerr := st.ctx.Err(); {
	case cerr == nil:
		o = s.outcome(*call, err)
	case pastDeadline(st.ctx, cerr) && !call.clientBound():
		o = shed.Dropped // it did not finish in time
	default:
		// The client went away, or a stream it feeds outlived its
		// deadline: neither says anything about capacity.
		o = shed.Ignored
	}
	return o
}

// deadlineSlack is how close to its deadline a cancelled call counts as
// one whose deadline passed. A gRPC client whose deadline fires cancels
// the stream (RST_STREAM CANCEL) at about the moment the server's own
// timer for the same deadline fires (the server's deadline is the
// client's plus the one-way latency), so the server often sees a
// cancellation, not a deadline, for a call that ran out of time.
const deadlineSlack = 10 * time.Millisecond

// pastDeadline reports whether a call whose context ended with cerr ran out
// of time: its deadline passed, or it was cancelled at its deadline.
func pastDeadline(ctx context.Context, cerr error) bool {
	if errors.Is(cerr, context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < deadlineSlack
}

// state is the per-call state of an admitted call. It is also the
// handler's context (it answers Value for its own key, which saves the
// allocation of context.WithValue) and, for streams, the handler's
// ServerStream (its Context is the state), so that admission allocates
// one object.
type state struct {
	ctx               context.Context // the call's
	grpc.ServerStream                 // nil for unary calls
	permit            shed.Permit
	rq                recording          // ServerConfig.Recorder's, for permit
	cancel            context.CancelFunc // of a deadline Classify set, if any
	lim               *shed.Limiter      // the permit's (see holds)
}

// holds reports whether ctx is the context of a call that interceptors on
// s's limiter already admitted: they are chained twice on the server. The
// inner ones must let it through: a second permit of the same limiter for
// the same call would wait for the first, which the call itself holds,
// and at a small limit an idle server would refuse every call.
func (s *Server) holds(ctx context.Context) bool {
	st, ok := ctx.Value(permitKey{}).(*state)
	return ok && st.lim == s.lim
}

// Deadline, Done and Err are the call context's.
func (st *state) Deadline() (time.Time, bool) { return st.ctx.Deadline() }
func (st *state) Done() <-chan struct{}       { return st.ctx.Done() }
func (st *state) Err() error                  { return st.ctx.Err() }

type permitKey struct{}

// Value returns st for the interceptors' key and defers to the call's
// context for every other key.
func (st *state) Value(key any) any {
	if key == (permitKey{}) {
		return st
	}
	return st.ctx.Value(key)
}

// Context returns the handler's context: the state itself.
func (st *state) Context() context.Context { return st }

// String names the context for debugging.
func (st *state) String() string { return "shedgrpc.WithPermit" }

// Permit returns the permit of the call ctx belongs to, or nil when the
// call was skipped or ctx is not a call's. The handler may read its class,
// cost and queue wait, Reconcile its cost, or Release it early (the
// interceptor's own release then does nothing). Use it on the handler's
// goroutine, or synchronize: the interceptor releases the permit when the
// handler returns.
func Permit(ctx context.Context) *shed.Permit {
	if ctx == nil {
		return nil
	}
	if st, ok := ctx.Value(permitKey{}).(*state); ok {
		return &st.permit
	}
	return nil
}

// Reconcile replaces the cost the call reserved with its actual cost. It
// returns shedhttp.ErrNoPermit when ctx carries no permit, shed.ErrReleased
// after the permit was released.
func Reconcile(ctx context.Context, actual int64) error {
	p := Permit(ctx)
	if p == nil {
		return shedhttp.ErrNoPermit
	}
	return p.Reconcile(actual)
}
