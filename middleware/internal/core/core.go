// Package core is the framework-neutral engine behind the nethttp and echo
// middleware: configuration, default classification, rate limiting,
// admission, rejection headers, span attributes and permit release. The
// adapters only translate their framework's request, response and error
// conventions, so both behave the same.
package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// The retry protocol agreed with package retrybudget. They are mirrored
// here rather than imported, so that mounting the middleware does not link
// the retrying client (its breaker and telemetry); a test checks that the
// values match retrybudget.NoRetryHeader and retrybudget.NoRetryValue.
const (
	NoRetryHeader = "Shedkit-No-Retry"
	NoRetryValue  = "overloaded"
)

var noRetryValues = []string{NoRetryValue}[:1:1]

// Config is the framework-neutral configuration; the adapters document
// each field on their own Config.
type Config struct {
	Limiter              *shed.Limiter
	Routes               map[string]string
	DefaultClass         string
	ClassHeader          string
	KeyHeader            string
	IPv6KeyPrefix        int
	RateLimits           map[string]shedhttp.RateLimit
	KeyStore             shedhttp.KeyStore
	RateLimitDryRun      bool
	MaxBodyBytes         int64
	SkipPaths            []string
	HoldHijacked         bool
	Outcome              func(r *http.Request, status int) shed.Outcome
	DisableNoRetryHeader bool
	Observer             shed.Observer
	Clock                func() time.Time
}

type route struct {
	prefix string
	class  shed.Class
}

type rateRule struct {
	on    bool
	limit shedhttp.RateLimit
}

// Engine runs the checks that do not depend on the framework.
type Engine struct {
	lim          *shed.Limiter
	routes       []route // longest prefix first
	exact        map[string]shed.Class
	defClass     shed.Class
	classHeader  string
	keyHeader    string
	v6Bits       int
	rates        [shed.MaxClasses]rateRule
	anyRate      bool
	store        shedhttp.KeyStore
	rateDryRun   bool
	maxBody      int64
	skip         map[string]struct{}
	holdHijacked bool
	outcome      func(r *http.Request, status int) shed.Outcome
	noRetry      bool
	observer     shed.Observer
	clock        func() time.Time
	classNames   []string
	bodyTooLarge shedhttp.Rejection
}

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", shedhttp.ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Limiter == nil {
		return nil, configError("Limiter", "required")
	}
	e := &Engine{
		lim:          cfg.Limiter,
		store:        cfg.KeyStore,
		rateDryRun:   cfg.RateLimitDryRun,
		maxBody:      cfg.MaxBodyBytes,
		outcome:      cfg.Outcome,
		holdHijacked: cfg.HoldHijacked,
		noRetry:      !cfg.DisableNoRetryHeader,
		observer:     cfg.Observer,
		clock:        cfg.Clock,
	}
	for _, c := range cfg.Limiter.Snapshot().Classes {
		e.classNames = append(e.classNames, c.Name)
	}
	class := func(field, name string) (shed.Class, error) {
		c, ok := e.lim.ClassByName(name)
		if !ok {
			return 0, configError(field, "unknown class %q (the limiter's classes are %s)", name, strings.Join(e.classNames, ", "))
		}
		return c, nil
	}
	e.defClass = shed.Class(len(e.classNames) - 1)
	if cfg.DefaultClass != "" {
		c, err := class("DefaultClass", cfg.DefaultClass)
		if err != nil {
			return nil, err
		}
		e.defClass = c
	}
	if len(cfg.Routes) > 0 {
		e.exact = make(map[string]shed.Class, len(cfg.Routes))
	}
	for p, name := range cfg.Routes {
		field := fmt.Sprintf("Routes[%q]", p)
		if p == "" {
			return nil, configError(field, "empty route")
		}
		c, err := class(field, name)
		if err != nil {
			return nil, err
		}
		e.routes = append(e.routes, route{p, c})
		e.exact[p] = c
	}
	sort.Slice(e.routes, func(i, j int) bool {
		if a, b := len(e.routes[i].prefix), len(e.routes[j].prefix); a != b {
			return a > b
		}
		return e.routes[i].prefix < e.routes[j].prefix
	})
	if cfg.ClassHeader != "" {
		if !validHeaderName(cfg.ClassHeader) {
			return nil, configError("ClassHeader", "invalid header name %q", cfg.ClassHeader)
		}
		e.classHeader = http.CanonicalHeaderKey(cfg.ClassHeader)
	}
	if cfg.KeyHeader != "" {
		if !validHeaderName(cfg.KeyHeader) {
			return nil, configError("KeyHeader", "invalid header name %q", cfg.KeyHeader)
		}
		e.keyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
	}
	switch p := cfg.IPv6KeyPrefix; {
	case p == 0:
		e.v6Bits = shedhttp.DefaultIPv6KeyPrefix
	case p < 0 || p > 128:
		return nil, configError("IPv6KeyPrefix", "must be a prefix length in [1, 128] (0 for the default %d), got %d", shedhttp.DefaultIPv6KeyPrefix, p)
	default:
		e.v6Bits = p
	}
	for name, rl := range cfg.RateLimits {
		field := fmt.Sprintf("RateLimits[%q]", name)
		c, err := class(field, name)
		if err != nil {
			return nil, err
		}
		if err := rl.Validate(); err != nil {
			return nil, configError(field, "%v", err)
		}
		e.rates[c] = rateRule{on: true, limit: rl}
		e.anyRate = true
	}
	if e.anyRate && e.store == nil {
		s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			return nil, err
		}
		e.store = s
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, configError("MaxBodyBytes", "must be >= 0, got %d", cfg.MaxBodyBytes)
	}
	for i, p := range cfg.SkipPaths {
		if p == "" {
			return nil, configError(fmt.Sprintf("SkipPaths[%d]", i), "empty path")
		}
		if e.skip == nil {
			e.skip = make(map[string]struct{}, len(cfg.SkipPaths))
		}
		e.skip[p] = struct{}{}
	}
	if e.outcome == nil {
		e.outcome = shedhttp.DefaultOutcome
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	e.bodyTooLarge = shedhttp.Rejection{Status: http.StatusRequestEntityTooLarge, Err: shedhttp.ErrBodyTooLarge}
	return e, nil
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// NeedsKey reports whether some class is rate limited, so that requests
// need a rate-limit key.
func (e *Engine) NeedsKey() bool { return e.anyRate }

// MaxBody returns the maximum body size, 0 for none.
func (e *Engine) MaxBody() int64 { return e.maxBody }

// RequestPath is the path SkipPaths and Routes prefixes match: the path
// as the client sent it, URL.RawPath when set (the client used an encoding
// other than the canonical one), else URL.Path. It is what the routers that
// route on the raw path match (Echo, chi), so a skip or a class can never
// be had by percent-encoding a path (/%68ealthz) that such a router sends
// elsewhere. Routers that decode first (net/http's ServeMux) see the same
// path whenever it is canonically encoded; for the rest the middleware is
// stricter than the router (not skipped, DefaultClass), never more lenient.
// It allocates nothing.
func RequestPath(r *http.Request) string {
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// Skip reports whether r bypasses the middleware: its RequestPath is one
// of SkipPaths.
func (e *Engine) Skip(r *http.Request) bool {
	if e.skip == nil {
		return false
	}
	_, ok := e.skip[RequestPath(r)]
	return ok
}

// CheckBody returns a 413 rejection when r announces a body larger than
// the maximum.
func (e *Engine) CheckBody(r *http.Request) (shedhttp.Rejection, bool) {
	if e.maxBody > 0 && r.ContentLength > e.maxBody {
		e.annotateRejected(r.Context(), shedhttp.ReasonBodyTooLarge, 0, 0, false)
		return e.bodyTooLarge, true
	}
	return shedhttp.Rejection{}, false
}

// Classify returns the default classification of r: the class from the
// trusted class header, else from the route (an exact match of route, the
// framework's route pattern, then the longest prefix of RequestPath(r)
// that Routes holds), else the default class; the key from the trusted key header, else
// "" (the adapter fills in the client address).
func (e *Engine) Classify(r *http.Request, route string) shedhttp.Classification {
	cl := shedhttp.Classification{Class: e.classOf(r, route)}
	if e.keyHeader != "" {
		if v := r.Header[e.keyHeader]; len(v) == 1 && v[0] != "" {
			cl.Key = v[0]
		}
	}
	return cl
}

func (e *Engine) classOf(r *http.Request, rt string) shed.Class {
	if e.classHeader != "" {
		// Exactly one value: a repeated header means a client value
		// travelled next to the proxy's, and neither can be trusted.
		if v := r.Header[e.classHeader]; len(v) == 1 {
			if c, ok := e.lim.ClassByName(v[0]); ok {
				return c
			}
		}
	}
	if e.routes == nil {
		return e.defClass
	}
	if rt != "" {
		if c, ok := e.exact[rt]; ok {
			return c
		}
	}
	path := RequestPath(r)
	for _, ro := range e.routes {
		if strings.HasPrefix(path, ro.prefix) {
			return ro.class
		}
	}
	return e.defClass
}

// AddrKey returns the default rate-limit key of a client whose address is
// host (an IP address without port, as RemoteHost or Echo's RealIP return
// it); see AddrKey.
func (e *Engine) AddrKey(host string) string { return AddrKey(host, e.v6Bits) }

// AddrKey returns the rate-limit key of the client address host: an IPv4
// address as itself (a /32), also when it comes IPv4-mapped
// ("::ffff:192.0.2.1"); an IPv6 address as its prefix of v6Bits bits in
// CIDR notation ("2001:db8:1:2::/64"), without its zone. A host that is not
// an IP address (a Unix socket's "@", garbage from a forwarding header) is
// its own key. A single IPv6 subscriber gets a /64 or more, so keying by
// the full address would let it pick a fresh bucket for every request.
// Only IPv6 and mapped hosts allocate (the key is a new string).
func AddrKey(host string, v6Bits int) string {
	if strings.IndexByte(host, ':') < 0 {
		return host // IPv4 (already canonical from net/http), or not an IP
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if a.Is4In6() {
		return a.Unmap().String()
	}
	p, err := a.WithZone("").Prefix(v6Bits)
	if err != nil {
		return host // v6Bits outside [0, 128]: New does not allow it
	}
	return p.String()
}

// RemoteHost returns the host part of a RemoteAddr ("ip:port"), or addr
// itself when it has no port. It allocates nothing for a valid address.
func RemoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// Admit rate limits and admits r as classified by cl. On admission it
// returns the request state, which is also the handler's context. Else it
// returns the rejection to answer with, always one with a status: even
// when the request context ended while it waited, something must be
// written (see rejection).
func (e *Engine) Admit(r *http.Request, cl shedhttp.Classification) (*State, shedhttp.Rejection) {
	ctx := r.Context()
	dryReason := ""
	if e.anyRate && int(cl.Class) < len(e.classNames) {
		if rule := &e.rates[cl.Class]; rule.on {
			now := e.clock()
			if ok, wait := e.store.AllowAt(now, cl.Class, cl.Key, rule.limit); !ok {
				if o := e.observer; o != nil {
					o.Observe(shed.Event{Kind: shed.EventRejected, Time: now, Class: cl.Class, Reason: shed.ReasonRateLimited, Cost: max(cl.Cost, 1), DryRun: e.rateDryRun, InFlight: e.lim.InFlight()})
				}
				if !e.rateDryRun {
					e.annotateRejected(ctx, shed.ReasonRateLimited.String(), cl.Class, cl.Cost, true)
					return nil, shedhttp.Rejection{
						Status:     http.StatusTooManyRequests,
						Reason:     shed.ReasonRateLimited,
						RetryAfter: roundRetryAfter(wait),
						Class:      cl.Class,
						Err:        shedhttp.ErrRateLimited,
					}
				}
				dryReason = shed.ReasonRateLimited.String()
			}
		}
	}
	p, err := e.lim.Acquire(ctx, shed.Request{Class: cl.Class, Cost: cl.Cost, Deadline: cl.Deadline})
	if err != nil {
		return nil, e.rejection(ctx, cl, err)
	}
	st := &State{Context: ctx, Permit: p, holdHijacked: e.holdHijacked}
	if dryReason == "" && p.DryRun() != shed.ReasonNone {
		dryReason = p.DryRun().String()
	}
	e.annotateAdmitted(ctx, &st.Permit, dryReason)
	return st, shedhttp.Rejection{}
}

func roundRetryAfter(d time.Duration) time.Duration {
	return time.Duration(shedhttp.RetryAfterSeconds(d)) * time.Second
}

// rejection turns an Acquire error into the response to send.
func (e *Engine) rejection(ctx context.Context, cl shedhttp.Classification, err error) shedhttp.Rejection {
	rj, ok := err.(*shed.Rejection)
	if !ok {
		rj = asRejection(err)
	}
	if rj == nil {
		switch {
		case errors.Is(err, shed.ErrInvalidRequest):
			return shedhttp.Rejection{Status: http.StatusInternalServerError, Class: cl.Class, Err: err}
		case errors.Is(err, context.DeadlineExceeded):
			// The request's own deadline passed while it waited.
			e.annotateRejected(ctx, shed.ReasonQueueTimeout.String(), cl.Class, cl.Cost, true)
			return shedhttp.Rejection{Status: http.StatusServiceUnavailable, Reason: shed.ReasonQueueTimeout, RetryAfter: time.Second, Class: cl.Class, Err: err}
		default:
			// The context ended while the request waited. The client may
			// have gone, or the server may have cancelled it (a cancelled
			// http.Server.BaseContext at shutdown, an outer middleware)
			// while the client still waits. Writing nothing would make
			// net/http answer an empty 200 for work that never ran; a 503
			// to a client that has gone is harmless.
			e.annotateRejected(ctx, shedhttp.ReasonCancelled, cl.Class, cl.Cost, true)
			return shedhttp.Rejection{Status: http.StatusServiceUnavailable, RetryAfter: time.Second, Class: cl.Class, Err: err}
		}
	}
	e.annotateRejected(ctx, rj.Reason.String(), cl.Class, cl.Cost, true)
	if rj.Reason == shed.ReasonCostTooLarge {
		// It can never be admitted: Retry-After would be a lie.
		return shedhttp.Rejection{Status: http.StatusRequestEntityTooLarge, Reason: rj.Reason, Class: cl.Class, Err: rj}
	}
	return shedhttp.Rejection{
		Status:     http.StatusServiceUnavailable,
		Reason:     rj.Reason,
		RetryAfter: roundRetryAfter(rj.RetryAfter),
		Class:      cl.Class,
		Err:        rj,
	}
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

// SetRejectHeaders sets the protocol headers of rej on h: Retry-After, and
// the no-retry header on 429 and 503.
func (e *Engine) SetRejectHeaders(h http.Header, rej shedhttp.Rejection) {
	if rej.RetryAfter > 0 {
		h["Retry-After"] = shedhttp.RetryAfterValue(rej.RetryAfter)
	}
	if e.noRetry && (rej.Status == http.StatusTooManyRequests || rej.Status == http.StatusServiceUnavailable) {
		h[NoRetryHeader] = noRetryValues
	}
}

// Release ends st's permit after the handler returned normally with the
// given response status (0: none written, which net/http sends as 200),
// and returns the outcome (for a recorder). It does nothing, and returns
// Ignored, when the permit was already released: by the handler, or at a
// hijack.
func (e *Engine) Release(st *State, r *http.Request, status int) shed.Outcome {
	if !st.Permit.Valid() {
		return shed.Ignored
	}
	if status == 0 {
		status = http.StatusOK
	}
	var o shed.Outcome
	switch err := st.Context.Err(); {
	case st.hijacked:
		o = shed.Ignored // HoldHijacked: it held the connection, not a request
	case err == nil:
		o = e.outcome(r, status)
		if o != shed.Ignored && st.clientBound(false) {
			o = shed.Ignored // its time was mostly the client's
		}
	case errors.Is(err, context.DeadlineExceeded):
		o = shed.Dropped // it did not finish in time
		if st.clientBound(true) {
			o = shed.Ignored // it would have, but for a slow client
		}
	default:
		o = shed.Ignored // the client went away
	}
	st.Permit.Release(o)
	return o
}

// ReleasePanicked ends st's permit when the handler panicked (or called
// runtime.Goexit): a bug is not an overload signal, nor a latency sample.
func (e *Engine) ReleasePanicked(st *State) { st.Permit.Release(shed.Ignored) }
