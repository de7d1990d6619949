package echo

import (
	"net/http"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// Config configures the middleware, in Echo's conventions. Only Limiter
// is required; zero fields take the documented defaults.
type Config struct {
	// Skipper defines a function to skip the middleware. Default: skip
	// nothing (besides SkipPaths).
	Skipper middleware.Skipper

	// Limiter is the admission controller that every request that is not
	// skipped must pass. Required.
	Limiter *shed.Limiter

	// Routes maps Echo routes to class names. A key matches when it equals
	// the request's route pattern (Context.Path(), for example
	// "/users/:id"; set only when the middleware runs after routing, that
	// is with Echo.Use or on a group, not with Echo.Pre), or else when it is
	// a prefix of the path Echo's router matches (Request.URL.RawPath when
	// set, else Request.URL.Path, as echo.GetPath); the longest matching
	// prefix wins. Requests that match none get DefaultClass.
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
	// address, Context.RealIP(), which reads forwarding headers only when
	// Echo.IPExtractor is configured to trust them (see IPv6KeyPrefix).
	KeyHeader string
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
	// skipped, before rate limiting, and must be fast.
	Classify func(c echov4.Context, def shedhttp.Classification) shedhttp.Classification

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
	// bypass the middleware entirely. They match exactly the path Echo's
	// router matches (Request.URL.RawPath when set, else Request.URL.Path,
	// as echo.GetPath), so a percent-encoded variant such as /%68ealthz,
	// which Echo routes to another handler (/:name), is not skipped.
	SkipPaths []string

	// HoldHijacked keeps the permit of a request whose handler hijacks
	// the connection (a WebSocket upgrade, through Response.Hijack or
	// http.ResponseController) until the handler returns, that is for the
	// connection's life, so that the limit bounds open connections too.
	// By default the permit is released, as Ignored, when the handler
	// hijacks the connection: it covers the request up to the upgrade,
	// and idle connections do not hold capacity that requests need. See
	// the package documentation.
	HoldHijacked bool

	// Outcome maps the final response status of an admitted request to
	// its permit's outcome. Default shedhttp.DefaultOutcome. When the
	// handler returns an error and has not written a response, the status
	// is the error's (*echo.HTTPError's Code, else 500). It is not called
	// when the handler panicked or the request context ended.
	Outcome func(r *http.Request, status int) shed.Outcome
	// RejectHandler writes the response to a rejected request, after the
	// middleware set Retry-After and the no-retry header; its error is
	// returned up the chain. Default: an RFC 9457 problem body written
	// with shedhttp.WriteProblem, and a nil error.
	RejectHandler func(c echov4.Context, rej shedhttp.Rejection) error
	// DisableNoRetryHeader stops the middleware from setting the
	// retrybudget no-retry header (Shedkit-No-Retry: overloaded) on its
	// 429 and 503 responses.
	DisableNoRetryHeader bool

	// Observer, when set, is told about the rejections the middleware
	// decides itself (rate limiting), as shed.EventRejected events with
	// shed.ReasonRateLimited.
	Observer shed.Observer
	// Clock replaces time.Now for rate limiting. For tests.
	Clock func() time.Time
}

// New returns the middleware for cfg, or an error naming the invalid field
// (wrapping shedhttp.ErrInvalidConfig). Unlike Echo's own XxxWithConfig
// functions it does not panic on a bad configuration.
func New(cfg Config) (echov4.MiddlewareFunc, error) {
	e, err := core.New(core.Config{
		Limiter:              cfg.Limiter,
		Routes:               cfg.Routes,
		DefaultClass:         cfg.DefaultClass,
		ClassHeader:          cfg.ClassHeader,
		KeyHeader:            cfg.KeyHeader,
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
	skipper := cfg.Skipper
	if skipper == nil {
		skipper = middleware.DefaultSkipper
	}
	reject := cfg.RejectHandler
	if reject == nil {
		reject = writeProblem
	}
	classify := cfg.Classify
	needKey := e.NeedsKey() || classify != nil

	rejectWith := func(c echov4.Context, rej shedhttp.Rejection) error {
		e.SetRejectHeaders(c.Response().Header(), rej)
		return reject(c, rej)
	}
	return func(next echov4.HandlerFunc) echov4.HandlerFunc {
		return func(c echov4.Context) error {
			r := c.Request()
			if skipper(c) || e.Skip(r) {
				return next(c)
			}
			if rej, tooLarge := e.CheckBody(r); tooLarge {
				return rejectWith(c, rej)
			}
			cl := e.Classify(r, c.Path())
			if cl.Key == "" && needKey {
				cl.Key = e.AddrKey(c.RealIP())
			}
			if classify != nil {
				cl = classify(c, cl)
			}
			st, rej := e.Admit(r, cl)
			if st == nil {
				return rejectWith(c, rej)
			}

			r2 := r.WithContext(st)
			if r.Body != nil && r.Body != http.NoBody {
				body := r.Body
				if n := e.MaxBody(); n > 0 {
					body = http.MaxBytesReader(c.Response().Writer, body, n)
				}
				// Time blocked reading the body is the client's, not the
				// service's: the release must not count it.
				r2.Body = st.WatchBody(body)
			}
			c.SetRequest(r2)
			// Echo's Response records the status itself; the wrapper is
			// there to see a hijack (Response.Hijack goes through it).
			res := c.Response()
			w := res.Writer
			res.Writer = st.WrapWriter(w, false)
			// Release on every path. Without recover, a panic keeps its
			// original stack: the deferred call releases the permit and
			// the panic goes on (to Echo's Recover middleware, if any).
			returned := false
			defer func() {
				if !returned {
					res.Writer = w
					e.ReleasePanicked(st)
				}
			}()
			err := next(c)
			returned = true
			res.Writer = w
			c.SetRequest(r)
			e.Release(st, r, status(c, err))
			return err
		}
	}, nil
}

// ToMiddleware is New(cfg), for Echo's Config.ToMiddleware convention.
func (cfg Config) ToMiddleware() (echov4.MiddlewareFunc, error) { return New(cfg) }

// status is the response status of a request whose handler returned err:
// what was written, else what Echo's default error handler will write.
func status(c echov4.Context, err error) int {
	res := c.Response()
	if err == nil || res.Committed {
		return res.Status
	}
	// As Echo's DefaultHTTPErrorHandler decides it.
	if he, ok := err.(*echov4.HTTPError); ok {
		if in, ok := he.Internal.(*echov4.HTTPError); ok {
			return in.Code
		}
		return he.Code
	}
	return http.StatusInternalServerError
}

func writeProblem(c echov4.Context, rej shedhttp.Rejection) error {
	shedhttp.WriteProblem(c.Response(), c.Request(), rej)
	return nil
}

// Permit returns the permit of the request c serves, or nil when the
// request was skipped. The handler may read its class, cost and queue
// wait, Reconcile its cost, or Release it early (the middleware's own
// release then does nothing). Use it on the handler's goroutine, or
// synchronize: the middleware releases the permit when the handler
// returns. Code that only has the request context can use
// nethttp.Permit(c.Request().Context()), which is the same.
func Permit(c echov4.Context) *shed.Permit { return core.PermitFrom(c.Request().Context()) }

// Reconcile replaces the cost the request reserved with its actual cost
// (for example the tokens an LLM call really used). It returns
// shedhttp.ErrNoPermit when the request has no permit, shed.ErrReleased
// after the permit was released.
func Reconcile(c echov4.Context, actual int64) error {
	return core.Reconcile(c.Request().Context(), actual)
}
