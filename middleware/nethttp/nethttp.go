package nethttp

import (
	"context"
	"net/http"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Config configures the middleware. Only Limiter is required; zero fields
// take the documented defaults.
type Config struct {
	// Limiter is the admission controller that every request that is not
	// skipped must pass. Required.
	Limiter *shed.Limiter

	// Routes maps path prefixes to class names; the longest matching
	// prefix wins. Requests that match none, and every request when Routes
	// is empty, get DefaultClass. Prefixes match the path as the client
	// sent it: Request.URL.RawPath when set, else Request.URL.Path (see
	// SkipPaths).
	Routes map[string]string
	// DefaultClass is the class of requests that nothing else classifies.
	// Default: the limiter's last (lowest-priority) class, so that no
	// request gets priority unless the configuration gives it one.
	DefaultClass string
	// ClassHeader names a trusted request header whose value is a class
	// name; it overrides Routes when it holds exactly one known class
	// name. Name a header only if a proxy in front of the service sets it
	// and overwrites any value a client sent. Empty (the default): no
	// header chooses a class.
	ClassHeader string
	// KeyHeader names a trusted request header (set by a proxy or an
	// authentication layer: tenant, API key) whose value is the
	// rate-limit key. Empty, absent or repeated: the key is the client's
	// address, the host of Request.RemoteAddr (see IPv6KeyPrefix).
	KeyHeader string
	// TenantFromKey holds every request to a fair share of its class for
	// its rate-limit key (KeyHeader, else the client's address, else what
	// Classify set) unless Classify set a Tenant of its own: while a
	// class is contended, a key that holds its share of the class is
	// rejected with 503 (tenant_share) and Retry-After, so that one noisy
	// tenant cannot crowd out the others (see shed.Request.Tenant). Off by
	// default: no fair share unless Classify sets Tenant.
	TenantFromKey bool
	// DeadlineHeader names a trusted request header that carries the
	// caller's remaining time, as retrybudget.Transport sends it
	// (TransportConfig.DeadlineHeader): whole milliseconds
	// (shedhttp.EnvoyTimeoutHeader, shedhttp.ConnectTimeoutHeader or a
	// name of your own) or gRPC's format (shedhttp.GRPCTimeoutHeader).
	// ClassHeader's trust rule applies: name it only if every request
	// reaches the service through peers that set or strip it (shedkit
	// clients, a proxy that overwrites it); it is read only when it occurs
	// exactly once, and a malformed value is ignored (see
	// shedhttp.ParseDeadline). The deadline it announces, at most
	// MaxDeadline after arrival, is the default classification's
	// Deadline: the limiter rejects at once (503, deadline_too_short) a
	// request that cannot finish before it, and the handler's context ends
	// at it (never later than its own deadline), so that the handler's
	// outgoing calls inherit it. Empty (the default): no header sets a
	// deadline.
	DeadlineHeader string
	// MaxDeadline bounds the remaining time DeadlineHeader announces: a
	// longer one counts as MaxDeadline. Default shedhttp.DefaultMaxDeadline
	// (1 minute). Only with DeadlineHeader.
	MaxDeadline time.Duration
	// IPv6KeyPrefix is the prefix length, in bits, of the default key of
	// an IPv6 client: all the addresses of one /64 (the default,
	// shedhttp.DefaultIPv6KeyPrefix) share one rate-limit bucket, because
	// whoever holds a /64 can send from any address in it. IPv4 clients,
	// also IPv4-mapped ones, are keyed by their address. 128 keys each
	// IPv6 address apart; a shorter prefix (48, 56) groups larger
	// networks, and the clients behind them. It does not apply to keys
	// from KeyHeader or Classify.
	IPv6KeyPrefix int
	// Classify, when set, refines the default classification (computed
	// from Routes, DefaultClass, ClassHeader and KeyHeader, passed as def):
	// for example it sets the cost from the request, or the key from an
	// authenticated identity. It runs on every request that is not
	// skipped, before rate limiting, and must be fast and safe for
	// concurrent use.
	Classify func(r *http.Request, def shedhttp.Classification) shedhttp.Classification

	// RateLimits maps class names to a per-key rate limit: each key may
	// send Rate requests per second with bursts of Burst in that class.
	// Classes without an entry are not rate limited. Over its rate a
	// request gets 429 before it reaches the limiter.
	RateLimits map[string]shedhttp.RateLimit
	// KeyStore keeps the per-key rate-limit state. Default: a
	// shedhttp.MemoryStore of shedhttp.DefaultMaxKeys buckets, created
	// when RateLimits is not empty.
	KeyStore shedhttp.KeyStore
	// RateLimitDryRun reports rate-limit rejections (span attributes,
	// Observer) but lets the requests through, to roll a rate limit out
	// safely. The limiter's own dry run is shed.Config.DryRun.
	RateLimitDryRun bool

	// MaxBodyBytes, when > 0, bounds the request body: a request whose
	// Content-Length exceeds it gets 413 at once, and the handler reads
	// the body through http.MaxBytesReader, which fails past the bound.
	MaxBodyBytes int64

	// SkipPaths are request paths (such as "/healthz" or "/metrics") that
	// bypass the middleware entirely. They match the path exactly as the
	// client sent it: Request.URL.RawPath when the client used an
	// encoding other than the canonical one, else Request.URL.Path. A
	// percent-encoded variant (/%68ealthz, /a%2Fb for /a/b) is therefore
	// never skipped: some routers (chi, and ServeMux for an encoded slash)
	// send it to another handler, and skipping it would let a client
	// bypass the limit. Such a request is limited like any other, and
	// takes DefaultClass unless a route prefix matches its raw path: keep
	// DefaultClass the lowest class (the default) so that no encoding can
	// raise a request's priority.
	SkipPaths []string
	// Skip, when set, bypasses the middleware for the requests it returns
	// true for, in addition to SkipPaths.
	Skip func(r *http.Request) bool

	// HoldHijacked keeps the permit of a request whose handler hijacks
	// the connection (a WebSocket upgrade) until the handler returns,
	// that is for the connection's life, so that the limit bounds open
	// connections too. By default the permit is released, as Ignored,
	// when the handler hijacks the connection: it covers the request up
	// to the upgrade, and idle connections do not hold capacity that
	// requests need. See the package documentation.
	HoldHijacked bool

	// Outcome maps the final response status of an admitted request to
	// its permit's outcome. Default shedhttp.DefaultOutcome. It is not
	// called when the handler panicked or the request context ended; see
	// the package documentation.
	Outcome func(r *http.Request, status int) shed.Outcome
	// Reject writes the response to a rejected request, after the
	// middleware set Retry-After and the no-retry header. Default
	// shedhttp.WriteProblem: an RFC 9457 problem body.
	Reject shedhttp.RejectFunc
	// DisableNoRetryHeader stops the middleware from setting the
	// retrybudget no-retry header (Shedkit-No-Retry: overloaded) on its
	// 429 and 503 responses.
	DisableNoRetryHeader bool

	// Observer, when set, is told about the rejections the middleware
	// decides itself (rate limiting), as shed.EventRejected events with
	// shed.ReasonRateLimited. Pass the limiter's observer to see every
	// decision in one place.
	Observer shed.Observer
	// Clock replaces time.Now for rate limiting (and Recorder). For tests.
	Clock func() time.Time

	// Recorder, when set, records a sample of the requests (class, cost,
	// decision, queue wait, latency, outcome) and the limiter's limit over
	// time, for shedsim fit; New makes it watch Limiter. Only sampled
	// requests read the clock; the others cost a few atomic adds. Start
	// and Stop it yourself (see package record). Off (nil) by default.
	Recorder *record.Recorder
}

// New returns the middleware for cfg, or an error naming the invalid field
// (wrapping shedhttp.ErrInvalidConfig).
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	e, err := core.New(core.Config{
		Limiter:              cfg.Limiter,
		Routes:               cfg.Routes,
		DefaultClass:         cfg.DefaultClass,
		ClassHeader:          cfg.ClassHeader,
		KeyHeader:            cfg.KeyHeader,
		TenantFromKey:        cfg.TenantFromKey,
		DeadlineHeader:       cfg.DeadlineHeader,
		MaxDeadline:          cfg.MaxDeadline,
		IPv6KeyPrefix:        cfg.IPv6KeyPrefix,
		RateLimits:           cfg.RateLimits,
		KeyStore:             cfg.KeyStore,
		RateLimitDryRun:      cfg.RateLimitDryRun,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		SkipPaths:            cfg.SkipPaths,
		HoldHijacked:         cfg.HoldHijacked,
		Outcome:              cfg.Outcome,
		DisableNoRetryHeader: cfg.DisableNoRetryHeader,
		Observer:             cfg.Observer,
		Clock:                cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	reject := cfg.Reject
	if reject == nil {
		reject = shedhttp.WriteProblem
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	if cfg.Recorder != nil {
		cfg.Recorder.Watch(cfg.Limiter)
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &handler{
			e:        e,
			next:     next,
			classify: cfg.Classify,
			skip:     cfg.Skip,
			reject:   reject,
			needKey:  e.NeedsKey() || cfg.Classify != nil,
			rec:      cfg.Recorder,
			lim:      cfg.Limiter,
			clock:    clock,
		}
	}, nil
}

type handler struct {
	e        *core.Engine
	next     http.Handler
	classify func(*http.Request, shedhttp.Classification) shedhttp.Classification
	skip     func(*http.Request) bool
	reject   shedhttp.RejectFunc
	needKey  bool
	rec      *record.Recorder // see record.go
	lim      *shed.Limiter
	clock    func() time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := h.e
	if e.Skip(r) || (h.skip != nil && h.skip(r)) {
		h.next.ServeHTTP(w, r)
		return
	}
	if rej, tooLarge := e.CheckBody(r); tooLarge {
		h.rejectWith(w, r, rej)
		return
	}
	cl := e.Classify(r, "")
	if cl.Key == "" && h.needKey {
		cl.Key = e.AddrKey(core.RemoteHost(r.RemoteAddr))
	}
	if h.classify != nil {
		cl = h.classify(r, cl)
	}
	rq := h.recBegin(cl)
	st, rej := e.Admit(r, cl)
	if st == nil {
		h.recRejected(&rq, rej)
		h.rejectWith(w, r, rej)
		return
	}

	r2 := r.WithContext(st)
	if r.Body != nil && r.Body != http.NoBody {
		body := r.Body
		if n := e.MaxBody(); n > 0 {
			body = http.MaxBytesReader(w, body, n)
		}
		// Time blocked reading the body is the client's, not the
		// service's: the release must not count it (see core.clientBound).
		r2.Body = st.WatchBody(body)
	}
	// The wrapper keeps every optional interface of w (Flusher, Hijacker,
	// ReaderFrom, ...) and Unwrap for http.ResponseController; it records
	// the final status and releases the permit at a hijack.
	ww := st.WrapWriter(w, true)
	// Release on every path. Without recover, a panic keeps its original
	// stack: the deferred call releases the permit and the panic goes on.
	returned := false
	defer func() {
		if !returned {
			actual := st.Permit.Cost()
			e.ReleasePanicked(st)
			h.recDone(&rq, st, actual, shed.Ignored, 0)
		}
	}()
	h.next.ServeHTTP(ww, r2)
	returned = true
	actual := st.Permit.Cost()
	o := e.Release(st, r, st.Status)
	h.recDone(&rq, st, actual, o, sentStatus(st.Status))
}

func (h *handler) rejectWith(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) {
	h.e.SetRejectHeaders(w.Header(), rej)
	h.reject(w, r, rej)
}

// Permit returns the permit of the request that ctx belongs to, or nil
// when the request was skipped or ctx is not a request's. The handler may
// read its class, cost and queue wait, Reconcile its cost, or Release it
// early (the middleware's own release then does nothing). Use it on the
// handler's goroutine, or synchronize: the middleware releases the permit
// when the handler returns.
func Permit(ctx context.Context) *shed.Permit { return core.PermitFrom(ctx) }

// Reconcile replaces the cost the request reserved with its actual cost
// (for example the tokens an LLM call really used). It returns
// shedhttp.ErrNoPermit when ctx carries no permit, shed.ErrReleased after
// the permit was released.
func Reconcile(ctx context.Context, actual int64) error { return core.Reconcile(ctx, actual) }
