// Package grpc is shedkit's load shedding for gRPC: server interceptors
// that rate limit each client and admit calls through a shed.Limiter, and
// a client interceptor that retries within the process's shared
// retrybudget.Budget behind a circuit breaker per target. Its package name
// clashes with gRPC's, so import it under another name:
//
//	import shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
//
//	srv, err := shedgrpc.NewServer(shedgrpc.ServerConfig{
//		Limiter: lim,
//		Methods: map[string]string{"/shop.Cart/": "interactive", "/shop.Reports/": "batch"},
//	})
//	if err != nil { ... }
//	gs := grpc.NewServer(srv.ServerOptions()...)
//
//	cli, err := shedgrpc.NewClient(shedgrpc.ClientConfig{})
//	if err != nil { ... }
//	cc, err := grpc.NewClient(target, creds, grpc.WithChainUnaryInterceptor(cli.UnaryInterceptor()))
//
// It lives in its own module (github.com/shedkit/shedkit/middleware/grpc)
// so that services that speak only HTTP never download gRPC. It is one more
// driver of the same core as the HTTP middleware (package nethttp): the
// same limiter, key store, classes, span attributes and retry budget, so
// a service that speaks both protocols protects one capacity with one
// configuration vocabulary.
//
// # Server: order of checks
//
// For each call whose method is not in SkipMethods, the interceptor
//
//  1. classifies the call (shedhttp.Classification): the class from the
//     trusted ClassMetadata, else from Methods (exact full method name,
//     then the longest prefix), else DefaultClass; the rate-limit key
//     from the trusted KeyMetadata, else the peer's address; the deadline
//     from the call's context (the client's grpc-timeout); Classify may
//     then refine all of it, for example set the cost from the request;
//  2. rate limits per key and class (shedhttp.KeyStore, which the HTTP
//     middleware may share): ResourceExhausted over the key's rate;
//  3. asks the shed.Limiter for admission, with the call's deadline, so
//     that a class that queues rejects at once a call whose remaining
//     time is shorter than its expected wait instead of queueing it:
//     Unavailable when the limiter rejects, ResourceExhausted when the
//     call's cost exceeds the whole cost budget and never could be
//     admitted, DeadlineExceeded when the call's deadline passes while it
//     waits;
//  4. runs the handler with the permit in its context ([Permit],
//     [Reconcile]), and releases the permit exactly once when the handler
//     returns, panics or its client goes away.
//
// The rate limit comes first because it is cheaper and because a client
// over its own rate should not take a place in the admission queue.
//
// A call admitted once holds one permit of its limiter: interceptors for
// the same limiter chained a second time on the server (ServerOptions
// given twice, or two Servers' interceptors) let it through without
// classifying, rate limiting or admitting it again, since a second permit
// would wait for the one the call itself holds.
//
// # Trust
//
// Client metadata is untrusted. The class and the rate-limit key are read
// from metadata only when the configuration names the key
// (ClassMetadata, KeyMetadata), which should be one that a trusted proxy
// sets and overwrites; a key that arrives with more than one value is
// ignored, since a client's value travelled next to the proxy's. Otherwise
// the class comes from the method, and the key is the peer's address: an
// IPv4 address as itself, an IPv6 address by its /64 (IPv6KeyPrefix),
// since whoever holds a /64 can send from any address in it.
//
// # Rejections
//
// gRPC has standard answers for both kinds of rejection, and the
// interceptors use them: ResourceExhausted for a client over its quota
// (the rate limit), Unavailable for a server shedding load ("try again
// later, maybe elsewhere"). Each rejection carries the
// grpc-retry-pushback-ms trailer ([PushbackKey]), which gRPC's own retry
// policy and this package's Client honour: the limiter's Retry-After hint
// (or the time until the key's next token) in milliseconds, none for a
// server that drains (its retry belongs on another backend, after the
// client's own backoff), or -1 ("do not retry") when retrying cannot help
// (a cost above the whole budget) or when ServerConfig.NoRetryPushback
// asks for it, as the HTTP
// middleware's Shedkit-No-Retry header does. The status message is one of
// the Msg constants: stable, and naming no internal state (no limit,
// in-flight count, class or reason); the reason is on the server's span
// and in the limiter's counters.
//
// # Outcomes
//
// The permit's outcome feeds the adaptive limit: Success gives a latency
// sample, Dropped an overload signal, Ignored nothing. [DefaultOutcome]
// maps the handler's error as the HTTP middleware maps statuses: OK is a
// Success, Unavailable and DeadlineExceeded (a dependency that is
// overloaded or too slow) are Dropped, every other code is Ignored.
// Independently of the error, a call whose context was cancelled is
// Ignored (its client went away), one whose deadline passed is Dropped (it
// did not finish in time), and one whose handler panicked is Ignored
// before the panic continues: put recovery interceptors outside (before)
// these ones. A gRPC client whose deadline fires cancels the call at about
// the moment the server's own timer fires, so a call cancelled within
// 10 ms of its deadline counts as one whose deadline passed.
//
// # Streams
//
// A stream holds one permit for its whole life: a stream is work in
// flight, and the limit bounds open streams as it bounds running calls.
// Long-lived streams therefore take capacity from short calls for as long
// as they stay open; give them their own class, or skip them. The
// duration of a client-streaming or bidirectional stream is set by how
// long the client keeps sending, not by the service, so such streams
// never give a latency sample: DefaultOutcome makes their successes
// Ignored, and a deadline passing on them is Ignored too. Server-streaming
// calls count like unary ones, and their latency includes the time their
// client takes to read (gRPC's flow control blocks SendMsg): a client
// that reads slowly makes the call look slow to the adaptive limit. Bound
// such calls with a deadline, give them their own class, or release the
// permit once the costly part is done (Permit(ctx).Release(shed.Success)).
//
// Long client-streaming or bidirectional streams whose messages are the
// units of work (a chat, a feed of jobs) can be admitted per message
// instead (ServerConfig.PerMessageStreams): the stream holds no permit
// while it waits for its client; RecvMsg classifies, rate limits and
// admits each message before returning it (a class that queues delays it,
// which pushes back on the client through gRPC's flow control), and the
// message's permit is held until the handler asks for the next message
// (released as a Success, or as Ignored or Dropped when the stream's
// context was cancelled or its deadline passed meanwhile) or returns
// (released by the handler's error). A
// message that is not admitted fails RecvMsg with the rejection's status
// and puts the pushback in the stream's trailer; the handler returns it
// as any receive error, which ends the stream (a handler that returns nil
// instead still ends it with that status: the client must not read a
// success). A message received after the handler returned, by a goroutine
// it left receiving, is not admitted.
//
// # Client
//
// The client interceptor sees each logical call once and sends it once
// per attempt through the rest of the chain. The rules are those of
// retrybudget.Transport: a call is retried only when all of these hold:
//
//   - the attempt failed with Unavailable, or with ResourceExhausted and a
//     pushback (the server said when its quota comes back), and the
//     caller did not cancel it;
//   - the method is Retryable (every method by default: gRPC documents
//     Unavailable as transient, and a shedding server rejects before it
//     runs anything);
//   - the response carries no "do not retry" pushback: gRPC reads a
//     negative, malformed or repeated grpc-retry-pushback-ms that way, and
//     so does the client;
//   - fewer than MaxAttempts attempts were made, and the Inbound policy
//     allows it (an inbound call that is itself a retry);
//   - the pushback is at most MaxPushback;
//   - the wait (full-jitter exponential backoff, at least the pushback)
//     plus the expected duration of the attempt fits before the call's
//     deadline;
//   - the target's breaker is not open;
//   - the throttle (if any), then the budget, allow it. They are asked
//     last, so that nothing is consumed for a retry another rule forbids,
//     and the budget, which other targets share, after the throttle.
//
// A call that is not retried returns an error with the last attempt's
// status (status.Code works as usual) that unwraps to a
// *retrybudget.RetryError naming the reason (errors.Is matches
// retrybudget.ErrBudgetExhausted, ErrCircuitOpen, ErrDeadline...). A call
// that could not be sent at all (open breaker, throttle, too little time
// for MinAttemptTime) fails with Unavailable (DeadlineExceeded for the
// deadline) and Attempts 0. Every attempt carries its number in the
// shedkit-attempt metadata ([AttemptMetadata]), in place of any the
// outgoing context forwarded from an inbound call; the server interceptors
// pass it to the handler's context, where a retrybudget.Transport or a
// Client used by the handler applies its InboundPolicy, so that only one
// layer retries.
//
// The breaker of a target (ClientConn.Target) asks whether the target can
// serve anyone at all, and counts logical calls, each once with the
// outcome of its last attempt. Only Unavailable without a pushback counts
// as a failure: it is what gRPC reports when it cannot reach the target.
// Application errors (Internal, Unknown, NotFound...) are successes,
// since the target answered, and counting them would let whoever can make
// one method fail cut the target off for all; deadlines, cancellations
// and shedding (Unavailable with a pushback) are not counted.
//
// # OpenTelemetry
//
// The server interceptors set shedkit's admission attributes
// (shedhttp.AttrDecision, AttrReason, AttrClass, AttrQueueWait, AttrCost,
// and AttrAttempt and AttrDeadlineBudget when the call carries them)
// on the call's span when one is recording, typically otelgrpc's server
// span. The client makes one INTERNAL span per logical call, named
// "retry {pkg.Service/Method}" (rpc.system.name, rpc.method,
// server.address, server.port, shedkit.retry.attempts,
// rpc.response.status_code, error.type), with the retry backoff and
// denial events of package retrybudget, and one CLIENT span per attempt,
// its child, named "{pkg.Service/Method}", with shedkit.retry.resend_count
// on resent attempts; it injects the attempt's trace context into the
// metadata. Spans carry the method's name only when the client
// recognises it: the call comes from a generated stub (which passes
// grpc.StaticMethod) or its method is one of ClientConfig.KnownMethods.
// Any other call, such as those a proxy (grpc.UnknownServiceHandler)
// forwards under whatever names its clients sent, gets the spans
// "retry grpc" and "grpc" with rpc.method "_OTHER" and the name in
// rpc.method_original (at most its first 256 bytes, cut between
// characters, as valid UTF-8), as the OpenTelemetry RPC conventions ask,
// so that clients cannot multiply span names. With otelgrpc's client stats
// handler on the ClientConn, set ClientConfig.DisableAttemptSpans:
// otelgrpc then makes the CLIENT span of
// each attempt (it sees every attempt, as children of the logical span)
// and injects the context. Metrics are retrybudget's
// (shedkit.retry.requests, attempts, denied, breaker.transitions,
// budget.balance) under this package's instrumentation scope.
//
// # Recording
//
// ServerConfig.Recorder (package record) records a sample of the calls
// for shedsim fit, with the records the HTTP middleware writes: class,
// estimated and actual cost, decision, queue wait, latency, outcome and
// the hash of the rate-limit key. A stream is one record (one per message
// under PerMessageStreams). The format's status is an HTTP status: a
// call's gRPC code is recorded as the status google.rpc.Code maps it to
// (OK 200, Canceled 499, InvalidArgument 400, ResourceExhausted 429,
// Unavailable 503, DeadlineExceeded 504, Internal 500...), so that
// recordings of gRPC and HTTP traffic read alike; codes that share a
// status are not told apart. The header names KeyMetadata as the HTTP/2
// header it travels in ("header:X-Tenant"; shedsim tune's KeyHeader is
// the KeyMetadata to set), else the peer's address, or Classify when it
// replaces the keys (one that sets only the class or the cost leaves
// the source as it was). Only
// sampled calls read the clock; the others cost a few atomic adds and no
// allocation (BenchmarkRecorderOverhead reports the ratio to the same
// interceptor without a recorder).
//
// # Cost
//
// An admitted unary call costs the limiter's compare-and-swap, a context
// lookup or two, and one allocation (the permit's state, which is also
// the handler's context); a shed call allocates nothing. Measured with
// BenchmarkRatios of package grpcpeers in module bench/ (December 2026, 2
// shared cores, three runs, every variant interleaved in each; `cd bench
// && go test -run '^$' -bench Ratios ./grpcpeers`), which sets shedkit's
// interceptor beside go-concurrency-limits' and lives there so that this
// module does not require go-concurrency-limits: the interceptor adds
// 240-260 ns per admitted call to a handler called in process, against
// 400-420 ns (3 allocations) for go-concurrency-limits' interceptor,
// 1.6-1.75 times as much; over loopback, where a bare unary call takes
// 73-78 us, shedkit's ratio to the bare server is 0.99-1.03 (noise) and
// go-concurrency-limits' 1.02-1.09. Shedding a call costs 120-190 ns
// (BenchmarkUnaryRejected). This module's own benchmarks (bench_test.go)
// measure shedkit alone, in process: the bare server and shedkit with a
// static and with an adaptive limit, and rejection.
package grpc
