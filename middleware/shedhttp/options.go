package shedhttp

import (
	"net/http"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Options is the configuration that the HTTP middleware share:
// nethttp.Config and echo.Config embed it, next to the few fields that
// depend on the framework (the Classify and reject hooks, skip functions).
// Only Limiter is required; zero fields take the documented defaults. Its
// fields are promoted, so cfg.Limiter reads and sets them; a composite
// literal names it: nethttp.Config{Options: shedhttp.Options{Limiter: l}}.
type Options struct {
	// Limiter is the admission controller that every request that is not
	// skipped must pass. Required.
	Limiter *shed.Limiter

	// Routes maps path prefixes to class names; the longest matching
	// prefix wins. Requests that match none, and every request when Routes
	// is empty, get DefaultClass. Each key starts with "/" (the
	// constructors reject one that does not, as for SkipPaths). Prefixes
	// match the path as the client sent it: Request.URL.RawPath when set,
	// else Request.URL.Path (see SkipPaths); that is the path Echo's
	// router matches too (echo.GetPath).
	// In Echo, a key also matches when it equals the request's route
	// pattern (Context.Path(), for example "/users/:id"; set only when the
	// middleware runs after routing, that is with Echo.Use or on a group,
	// not with Echo.Pre).
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
	// address (see IPv6KeyPrefix): with net/http the host of
	// Request.RemoteAddr; with Echo Context.RealIP(), which reads
	// forwarding headers only when Echo.IPExtractor is configured to
	// trust them.
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
	// (EnvoyTimeoutHeader, ConnectTimeoutHeader or a name of your own) or
	// gRPC's format (GRPCTimeoutHeader). ClassHeader's trust rule applies:
	// name it only if every request reaches the service through peers
	// that set or strip it (shedkit clients, a proxy that overwrites it);
	// a malformed value is ignored (see ParseDeadline), and of several
	// values the shortest counts, since a value can only shorten the
	// request's own deadline. The deadline it announces, at most
	// MaxDeadline after arrival, is the default classification's Deadline:
	// the limiter rejects at once (503, deadline_too_short) a request that
	// cannot finish before it, and the handler's context ends at it (never
	// later than its own deadline), so that the handler's outgoing calls
	// inherit it. Empty (the default): no header sets a deadline.
	DeadlineHeader string
	// MaxDeadline bounds the remaining time DeadlineHeader announces: a
	// longer one counts as MaxDeadline. Default DefaultMaxDeadline (1
	// minute). Only with DeadlineHeader.
	MaxDeadline time.Duration
	// IPv6KeyPrefix is the prefix length, in bits, of the default key of
	// an IPv6 client: all the addresses of one /64 (the default,
	// DefaultIPv6KeyPrefix) share one rate-limit bucket, because whoever
	// holds a /64 can send from any address in it. IPv4 clients, also
	// IPv4-mapped ones and those an IPv6-only server sees through
	// stateless translation (64:ff9b::/96), are keyed by their IPv4
	// address. 128 keys each IPv6
	// address apart; a shorter prefix (48, 56) groups larger networks, and
	// the clients behind them. It does not apply to keys from KeyHeader or
	// the middleware's Classify.
	IPv6KeyPrefix int

	// RateLimits maps class names to a per-key rate limit: each key may
	// send Rate requests per second with bursts of Burst in that class.
	// Classes without an entry are not rate limited. Over its rate a
	// request gets 429 before it reaches the limiter.
	RateLimits map[string]RateLimit
	// KeyStore keeps the per-key rate-limit state. Default: a MemoryStore
	// of DefaultMaxKeys buckets, created when RateLimits is not empty.
	KeyStore KeyStore
	// RateLimitDryRun reports rate-limit rejections (span attributes,
	// Observer) but lets the requests through, to roll a rate limit out
	// safely. The limiter's own dry run is shed.Config.DryRun.
	RateLimitDryRun bool
	// RateLimitCost makes each request take its cost (Classification.Cost,
	// at least 1) from its key's bucket instead of one token, so that a
	// RateLimit counts cost per second: tokens per second, or per minute
	// with rate.Every(time.Minute / n), for LLM work. It needs a KeyStore
	// that implements RequestKeyStore (MemoryStore and shedredis.Store
	// do); a cost above the bucket's Burst is never admitted, and is
	// answered 413 without a Retry-After.
	RateLimitCost bool

	// MaxBodyBytes, when > 0, bounds the request body: a request whose
	// Content-Length exceeds it gets 413 at once, and the handler reads
	// the body through http.MaxBytesReader, which fails past the bound.
	// A recorder (the adapter's Config.Recorder) records such a request
	// as refused on sight (record.KindRefused), not as an arrival.
	MaxBodyBytes int64

	// SkipPaths are request paths (such as "/healthz" or "/metrics") that
	// bypass the middleware entirely. Each must start with "/": the
	// constructors return an ErrInvalidConfig naming the entry
	// (SkipPaths[i]) for one that is empty or lacks its leading slash
	// ("healthz", a full URL), since it could never match and the endpoint
	// would be shed like any other. They match the path exactly as the
	// client sent it: Request.URL.RawPath when the client used an
	// encoding other than the canonical one, else Request.URL.Path (the
	// path Echo's router matches). A percent-encoded variant (/%68ealthz,
	// /a%2Fb for /a/b) is therefore never skipped: some routers (chi,
	// ServeMux for an encoded slash, Echo's /:name) send it to another
	// handler, and skipping it would let a client bypass the limit. Such a
	// request is limited like any other, and takes DefaultClass unless a
	// route prefix matches its raw path: keep DefaultClass the lowest
	// class (the default) so that no encoding can raise a request's
	// priority.
	SkipPaths []string
	// SkipMethods are request methods (such as "OPTIONS", for CORS
	// preflight requests) that bypass the middleware entirely, whatever
	// their path. They match Request.Method exactly (methods are
	// case-sensitive); each must be a token, as net/http accepts no other
	// method. Skip only methods whose handling is cheap: a client
	// can send as many of them as it likes.
	SkipMethods []string

	// HoldHijacked keeps the permit of a request whose handler hijacks
	// the connection (a WebSocket upgrade; in Echo through Response.Hijack
	// or http.ResponseController) until the handler returns, that is for
	// the connection's life, so that the limit bounds open connections
	// too. By default the permit is released, as Ignored, when the handler
	// hijacks the connection: it covers the request up to the upgrade, and
	// idle connections do not hold capacity that requests need. See the
	// middleware's package documentation.
	HoldHijacked bool

	// Outcome maps the final response status of an admitted request to
	// its permit's outcome. Default DefaultOutcome. In Echo, when the
	// handler returns an error and has not written a response, the status
	// is the error's (*echo.HTTPError's Code, else 500). It is not called
	// when the handler panicked or the request context ended; see the
	// middleware's package documentation.
	Outcome func(r *http.Request, status int) shed.Outcome
	// DisableNoRetryHeader stops the middleware from setting the
	// retrybudget no-retry header (Shedkit-No-Retry: overloaded) on its
	// 429 and 503 responses (a draining replica's 503 never has it).
	DisableNoRetryHeader bool

	// Observer, when set, is told about the rejections the middleware
	// decides itself (rate limiting), as shed.EventRejected events with
	// shed.ReasonRateLimited. Pass the limiter's observer to see every
	// decision in one place.
	Observer shed.Observer
	// Clock replaces time.Now for rate limiting (and nethttp's Recorder).
	// For tests.
	Clock func() time.Time
}
