// Package shedredis shares shedkit's per-tenant quotas across the
// replicas of a service through Redis, and keeps them working when Redis
// does not.
//
// It is its own Go module (github.com/shedkit/shedkit/middleware/shedredis)
// so that services that do not use Redis never download a Redis client.
//
// # What it provides
//
//   - [Store], a shedhttp.KeyStore: the middleware's per-key rate limits
//     (shedhttp.RateLimit, requests per second with a burst) counted once
//     for the whole fleet. Pass it as nethttp.Config.KeyStore (or Echo's).
//     It also charges costs ([CostStore], [Store.AllowNAt]): tokens per
//     minute per tenant is shedhttp.RateLimit{Rate: perMinute / 60,
//     Burst: perMinute} charged with the request's tokens.
//   - [Concurrency]: requests in flight per tenant across the fleet, as
//     leases ([Concurrency.Acquire], [Lease.Release]), and
//     [ConcurrencyMiddleware], which answers 429 with Retry-After when a
//     tenant is at its fleet limit.
//
// # How state is kept in Redis
//
// Every key starts with Config.Prefix ("shedkit:" by default); keys longer
// than shedhttp.MaxKeyBytes, and keys that start with "sha256:" (so that
// none can pose as another's digest), are stored as a digest.
//
//   - Quotas: "rate:<prefix>ql:<class>:<rate>/<burst>:<key>" holds one
//     number, the GCRA theoretical arrival time, set by redis_rate's Lua
//     script (one EVALSHA per decision) with Redis's clock and an expiry
//     of one refill, so idle keys vanish. The limit is part of the key,
//     as in shedhttp.MemoryStore: callers that give a class the same
//     limit share its bucket, and another limit (a token quota beside a
//     request limit, a limit changed by a deploy) has its own, since one
//     timestamp read under two limits means neither. A changed limit
//     thus starts full, and while old and new replicas both run, a
//     tenant may get both limits' rates.
//   - Leases: "<prefix>c:<key>" is a sorted set whose members are leases
//     ("<replica id>:<sequence>") scored by their expiry in Redis
//     milliseconds. Acquire (one script) drops expired members, counts
//     the others and adds the lease if under the limit; the renewer sets
//     every held lease's expiry again every LeaseTTL/3 (one script per
//     key, pipelined); Release removes the member. The set expires one
//     TTL after its last write.
//
// Redis's clock (TIME inside the scripts) dates everything, so the
// replicas' clocks never matter.
//
// # Redis failing is not an outage
//
// Every call has a time budget (Config.Timeout, 5 ms by default; the
// go-redis client must have ContextTimeoutEnabled so that the budget
// reaches the socket). On a timeout or an error the decision is taken
// locally, on this replica's share of the quota: Rate/Replicas and
// Burst/Replicas for rates (kept in a shedhttp.MemoryStore; a cost larger
// than the share's burst is taken from a bucket of the fleet's burst,
// refilled at the share's rate, that every cost of the key is charged
// to), limit/Replicas for leases, rounded up. The service keeps answering, and the fleet as a
// whole still enforces about the quota, as long as the load is spread
// evenly over Config.Replicas replicas. A gobreaker breaker opens after
// Config.BreakerFailures consecutive failures and stops calling Redis for
// Config.BreakerOpen, so a sick Redis costs nothing per request; then one
// call probes it. Leases taken locally are written to Redis by the next
// renewal that succeeds, so that the fleet's count is whole again soon
// after Redis returns, even when it returns empty.
//
// This is fail-open, as Stripe's and Envoy's global limiters are usually
// run: a quota protects the service and the tenants from each other, and
// it is better enforced approximately for a while than turned into
// refusals or added latency for everyone. Were Redis itself the overload,
// the breaker keeps the service off it.
//
// Metrics (OpenTelemetry), each with shedkit.store.name (Config.Name):
// shedkit.store.errors (by operation and error.type),
// shedkit.store.fallbacks (by operation and cause: timeout, error,
// breaker_open), shedkit.store.duration (seconds, by operation) and
// shedkit.store.lease.decisions ([MetricLeaseDecisions]: the leases
// Acquire admitted, rejected at the key's fleet limit (the 429s of
// [ConcurrencyMiddleware]) or cancelled, by shedkit.decision and
// shedkit.store.fallback). No metric carries the key.
// [Decision.FellBack], [Lease.FellBack] and [Store.FellBack] tell whether
// a decision fell back; [ConcurrencyMiddleware] and, through
// [Store.AllowRequest] (shedhttp.RequestKeyStore), the shedkit middleware's
// rate limit put it on the request's span ([AttrFallback], [AttrCause]).
// With MiddlewareConfig.Recorder (the record.Recorder the shedkit
// middleware records to), [ConcurrencyMiddleware] records its 429s, which
// the shedkit middleware never sees, with the reason key_concurrency and
// the tenant's hashed key, so that shedsim fit reports the tenants capped
// and infers the cap.
// With Config.Recorder (the same Recorder) a Store and a Concurrency
// record a sample of their Redis calls (record.KindStore: start,
// duration, operation, and ok, timeout, error, breaker_open or canceled),
// so that shedsim fit infers the scenario's service.store. A renewal is
// timed as its whole pipeline, and the removal after it of the leases
// released meanwhile is recorded as op cleanup, not as a release: both
// run off the request path with the renewal's budget. The calls are
// timed for shedkit.store.duration anyway: on 2 shared cores a recorded
// call cost 1.35 µs instead of 1.0 µs (1.35x the guard's own cost around
// a call that does nothing; a Redis call on loopback takes 36 µs more),
// one sampled out adds an atomic add, and recording adds no allocation
// to the guard's own (5 per call, its time budget's context among them,
// with or without a Recorder; BenchmarkStoreCallRecorder). The store
// calls count toward the Recorder's MaxRecordsPerSecond: with them,
// fewer requests are recorded (every 2^k-th), not more lines written.
// With shedhttp.Options.RateLimitCost the middleware charges each
// request's cost, so a RateLimit in tokens per minute is a tenant's token
// quota for the whole fleet.
//
// # Why quotas are shared and adaptive limits are not
//
// A quota is a promise about a tenant, the same whichever replica serves
// it: it must be counted in one place. The adaptive concurrency limit
// (package limits, through shed.Limiter) is about a replica: it
// measures that replica's own latency and drops, and protects that
// replica's resources (its CPU, its memory, its connections). A fleet-wide limit would mix the latency of a
// healthy replica with that of a sick one, react to neither, and put a
// network call on every admission. So each replica keeps its own
// shed.Limiter, and only the per-tenant quotas live in Redis.
//
// # Costs and limits
//
// A decision costs one Redis round trip and a lease two (acquire and
// release): on loopback, on a shared 2-core machine, a decision took
// 36 µs at the median and 77 µs at p99 (BenchmarkAllowAt; the in-memory
// store 0.1 µs), a lease 59 µs and 112 µs (BenchmarkLease). redis_rate
// works in floating-point seconds since 2017: rates above about a million
// per second per key lose precision. Leases of a crashed replica count for
// up to LeaseTTL; a replica that cannot reach Redis for longer than
// LeaseTTL loses its leases there, and the fleet may admit more than the
// limit until Redis is reachable and the renewer writes them again.
package shedredis
