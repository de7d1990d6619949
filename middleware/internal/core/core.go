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
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shedkit/shedkit/internal/httpname"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// The retry protocol agreed with package retrybudget. They are mirrored
// here rather than imported, so that mounting the middleware does not link
// the retrying client (its breaker and telemetry); a test checks that the
// values match retrybudget.NoRetryHeader and retrybudget.NoRetryValue.
const (
	NoRetryHeader = "Shedkit-No-Retry"
	NoRetryValue  = "overloaded"
	// AttemptHeader carries the attempt number a retrying shedkit client
	// sets (retrybudget.AttemptHeader); server spans report it.
	AttemptHeader = "Shedkit-Attempt"
)

var noRetryValues = []string{NoRetryValue}[:1:1]

// Config is the framework-neutral configuration, the one the adapters'
// Configs embed.
type Config = shedhttp.Options

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
	dlHeader     string
	maxDeadline  time.Duration
	v6Bits       int
	rates        [shed.MaxClasses]rateRule
	anyRate      bool
	tenantKey    bool // TenantFromKey
	store        shedhttp.KeyStore
	rateDryRun   bool
	rateCost     bool                     // RateLimitCost
	reqStore     shedhttp.RequestKeyStore // store, when it sees requests
	maxBody      int64
	skip         map[string]struct{}
	skipMethods  []string
	holdHijacked bool
	outcome      func(r *http.Request, status int) shed.Outcome
	noRetry      bool
	observer     shed.Observer
	clock        func() time.Time
	classNames   []string
	bodyTooLarge shedhttp.Rejection
	rec          *record.Recorder // SetRecorder; nil: none
	reclassified atomic.Uint32    // what Classify did to keys (Reclassified)
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
		rateCost:     cfg.RateLimitCost,
		maxBody:      cfg.MaxBodyBytes,
		outcome:      cfg.Outcome,
		holdHijacked: cfg.HoldHijacked,
		noRetry:      !cfg.DisableNoRetryHeader,
		observer:     cfg.Observer,
		clock:        cfg.Clock,
		tenantKey:    cfg.TenantFromKey,
	}
	for _, c := range cfg.Limiter.Snapshot().Classes {
		e.classNames = append(e.classNames, c.Name)
	}
	for _, step := range []func(Config) error{e.routeConfig, e.headerConfig, e.deadlineConfig, e.rateConfig, e.skipConfig} {
		if err := step(cfg); err != nil {
			return nil, err
		}
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

// class resolves a configured class name, naming field in the error.
func (e *Engine) class(field, name string) (shed.Class, error) {
	c, ok := e.lim.ClassByName(name)
	if !ok {
		return 0, configError(field, "unknown class %q (the limiter's classes are %s)", name, strings.Join(e.classNames, ", "))
	}
	return c, nil
}

// routeConfig validates and sets the default class and the routes,
// longest prefix first.
func (e *Engine) routeConfig(cfg Config) error {
	e.defClass = shed.Class(len(e.classNames) - 1)
	if cfg.DefaultClass != "" {
		c, err := e.class("DefaultClass", cfg.DefaultClass)
		if err != nil {
			return err
		}
		e.defClass = c
	}
	if len(cfg.Routes) > 0 {
		e.exact = make(map[string]shed.Class, len(cfg.Routes))
	}
	for p, name := range cfg.Routes {
		field := fmt.Sprintf("Routes[%q]", p)
		if err := checkPath(field, p); err != nil {
			return err
		}
		c, err := e.class(field, name)
		if err != nil {
			return err
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
	return nil
}

// headerConfig validates and sets the trusted class and key headers and
// the IPv6 key prefix.
func (e *Engine) headerConfig(cfg Config) error {
	if cfg.ClassHeader != "" {
		if !httpname.Valid(cfg.ClassHeader) {
			return configError("ClassHeader", "invalid header name %q", cfg.ClassHeader)
		}
		e.classHeader = http.CanonicalHeaderKey(cfg.ClassHeader)
	}
	if cfg.KeyHeader != "" {
		if !httpname.Valid(cfg.KeyHeader) {
			return configError("KeyHeader", "invalid header name %q", cfg.KeyHeader)
		}
		e.keyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
	}
	switch p := cfg.IPv6KeyPrefix; {
	case p == 0:
		e.v6Bits = shedhttp.DefaultIPv6KeyPrefix
	case p < 0 || p > 128:
		return configError("IPv6KeyPrefix", "must be a prefix length in [1, 128] (0 for the default %d), got %d", shedhttp.DefaultIPv6KeyPrefix, p)
	default:
		e.v6Bits = p
	}
	return nil
}

// rateConfig validates and sets the rate limits and their store.
func (e *Engine) rateConfig(cfg Config) error {
	for name, rl := range cfg.RateLimits {
		field := fmt.Sprintf("RateLimits[%q]", name)
		c, err := e.class(field, name)
		if err != nil {
			return err
		}
		if err := rl.Validate(); err != nil {
			return configError(field, "%v", err)
		}
		e.rates[c] = rateRule{on: true, limit: rl}
		e.anyRate = true
	}
	if e.anyRate && e.store == nil {
		s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			return err
		}
		e.store = s
	}
	e.reqStore, _ = e.store.(shedhttp.RequestKeyStore)
	if e.rateCost && e.anyRate && e.reqStore == nil {
		return configError("RateLimitCost", "the KeyStore (%T) cannot charge a cost: it does not implement shedhttp.RequestKeyStore", e.store)
	}
	return nil
}

// skipConfig validates and sets the body bound and what bypasses the
// middleware.
func (e *Engine) skipConfig(cfg Config) error {
	if cfg.MaxBodyBytes < 0 {
		return configError("MaxBodyBytes", "must be >= 0, got %d", cfg.MaxBodyBytes)
	}
	for i, p := range cfg.SkipPaths {
		if err := checkPath(fmt.Sprintf("SkipPaths[%d]", i), p); err != nil {
			return err
		}
		if e.skip == nil {
			e.skip = make(map[string]struct{}, len(cfg.SkipPaths))
		}
		e.skip[p] = struct{}{}
	}
	for i, m := range cfg.SkipMethods {
		// net/http refuses a request whose method is not a token, so
		// such an entry (" OPTIONS", "GET,HEAD") could never match.
		if m == "" {
			return configError(fmt.Sprintf("SkipMethods[%d]", i), "empty method")
		}
		if !httpname.Valid(m) {
			return configError(fmt.Sprintf("SkipMethods[%d]", i), "a method is a token (such as \"OPTIONS\"), got %q", m)
		}
	}
	e.skipMethods = slices.Clone(cfg.SkipMethods)
	return nil
}

// checkPath validates a SkipPaths entry or a Routes key. Every path they
// are matched against starts with "/" (the request path net/http parses;
// Echo's route patterns, which Echo also normalises to a leading "/"), so
// an entry without one ("healthz", a full URL) would never match: the
// endpoint the user meant to skip would be shed, or the route would never
// get its class, silently. Failing at construction says so instead.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return configError(field, "empty path")
	case p[0] != '/':
		return configError(field, "a path starts with \"/\" (such as \"/healthz\"), got %q", p)
	}
	return nil
}

// deadlineConfig validates and sets the deadline propagation fields.
func (e *Engine) deadlineConfig(cfg Config) error {
	if cfg.DeadlineHeader != "" {
		if !httpname.Valid(cfg.DeadlineHeader) {
			return configError("DeadlineHeader", "invalid header name %q", cfg.DeadlineHeader)
		}
		e.dlHeader = http.CanonicalHeaderKey(cfg.DeadlineHeader)
	}
	switch {
	case cfg.MaxDeadline < 0:
		return configError("MaxDeadline", "must be >= 0, got %v", cfg.MaxDeadline)
	case cfg.MaxDeadline > 0 && cfg.DeadlineHeader == "":
		return configError("MaxDeadline", "set without DeadlineHeader")
	case cfg.MaxDeadline == 0:
		e.maxDeadline = shedhttp.DefaultMaxDeadline
	default:
		e.maxDeadline = cfg.MaxDeadline
	}
	return nil
}

// NeedsKey reports whether some class is rate limited, so that requests
// need a rate-limit key.
func (e *Engine) NeedsKey() bool { return e.anyRate || e.tenantKey }

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

// Skip reports whether r bypasses the middleware: its method is one of
// SkipMethods, its RequestPath one of SkipPaths, or a middleware on the
// same limiter already admitted it (see Holds).
func (e *Engine) Skip(r *http.Request) bool {
	if slices.Contains(e.skipMethods, r.Method) {
		return true
	}
	if e.skip != nil {
		if _, ok := e.skip[RequestPath(r)]; ok {
			return true
		}
	}
	return e.Holds(r.Context())
}

// CheckBody returns a 413 rejection when r announces a body larger than
// the maximum, and records the refusal (see recRefused). route is the
// framework's route pattern, as for Classify.
func (e *Engine) CheckBody(r *http.Request, route string) (shedhttp.Rejection, bool) {
	if e.maxBody > 0 && r.ContentLength > e.maxBody {
		e.annotateRejected(r.Context(), inbound{r: r}, shedhttp.ReasonBodyTooLarge, 0, 0, false, false)
		e.recRefused(r, route, e.bodyTooLarge)
		return e.bodyTooLarge, true
	}
	return shedhttp.Rejection{}, false
}

// Classify returns the default classification of r: the class from the
// trusted class header, else from the route (an exact match of route, the
// framework's route pattern, then the longest prefix of RequestPath(r)
// that Routes holds), else the default class; the key from the trusted key header, else
// "" (the adapter fills in the client address); the deadline from the
// trusted deadline header (see InboundDeadline).
func (e *Engine) Classify(r *http.Request, route string) shedhttp.Classification {
	cl := shedhttp.Classification{Class: e.classOf(r, route)}
	if e.keyHeader != "" {
		if v := r.Header[e.keyHeader]; len(v) == 1 && v[0] != "" {
			cl.Key = v[0]
		}
	}
	if e.dlHeader != "" {
		cl.Deadline = e.InboundDeadline(r, time.Now())
	}
	return cl
}

// InboundDeadline returns the deadline that r's trusted deadline header
// announces, measured from now: the remaining time it carries, at most
// MaxDeadline. It is zero when no header is configured or no value of it
// parses (shedhttp.ParseDeadline). A header present more than once (a
// client value next to the proxy's, or a stale copy next to a fresh one)
// gives its shortest value: any value can only shorten the request's own
// deadline, and ignoring them all would leave the handler none. A value
// of 0 is a deadline of now: no time is left, and the request is
// rejected.
func (e *Engine) InboundDeadline(r *http.Request, now time.Time) time.Time {
	if e.dlHeader == "" {
		return time.Time{}
	}
	best, found := time.Duration(0), false
	for _, v := range r.Header[e.dlHeader] {
		if d, ok := shedhttp.ParseDeadline(e.dlHeader, v); ok && (!found || d < best) {
			best, found = d, true
		}
	}
	if !found {
		return time.Time{}
	}
	return now.Add(min(best, e.maxDeadline))
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
	if nat64Prefix.Contains(a) {
		// An IPv4 client through stateless translation (RFC 6052's
		// well-known prefix) counts by its own address, as IPv4 clients
		// do: grouped by /64, every one of them would share one key.
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:])).String()
	}
	p, err := a.WithZone("").Prefix(v6Bits)
	if err != nil {
		return host // v6Bits outside [0, 128]: New does not allow it
	}
	return p.String()
}

// nat64Prefix is RFC 6052's well-known prefix for IPv4 addresses in IPv6.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

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
//
// The request's deadline is the earlier of cl.Deadline and the request
// context's own: a classification never extends the server's deadline.
// When cl.Deadline is the earlier, the handler's context ends at it, so
// that the handler's own outgoing calls inherit it.
func (e *Engine) Admit(r *http.Request, cl shedhttp.Classification) (*State, shedhttp.Rejection) {
	dryReason, rej, limited := e.rateLimit(r, cl)
	if limited {
		return nil, rej
	}
	ctx, dl, cancel := withDeadline(r.Context(), cl.Deadline)
	in := inbound{r: r, deadline: dl}
	tenant := cl.Tenant
	if tenant == "" && e.tenantKey {
		tenant = cl.Key
	}
	if trace.SpanFromContext(ctx).IsRecording() {
		in.arrived = time.Now() // for the queue span of a request that waits
	}
	p, err := e.lim.Acquire(ctx, shed.Request{Class: cl.Class, Cost: cl.Cost, Deadline: dl, Tenant: tenant})
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, e.rejection(ctx, in, cl, err)
	}
	st := &State{Context: ctx, Permit: p, holdHijacked: e.holdHijacked, cancel: cancel}
	if dryReason == "" && p.DryRun() != shed.ReasonNone {
		dryReason = p.DryRun().String()
	}
	e.annotateAdmitted(ctx, in, &st.Permit, dryReason)
	return st, shedhttp.Rejection{}
}

// rateLimit applies the rate limit of cl's class to cl's key. It returns
// the 429 to answer with (limited), or, when a dry run let the request
// through, the reason it would have been rejected for.
func (e *Engine) rateLimit(r *http.Request, cl shedhttp.Classification) (dryReason string, rej shedhttp.Rejection, limited bool) {
	if !e.anyRate || int(cl.Class) >= len(e.classNames) {
		return "", rej, false
	}
	rule := &e.rates[cl.Class]
	if !rule.on {
		return "", rej, false
	}
	now := e.clock()
	var ok bool
	var wait time.Duration
	n := 1
	if e.reqStore != nil {
		if e.rateCost {
			n = int(min(max(cl.Cost, 1), math.MaxInt32))
		}
		ok, wait = e.reqStore.AllowRequest(r, now, cl.Class, cl.Key, rule.limit, n)
	} else {
		ok, wait = e.store.AllowAt(now, cl.Class, cl.Key, rule.limit)
	}
	if ok {
		return "", rej, false
	}
	if o := e.observer; o != nil {
		o.Observe(shed.Event{Kind: shed.EventRejected, Time: now, Class: cl.Class, Reason: shed.ReasonRateLimited, Cost: max(cl.Cost, 1), DryRun: e.rateDryRun, InFlight: e.lim.InFlight()})
	}
	if e.rateDryRun {
		return shed.ReasonRateLimited.String(), rej, false
	}
	e.annotateRejected(r.Context(), inbound{r: r, deadline: deadlineOf(r.Context(), cl.Deadline)}, shed.ReasonRateLimited.String(), cl.Class, cl.Cost, true, false)
	status, retry := http.StatusTooManyRequests, roundRetryAfter(wait)
	if n > rule.limit.Burst {
		// More tokens than the bucket holds: it can never pass, and a
		// Retry-After would be a lie, as for cost_too_large.
		status, retry = http.StatusRequestEntityTooLarge, 0
	}
	return "", shedhttp.Rejection{
		Status:     status,
		Reason:     shed.ReasonRateLimited,
		RetryAfter: retry,
		Class:      cl.Class,
		Err:        shedhttp.ErrRateLimited,
	}, true
}

// deadlineOf returns the request's deadline: the earlier of want (zero:
// none) and ctx's deadline, zero when neither is set.
func deadlineOf(ctx context.Context, want time.Time) time.Time {
	have, ok := ctx.Deadline()
	if want.IsZero() || (ok && !want.Before(have)) {
		return have
	}
	return want
}

// withDeadline returns ctx bounded by want and the request's deadline (see
// deadlineOf). The deadline of ctx is never extended; cancel is nil when
// ctx is returned unchanged.
func withDeadline(ctx context.Context, want time.Time) (context.Context, time.Time, context.CancelFunc) {
	dl := deadlineOf(ctx, want)
	if want.IsZero() || !dl.Equal(want) {
		return ctx, dl, nil
	}
	if have, ok := ctx.Deadline(); ok && have.Equal(want) {
		return ctx, dl, nil
	}
	ctx, cancel := context.WithDeadline(ctx, want)
	return ctx, dl, cancel
}

func roundRetryAfter(d time.Duration) time.Duration {
	return time.Duration(shedhttp.RetryAfterSeconds(d)) * time.Second
}

// rejection turns an Acquire error into the response to send.
func (e *Engine) rejection(ctx context.Context, in inbound, cl shedhttp.Classification, err error) shedhttp.Rejection {
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
			e.annotateRejected(ctx, in, shed.ReasonQueueTimeout.String(), cl.Class, cl.Cost, true, true)
			return shedhttp.Rejection{Status: http.StatusServiceUnavailable, Reason: shed.ReasonQueueTimeout, RetryAfter: time.Second, Class: cl.Class, Err: err}
		default:
			// The context ended while the request waited. The client may
			// have gone, or the server may have cancelled it (a cancelled
			// http.Server.BaseContext at shutdown, an outer middleware)
			// while the client still waits. Writing nothing would make
			// net/http answer an empty 200 for work that never ran; a 503
			// to a client that has gone is harmless.
			e.annotateRejected(ctx, in, shedhttp.ReasonCancelled, cl.Class, cl.Cost, true, true)
			return shedhttp.Rejection{Status: http.StatusServiceUnavailable, RetryAfter: time.Second, Class: cl.Class, Err: err}
		}
	}
	e.annotateRejected(ctx, in, rj.Reason.String(), cl.Class, cl.Cost, true, rj.Reason == shed.ReasonQueueTimeout)
	if rj.Reason == shed.ReasonCostTooLarge {
		// It can never be admitted: Retry-After would be a lie.
		return shedhttp.Rejection{Status: http.StatusRequestEntityTooLarge, Reason: rj.Reason, Class: cl.Class, Err: rj}
	}
	if rj.Reason == shed.ReasonDraining {
		// This replica is going away, and another can take the request
		// now: not RetryAfterMax, which a client would wait out (or not
		// retry at all, past its MaxRetryAfter), and no no-retry header
		// (SetRejectHeaders), as the gRPC server sends no pushback.
		return shedhttp.Rejection{Status: http.StatusServiceUnavailable, Reason: rj.Reason, RetryAfter: time.Second, Class: cl.Class, Err: rj}
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
// the no-retry header on 429 and 503, but for a draining replica's 503,
// which a client should retry on another replica.
func (e *Engine) SetRejectHeaders(h http.Header, rej shedhttp.Rejection) {
	if rej.RetryAfter > 0 {
		h["Retry-After"] = shedhttp.RetryAfterValue(rej.RetryAfter)
	}
	if e.noRetry && rej.Reason != shed.ReasonDraining && (rej.Status == http.StatusTooManyRequests || rej.Status == http.StatusServiceUnavailable) {
		h[NoRetryHeader] = noRetryValues
	}
}

// Release ends st's permit after the handler returned normally with the
// given response status (0: none written, which net/http sends as 200),
// and returns the outcome (for a recorder). It does nothing, and returns
// Ignored, when the permit was already released: by the handler, or at a
// hijack.
func (e *Engine) Release(st *State, r *http.Request, status int) shed.Outcome {
	defer st.end()
	if !st.Permit.Valid() {
		return shed.Ignored
	}
	if status == 0 {
		status = http.StatusOK
	}
	// Released in a defer: a panicking Outcome still returns the permit
	// (as Ignored) while its panic goes on to a recovery middleware.
	o := shed.Ignored
	defer func() { st.Permit.Release(o) }()
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
	return o
}

// ReleasePanicked ends st's permit when the handler panicked (or called
// runtime.Goexit): a bug is not an overload signal, nor a latency sample.
func (e *Engine) ReleasePanicked(st *State) {
	st.Permit.Release(shed.Ignored)
	st.end()
}
