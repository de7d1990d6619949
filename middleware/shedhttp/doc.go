// Package shedhttp holds the framework-neutral pieces of shedkit's HTTP
// middleware: what a request is classified as, the per-key rate limit and
// its key store, how a response status becomes a permit outcome, the
// sanitized rejection responses, and the span attribute names. The
// middleware itself is in package nethttp (net/http) and package echo (Echo
// v4); both are built on the same core, so they behave the same.
//
// # Order of checks
//
// For each request that is not skipped, the middleware
//
//  1. answers 413 at once when Content-Length exceeds the maximum body
//     size (and caps the body at that size for the handler);
//  2. classifies the request ([Classification]: class, cost, rate-limit key,
//     tenant, deadline, the last from a trusted deadline header);
//  3. rate limits per key and class ([KeyStore]): 429 when the key is over
//     its rate;
//  4. asks the shed.Limiter for admission: 503 when it rejects (413 when
//     the request's cost exceeds the whole cost budget and could never be
//     admitted), and 503 when the request context ends while the request
//     waits in the queue: the server may have cancelled it (a cancelled
//     http.Server.BaseContext at shutdown, an outer middleware) while the
//     client still waits, and a client must never read a success for work
//     that did not run (a 503 to a client that has gone is harmless);
//  5. runs the handler with the permit in its context, and releases the
//     permit exactly once when the handler returns, panics or its client
//     goes away, or when it hijacks the connection (unless the
//     configuration holds hijacked permits: HoldHijacked).
//
// The rate limit comes first because it is cheaper and because a client
// that exceeds its own rate should not take a place in the admission queue.
//
// A request holds one permit of a limiter. A request that a shedkit
// middleware on the same limiter already admitted is skipped: the
// middleware mounted twice (an Echo.Use and a group's, nested net/http
// wrappers, or a handler that serves a sub-request with its own request's
// context), since a second permit would wait for the one the request
// itself holds, and at a small limit an idle server would shed everyone.
//
// A request with a tenant (Classification.Tenant, or its key with the
// middleware's TenantFromKey) is also held to the tenant's share of its
// class while the class is contended (shed.Request.Tenant): over it, it
// gets 503 (tenant_share) with Retry-After, like the other overload
// rejections. The rate limit bounds what a key may send over time; the
// share bounds what it may hold at once when others need the capacity.
//
// # Trust
//
// Client headers are untrusted. The class and the rate-limit key are read
// from a header only when the configuration names that header (ClassHeader,
// KeyHeader), which should be a header that a trusted proxy sets and
// overwrites. Otherwise the class comes from the route, and the key is the
// client's address (net/http: the host of Request.RemoteAddr; Echo:
// Context.RealIP, which honours Echo's IPExtractor). An IPv6 address counts
// by its /64 ([DefaultIPv6KeyPrefix], the middleware's IPv6KeyPrefix):
// whoever holds a /64 can send from any of its 2^64 addresses, and keying
// by the full address would give each request a fresh bucket. IPv4
// addresses, also IPv4-mapped ones, count by themselves.
//
// The caller's deadline is read from a header only when the configuration
// names one (DeadlineHeader), from the values [ParseDeadline] accepts;
// others are ignored, as if absent. A header present more than once (a
// client's value next to a proxy's, a stale copy next to a fresh one)
// gives its shortest value. A peer that may send the header can only
// shorten the request's deadline: what it announces is bounded by
// MaxDeadline ([DefaultMaxDeadline], a minute) and never extends the
// request context's own deadline.
//
// # Deadlines
//
// A client that sends its remaining time (retrybudget.Transport with
// DeadlineHeader, Envoy's x-envoy-expected-rq-timeout-ms, Connect's
// Connect-Timeout-Ms, gRPC's grpc-timeout) lets the service refuse at once
// work it cannot finish in time: the limiter rejects with 503
// (deadline_too_short) a request whose deadline has passed, or whose
// remaining time is shorter than its expected queue wait (plus a share of
// its class's expected service time when shed.Config.DeadlineMargin is
// set; 0.5 counts half of it), before the handler runs.
// An admitted request's handler context ends at the deadline, so that its
// own outgoing calls through retrybudget.Transport pass on what is left,
// minus the time spent.
//
// # Responses
//
// Rejections are answered with a small RFC 9457 body
// (application/problem+json: type, title, status, detail) that names no
// internal state: no limit, in-flight count, class or reason. 429 and 503
// carry Retry-After in whole seconds (rounded up, at least 1) and the
// "overloaded, do not retry" header of package retrybudget
// (Shedkit-No-Retry: overloaded), so that shedkit clients do not retry
// them and their adaptive throttle counts them as the server shedding load.
// A replica that drains (shed.Limiter.Drain) is going away, not overloaded,
// and another replica can serve the request at once: its 503 carries
// Retry-After: 1 and no no-retry header, so that a shedkit client retries
// it (elsewhere, once the server closed the connection at shutdown) rather
// than fail it during a rolling restart.
// The middleware sets those headers before it calls the rejection handler,
// which may replace the body.
//
// # Outcomes
//
// The permit's outcome feeds the adaptive limit: Success gives a latency
// sample, Dropped an overload signal, Ignored nothing. [DefaultOutcome]
// maps the response status:
//
//   - 1xx, 2xx, 3xx: Success.
//   - 502, 503, 504: Dropped. These are what an overloaded or timed-out
//     upstream produces; they are the signal the limit must react to.
//   - other 5xx: Ignored. A handler bug or a failed dependency that fails
//     fast says nothing about capacity: as a Success its short latency would
//     pull the limit up while requests fail; as a drop it would shrink the
//     limit for a fault that less concurrency does not fix.
//   - 4xx: Ignored: the client's fault, and often answered before any real
//     work is done.
//   - upgraded connections (an Upgrade header, or CONNECT): Ignored unless
//     Dropped, because the handler's duration is the life of the
//     connection, not the latency of a request.
//
// Independently of the status, a request whose client went away (its
// context was cancelled) is released Ignored, one whose context deadline
// passed is released Dropped (it did not finish in time), and one whose
// handler panicked is released Ignored before the panic continues (a bug is
// not an overload signal; it is neither a latency sample). A hijacked
// connection's permit is released Ignored at the hijack.
//
// Time the handler spends blocked reading the request body is the
// client's, not the service's: the middleware measures it (two reads of
// the monotonic clock per Read of the body) and releases Ignored, instead
// of Dropped, a request whose deadline passed but that would have met it
// without that time (a slow upload behind a request-timeout middleware),
// and, instead of its status's outcome, one that spent at least half of
// its time waiting for its body (its latency is mostly the client's). A
// few slow uploaders therefore cannot drive an adaptive limit down for
// everyone. Time spent writing to a client that reads slowly is not
// measured: bound it with the server's WriteTimeout. The middleware's
// package documentation (Long-lived requests) says what a permit covers
// for streaming responses, server-sent events, WebSockets and slow
// uploads, and how to configure each.
//
// # Spans
//
// When the request context carries a recording OpenTelemetry span, the
// middleware sets [AttrDecision], [AttrReason], [AttrClass],
// [AttrQueueWait] and [AttrCost] on it, and [AttrAttempt] (the inbound
// attempt number of a retrying shedkit client) and [AttrDeadlineBudget]
// (the time left before the request's deadline) when the request has
// them. Without a recording span this costs one context lookup. Metrics
// come from the shed.Limiter's Observer; the
// middleware reports its own rate-limit rejections to the Observer given in
// its configuration, as shed.EventRejected with shed.ReasonRateLimited.
package shedhttp
