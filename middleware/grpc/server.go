package grpc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// ServerConfig configures the server interceptors. Only Limiter is
// required; zero fields take the documented defaults.
type ServerConfig struct {
	// Limiter is the admission controller every call that is not skipped
	// must pass. Required.
	Limiter *shed.Limiter

	// Methods maps full method names ("/pkg.Service/Method") or prefixes
	// of them ("/pkg.Service/") to class names. An exact match wins, then
	// the longest prefix. Calls that match none get DefaultClass.
	Methods map[string]string
	// DefaultClass is the class of calls that nothing else classifies.
	// Default: the limiter's last (lowest-priority) class, so that no call
	// gets priority unless the configuration gives it one.
	DefaultClass string
	// ClassMetadata names a trusted metadata key whose value is a class
	// name; it overrides Methods when the call carries exactly one value
	// and it names a class. Name a key only if a proxy in front of the
	// service sets it and overwrites whatever a client sent. Empty (the
	// default): a client's metadata never chooses a class.
	ClassMetadata string
	// KeyMetadata names a trusted metadata key (set by a proxy or an
	// authentication layer: tenant, API key) whose value is the rate-limit
	// key. Empty, absent or repeated: the key is the peer's address (see
	// IPv6KeyPrefix).
	KeyMetadata string
	// IPv6KeyPrefix is the prefix length, in bits, of the default key of
	// an IPv6 peer: all the addresses of one /64 (the default,
	// shedhttp.DefaultIPv6KeyPrefix) share one rate-limit bucket. IPv4
	// peers are keyed by their address.
	IPv6KeyPrefix int
	// Classify, when set, refines the default classification (computed
	// from Methods, DefaultClass, ClassMetadata, KeyMetadata and the
	// call's deadline, passed as def): for example it sets the cost from
	// the request message. It runs on every call that is not skipped,
	// before rate limiting, and must be fast and safe for concurrent use.
	Classify func(ctx context.Context, call Call, def shedhttp.Classification) shedhttp.Classification

	// RateLimits maps class names to a per-key rate limit. Classes without
	// an entry are not rate limited. Over its rate a call fails with
	// ResourceExhausted before it reaches the limiter.
	RateLimits map[string]shedhttp.RateLimit
	// KeyStore keeps the per-key rate-limit state. Default: a
	// shedhttp.MemoryStore of shedhttp.DefaultMaxKeys buckets, created
	// when RateLimits is not empty. It may be shared with the HTTP
	// middleware, so that a client's rate covers both protocols.
	KeyStore shedhttp.KeyStore
	// RateLimitDryRun reports rate-limit rejections (span attributes,
	// Observer) but lets the calls through.
	RateLimitDryRun bool

	// SkipMethods are full method names (health checks, reflection) that
	// bypass the interceptors entirely.
	SkipMethods []string

	// Outcome maps the handler's error to its permit's outcome. Default
	// DefaultOutcome. It is not called when the handler panicked or the
	// call's context ended; see the package documentation.
	Outcome func(call Call, err error) shed.Outcome

	// NoRetryPushback makes every rejection carry a negative
	// grpc-retry-pushback-ms ("do not retry"), as the HTTP middleware's
	// Shedkit-No-Retry header does, instead of the limiter's hint. Use it
	// when retries belong to an outer layer only.
	NoRetryPushback bool

	// Observer, when set, is told about the rejections the interceptors
	// decide themselves (rate limiting), as shed.EventRejected events
	// with shed.ReasonRateLimited.
	Observer shed.Observer
	// Clock replaces time.Now for rate limiting. For tests.
	Clock func() time.Time
}

// Call describes the call being admitted, for Classify and Outcome.
type Call struct {
	// FullMethod is the method's full name, "/pkg.Service/Method".
	FullMethod string
	// Request is the request message of a unary call, nil for streams.
	Request any
	// Stream is true for streaming calls; ClientStream and ServerStream
	// say which side streams.
	Stream, ClientStream, ServerStream bool
}

// clientBound reports whether the call's duration is set by its client:
// a client-streaming or bidirectional stream lasts as long as the client
// keeps sending.
func (c *Call) clientBound() bool { return c.ClientStream }

// ErrInvalidConfig is wrapped by the configuration errors of NewServer and
// NewClient. It is shedhttp.ErrInvalidConfig, so that one errors.Is test
// covers every shedkit middleware.
var ErrInvalidConfig = shedhttp.ErrInvalidConfig

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

type prefixRule struct {
	prefix string
	class  shed.Class
}

type rateRule struct {
	on    bool
	limit shedhttp.RateLimit
}

// Server holds the server interceptors' configuration. It is safe for
// concurrent use; one Server may serve several grpc.Servers.
type Server struct {
	lim         *shed.Limiter
	exact       map[string]shed.Class
	prefixes    []prefixRule // longest first
	defClass    shed.Class
	classMD     string
	keyMD       string
	v6Bits      int
	classify    func(context.Context, Call, shedhttp.Classification) shedhttp.Classification
	rates       [shed.MaxClasses]rateRule
	anyRate     bool
	store       shedhttp.KeyStore
	rateDryRun  bool
	skip        map[string]struct{}
	outcome     func(Call, error) shed.Outcome
	noRetry     bool
	observer    shed.Observer
	clock       func() time.Time
	classNames  []string
	needPeerKey bool
}

// NewServer validates cfg and returns the interceptors' Server, or an error
// naming the invalid field (wrapping ErrInvalidConfig).
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Limiter == nil {
		return nil, configError("Limiter", "required")
	}
	s := &Server{
		lim:        cfg.Limiter,
		classify:   cfg.Classify,
		store:      cfg.KeyStore,
		rateDryRun: cfg.RateLimitDryRun,
		outcome:    cfg.Outcome,
		noRetry:    cfg.NoRetryPushback,
		observer:   cfg.Observer,
		clock:      cfg.Clock,
	}
	for _, c := range cfg.Limiter.Snapshot().Classes {
		s.classNames = append(s.classNames, c.Name)
	}
	s.defClass = shed.Class(len(s.classNames) - 1)
	if cfg.DefaultClass != "" {
		c, err := s.class("DefaultClass", cfg.DefaultClass)
		if err != nil {
			return nil, err
		}
		s.defClass = c
	}
	if err := s.setMethods(cfg.Methods); err != nil {
		return nil, err
	}
	if err := s.setMetadata(cfg); err != nil {
		return nil, err
	}
	if err := s.setRates(cfg.RateLimits); err != nil {
		return nil, err
	}
	for i, m := range cfg.SkipMethods {
		if !strings.HasPrefix(m, "/") {
			return nil, configError(fmt.Sprintf("SkipMethods[%d]", i), "a full method name starts with \"/\", got %q", m)
		}
		if s.skip == nil {
			s.skip = make(map[string]struct{}, len(cfg.SkipMethods))
		}
		s.skip[m] = struct{}{}
	}
	if s.outcome == nil {
		s.outcome = DefaultOutcome
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.needPeerKey = s.anyRate || s.classify != nil
	return s, nil
}

// class resolves a configured class name, naming field in the error.
func (s *Server) class(field, name string) (shed.Class, error) {
	c, ok := s.lim.ClassByName(name)
	if !ok {
		return 0, configError(field, "unknown class %q (the limiter's classes are %s)", name, strings.Join(s.classNames, ", "))
	}
	return c, nil
}

func (s *Server) setMethods(methods map[string]string) error {
	if len(methods) > 0 {
		s.exact = make(map[string]shed.Class, len(methods))
	}
	for m, name := range methods {
		field := fmt.Sprintf("Methods[%q]", m)
		if !strings.HasPrefix(m, "/") {
			return configError(field, "a full method name or prefix starts with \"/\"")
		}
		c, err := s.class(field, name)
		if err != nil {
			return err
		}
		s.exact[m] = c
		s.prefixes = append(s.prefixes, prefixRule{m, c})
	}
	sort.Slice(s.prefixes, func(i, j int) bool {
		if a, b := len(s.prefixes[i].prefix), len(s.prefixes[j].prefix); a != b {
			return a > b
		}
		return s.prefixes[i].prefix < s.prefixes[j].prefix
	})
	return nil
}

func (s *Server) setMetadata(cfg ServerConfig) error {
	for _, f := range []struct {
		field, key string
		dst        *string
	}{{"ClassMetadata", cfg.ClassMetadata, &s.classMD}, {"KeyMetadata", cfg.KeyMetadata, &s.keyMD}} {
		if f.key == "" {
			continue
		}
		if !validMetadataKey(f.key) {
			return configError(f.field, "invalid metadata key %q", f.key)
		}
		// gRPC lower-cases incoming metadata keys.
		*f.dst = strings.ToLower(f.key)
	}
	switch p := cfg.IPv6KeyPrefix; {
	case p == 0:
		s.v6Bits = shedhttp.DefaultIPv6KeyPrefix
	case p < 0 || p > 128:
		return configError("IPv6KeyPrefix", "must be a prefix length in [1, 128] (0 for the default %d), got %d", shedhttp.DefaultIPv6KeyPrefix, p)
	default:
		s.v6Bits = p
	}
	return nil
}

// validMetadataKey accepts what gRPC accepts in a metadata key, minus the
// binary suffix (a class name or a key is text) and the reserved "grpc-"
// prefix.
func validMetadataKey(k string) bool {
	lk := strings.ToLower(k)
	if strings.HasSuffix(lk, "-bin") || strings.HasPrefix(lk, "grpc-") {
		return false
	}
	for i := 0; i < len(lk); i++ {
		c := lk[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (s *Server) setRates(rates map[string]shedhttp.RateLimit) error {
	for name, rl := range rates {
		field := fmt.Sprintf("RateLimits[%q]", name)
		c, err := s.class(field, name)
		if err != nil {
			return err
		}
		if err := rl.Validate(); err != nil {
			return configError(field, "%v", err)
		}
		s.rates[c] = rateRule{on: true, limit: rl}
		s.anyRate = true
	}
	if s.anyRate && s.store == nil {
		st, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			return err
		}
		s.store = st
	}
	return nil
}

// UnaryInterceptor returns the unary server interceptor.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor { return s.unary }

// StreamInterceptor returns the stream server interceptor. A stream holds
// one permit for its whole life.
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
	if s.skipped(info.FullMethod) {
		return handler(ctx, req)
	}
	call := Call{FullMethod: info.FullMethod, Request: req}
	st, rej := s.admit(ctx, &call)
	if st == nil {
		return nil, s.answer(ctx, nil, rej)
	}
	// Release on every path. Without recover, a panic keeps its stack:
	// the deferred call releases the permit and the panic goes on to
	// whatever recovery interceptor sits outside.
	returned := false
	defer func() {
		if !returned {
			st.permit.Release(shed.Ignored)
		}
	}()
	resp, herr := handler(st, req)
	returned = true
	s.release(st, &call, herr)
	return resp, herr
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.skipped(info.FullMethod) {
		return handler(srv, ss)
	}
	call := Call{FullMethod: info.FullMethod, Stream: true, ClientStream: info.IsClientStream, ServerStream: info.IsServerStream}
	st, rej := s.admit(ss.Context(), &call)
	if st == nil {
		return s.answer(nil, ss, rej)
	}
	st.ServerStream = ss
	returned := false
	defer func() {
		if !returned {
			st.permit.Release(shed.Ignored)
		}
	}()
	herr := handler(srv, st)
	returned = true
	s.release(st, &call, herr)
	return herr
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
		cl = s.classify(ctx, *call, cl)
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
	cl := s.classifyCall(ctx, call)
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
					return nil, s.rateLimited(wait)
				}
				dryReason = shed.ReasonRateLimited.String()
			}
		}
	}
	p, err := s.lim.Acquire(ctx, shed.Request{Class: cl.Class, Cost: cl.Cost, Deadline: cl.Deadline})
	if err != nil {
		return nil, s.rejection(ctx, cl, err)
	}
	st := &state{ctx: ctx, permit: p}
	if n := inboundAttempt(ctx); n > 0 {
		// Like retrybudget.Propagate: a Transport (or this package's
		// Client) used by the handler applies its InboundPolicy.
		st.ctx = retrybudget.WithInboundAttempt(ctx, n)
	}
	if dryReason == "" && p.DryRun() != shed.ReasonNone {
		dryReason = p.DryRun().String()
	}
	s.annotateAdmitted(ctx, &st.permit, dryReason)
	return st, rejection{}
}

// release ends st's permit after the handler returned err. It does
// nothing when the handler released the permit itself.
func (s *Server) release(st *state, call *Call, err error) {
	if !st.permit.Valid() {
		return
	}
	var o shed.Outcome
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
	st.permit.Release(o)
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
