// Package retrybudget keeps retry amplification bounded across a whole
// process, and makes logical requests and attempts visible separately.
//
// Retries multiply load: 3 layers that each make 3 attempts send 27
// attempts per logical request, exactly when the upstream is least able to
// take them. This package offers three pieces that work alone or together:
//
//   - [Budget]: every logical request deposits, every retry withdraws;
//     retries are allowed up to a ratio of requests over a sliding window,
//     plus a floor per second so that quiet clients can still retry.
//     One budget is shared by the whole process ([Default]) or per
//     destination ([BudgetMap]).
//   - [Throttle]: Google SRE client-side adaptive throttling, which
//     rejects requests locally with probability
//     max(0, (requests - K x accepts) / (requests + 1)) once the backend
//     starts rejecting for overload.
//   - [Transport]: an http.RoundTripper that retries what is safe and
//     retryable, asks the budget before each retry, honours Retry-After
//     and the "do not retry" header of shedding servers, respects the
//     caller's deadline, and puts a circuit breaker in front of each host.
//
// # Budget
//
// Defaults are Finagle's RetryBudget: TTL 10 s, RetryRatio 0.2,
// MinRetriesPerSecond 10. Its window slides by buckets (Buckets, 10 by
// default), so an event counts for between TTL-TTL/Buckets and TTL, and
// within any span of TTL-TTL/Buckets (9 s by default) a budget allows
//
//	retries <= RetryRatio x requests + MinRetriesPerSecond x TTL
//
// (a span of a whole TTL that straddles a bucket's edge may see up to
// twice the floor). So a process that sends 1,000 logical requests to a
// dead upstream within 9 s makes at most 1,000 x 1.2 + 100 attempts,
// instead of 4,000 with 3 naive
// retries (and 64x across three layers of 4 attempts).
//
// The core takes explicit time ([Budget.DepositAt], [Budget.TryWithdrawAt],
// [Budget.SnapshotAt]) so a simulator can drive it in virtual time; the
// methods without At read the wall clock. Epochs are measured from the
// first time a budget sees, so any time.Time works.
//
// Time never goes backwards inside a budget (or a throttle): a time
// earlier than the latest one a deposit or withdrawal saw counts as that
// latest time. A caller whose clock lags, a wall clock stepped back (an
// NTP correction) or a time before the first one all keep the bound;
// after a step back of s, the window stops sliding for s (events made
// meanwhile count until the clock passes the latest time seen plus the
// TTL), which errs towards fewer retries. Times from time.Now carry a
// monotonic reading: when the first time a budget sees has one, times
// that have one too are measured on the monotonic clock, so wall-clock
// steps do not affect the methods without At at all. Snapshots read the
// window without moving its time.
//
// The hot path is a
// compare-and-swap on the current bucket and a scan of the others: no
// lock, no allocation. The check and the withdrawal are one
// compare-and-swap, so concurrent callers in the same bucket cannot
// overshoot the balance.
//
// # Throttle
//
// Defaults: K 2, a 2 minute window of 24 buckets. [Throttle.AllowAt] takes
// the uniform random value that decides, so randomness stays with the
// caller (a simulator passes its seeded source; [Throttle.Allow] uses the
// configured Rand). A request is counted when its outcome is known: at
// once when AllowAt rejects it locally, else when its caller reports the
// backend's answer with [Throttle.AcceptAt] or [Throttle.RejectAt].
// Requests in flight are not counted, so that a burst to a healthy backend
// does not take its own requests in flight for rejections. The Transport
// counts as accepted any response that is not a 429 or a 503 and does not
// carry [NoRetryHeader], and as rejected the others and transport errors;
// an attempt whose caller left before its answer is not counted.
//
// # Transport rules
//
// A request is retried only when all of these hold:
//
//   - it is safe to replay: an idempotent method (GET, HEAD, OPTIONS,
//     TRACE, PUT, DELETE) or a non-empty Idempotency-Key header, and no
//     body, or a body that GetBody can produce again (http.NewRequest sets
//     GetBody for in-memory bodies);
//   - the caller is still there, and the attempt failed in a retryable
//     way: a transport error (a timeout, the host or the connection
//     failing, or an error of another kind, such as an HTTP/2 stream
//     reset), or status 429, 502, 503 or 504. A request body that failed
//     to read (an upload its client aborted through a gateway) would fail
//     again and is not retried;
//   - the response does not carry [NoRetryHeader] (any non-empty value);
//   - fewer than MaxAttempts attempts were made (default 3);
//   - the [InboundPolicy] allows it (see below);
//   - the server's Retry-After, if any, is at most MaxRetryAfter
//     (default 10 s); malformed values are ignored;
//   - the drain of the discarded response's body (counted as
//     MaxDrainTime unless the body is known to be empty), plus the wait
//     (full-jitter exponential backoff, at least Retry-After), plus the
//     expected duration of the attempt (the previous attempt's, or
//     MinAttemptTime if longer) fits before the caller's deadline;
//   - the destination's breaker is not open;
//   - the throttle (if any) allows the attempt, then the budget allows a
//     withdrawal. These are asked last, so that nothing is consumed for
//     a retry that another rule forbids, and the budget, which every host
//     shares, after the throttle;
//   - GetBody, when the request has a body, produces it again.
//
// When a retry is denied, the caller gets the last response untouched
// (status, headers and unread body) with a nil error, or, when the last
// attempt ended in an error, a [*RetryError] that carries the reason and
// matches, with errors.Is, both the reason's sentinel ([ErrBudgetExhausted],
// [ErrCircuitOpen], [ErrThrottled], [ErrDeadline], [ErrAttemptsExhausted],
// [ErrInboundRetry], [ErrBodyNotReplayable]) and the last error. A breaker that is open, a throttle
// that rejects, or a deadline too close (MinAttemptTime) before the first
// attempt give a *RetryError with Attempts 0; nothing is sent. A caller
// that wants to know why a response was not retried attaches a [Report]
// to the request's context with [WithReport].
//
// The bodies of discarded responses are drained (up to MaxDrainBytes,
// 64 KiB, within MaxDrainTime, 100 ms, by default) and closed, so
// connections are reused. A body that is longer or slower than that, or
// that never ends, is closed before its end, which closes its connection:
// a retry never waits on the body of the response it replaces for more
// than MaxDrainTime, and a response with Connection: close is not drained
// at all. The request body is always closed, even when nothing is sent.
//
// # Circuit breakers
//
// One sony/gobreaker TwoStepCircuitBreaker per destination host
// (URL.Host), at most Breaker.MaxHosts of them (1024 by default; a new
// host replaces a breaker in its fresh state, else one not used lately,
// in O(1) amortized time). A breaker asks whether the host can serve
// anyone at all, and counts logical requests, each once with the outcome
// of its last attempt. It trips after 5 failed requests in a row, stays
// open 5 s, then lets one probe through. A request fails on a transport
// error known to be the host's or the connection's (dial, read or write
// error, connection refused or reset, response cut short, TLS failure;
// not a timeout, a request body that failed to read, or an error of a
// kind not known), or on a 502 or 503 that carries no overload
// signal ([NoRetryHeader] or Retry-After); any other response is a
// success, a 500 included: it speaks of the request, and counting it
// would let whoever can make one URL fail cut the host off for everyone.
// Timeouts, 504s, explicit overload signals and cancelled requests are
// not counted: slowness and shedding are not outages (see
// [BreakerConfig]). An open breaker fails fast and sends nothing: it is
// not an attempt on the wire.
//
// # Retry protocol between layers
//
// [NoRetryHeader] ("Shedkit-No-Retry: overloaded") is set by shedding
// servers (package middleware) on the 429 and 503 they answer when they
// reject work (not while they drain: another replica can take the
// request); the Transport never retries such a response.
//
// [AttemptHeader] ("Shedkit-Attempt") is set by the Transport on every
// attempt, 1-based. A server wraps its handler with [Propagate] (or calls
// [RequestAttempt] and [WithInboundAttempt]); a Transport used by that
// handler then applies its Inbound policy: [InboundNoRetryOnRetry] makes
// a single attempt when the inbound request is itself a retry, and
// [InboundNoRetry] makes a single attempt whenever the inbound request
// comes from a retrying client, so that only the outermost layer retries.
//
// # OpenTelemetry
//
// The package uses the OpenTelemetry API only. TracerProvider,
// MeterProvider and Propagator come from the config, defaulting to the
// global ones; with the default no-op globals, a logical request costs one
// no-op span start (three small allocations inside otel's global tracer)
// and a few atomic loads for the counters; attempt spans are only started
// under a recording logical span.
//
// Spans:
//
//   - the logical request: one INTERNAL span named "retry {method}"
//     ("retry HTTP" for unknown methods), with http.request.method,
//     server.address, server.port, shedkit.retry.attempts (attempts sent),
//     http.response.status_code for the final response, and error.type
//     when the request failed (the status code for statuses >= 400, the
//     last attempt's error type, or the denial reason, such as "breaker",
//     when nothing was sent);
//   - each attempt on the wire: one CLIENT span, child of the logical
//     span, named "{method}", following the HTTP client semantic
//     conventions: http.request.method, server.address, server.port,
//     url.full (credentials and the values of the query's
//     AWSAccessKeyId, Signature, sig and X-Goog-Signature redacted, as
//     the conventions ask), http.response.status_code,
//     error.type (the status code for statuses >= 400, else "timeout",
//     "canceled" or the Go type of the error), and
//     http.request.resend_count (1 for the first retry...) on resent
//     attempts only. It ends when the response headers arrive.
//   - events on the logical span: shedkit.retry.backoff before each wait
//     (shedkit.retry.attempt: the number of the attempt to come,
//     shedkit.retry.delay: seconds), and shedkit.retry.denied when an
//     attempt is not made (shedkit.retry.reason: budget, breaker,
//     throttle, ...).
//
// The trace context of each attempt is injected into its headers by the
// propagator, if one is installed.
//
// Metrics (all attributes low-cardinality: never a URL, host or tenant):
//
//	| instrument                        | kind                 | unit         | attributes                                        |
//	|-----------------------------------|----------------------|--------------|---------------------------------------------------|
//	| shedkit.retry.requests            | Int64Counter         | {request}    | shedkit.retry.client                              |
//	| shedkit.retry.attempts            | Int64Counter         | {attempt}    | shedkit.retry.client, shedkit.retry.resend        |
//	| shedkit.retry.denied              | Int64Counter         | {attempt}    | shedkit.retry.client, shedkit.retry.reason        |
//	| shedkit.retry.breaker.transitions | Int64Counter         | {transition} | shedkit.retry.client, shedkit.retry.breaker.state |
//	| shedkit.retry.budget.balance      | Int64ObservableGauge | {retry}      | shedkit.retry.budget                              |
//
// In detail:
//
//   - shedkit.retry.requests counts logical requests, shedkit.retry.attempts
//     the attempts sent on the wire (shedkit.retry.resend false for first
//     attempts, true for retries): amplification is attempts / requests.
//   - shedkit.retry.denied counts attempts the transport wanted to make
//     but did not, by shedkit.retry.reason: budget, breaker, throttle,
//     no_retry_header, deadline, retry_after, max_attempts, inbound_retry,
//     body_not_replayable.
//     First attempts stopped by an open breaker, the throttle or a
//     too-close deadline are included.
//   - shedkit.retry.breaker.transitions counts breaker state changes by
//     new state (closed, half-open, open), all hosts together.
//   - shedkit.retry.budget.balance observes the balance of the
//     transport's Budget (not those picked by BudgetFor), once per budget
//     and meter; shedkit.retry.budget is the budget's Name.
//   - shedkit.retry.client is TransportConfig.Name.
package retrybudget
