// Package shed is shedkit's admission controller: it decides, for each
// unit of work, whether it may start now, may wait briefly, or is rejected,
// so that the work in flight stays within a concurrency limit and an
// optional cost budget.
//
// # Permits
//
// Admission returns a [Permit] that represents the accepted work. Release it
// exactly once, on every path, with an [Outcome]: Success (its latency is a
// sample for the limit), Dropped (an overload signal: an upstream timeout, a
// 503) or Ignored (a client error or cancellation: no sample). Release is
// idempotent on the variable it is called on. Misuse never corrupts the
// limiter: releasing two copies of a Permit value never takes its counts
// below zero, and is counted and reported as a misuse
// (ClassSnapshot.Misused, EventMisused). With Config.TrackLeaks, a permit
// that is dropped without Release is found by the garbage collector,
// reported and its capacity reclaimed.
//
// # Limits
//
// The limit comes from a [LimitSource] (a static Config.Limit, the adaptive
// limits of package limits, or an adapter for another library). It may change
// at any time; shrinking it never revokes admitted work, it only stops new
// admissions until the work in flight drains below it. A source that is a
// [Prober] may close the limiter (a limit of 0): only the probes it grants
// are admitted until it reopens.
//
// # Classes, cost and queues
//
// Requests belong to ordered priority classes. A class may protect a share
// of the limit: other classes borrow it while the class is idle, and stop
// being admitted into it once the class has unmet demand again (a waiter, or
// a rejection within Config.DemandHold); running work is never preempted.
// Waiting higher classes are always served before lower ones; Strict makes
// any unmet demand of a higher class block lower classes.
//
// A request may carry a cost (for example estimated tokens). The limiter
// bounds both the count and the cost in flight; [Permit.Reconcile] replaces
// the estimate with the actual cost. A cost above the whole budget is
// rejected at once.
//
// A class may queue a bounded number of requests for a bounded time. A
// freed slot goes to exactly one waiter, in order (oldest first, or newest
// with ClassConfig.LIFO). A newcomer is not queued behind the waiters:
// capacity a rising limit adds goes to whoever asks next until a release
// hands freed capacity to the queue, and with a cost budget a waiter at
// the head whose cost does not fit yet lets smaller newcomers pass.
//
// # Tenants
//
// A request may name its tenant (Request.Tenant: a customer, an API key),
// so that one noisy tenant cannot crowd the others out of a class whose
// limit is right. While a class is contended, an admission must leave its
// tenant within its share of the class: the class's capacity times the
// tenant's weight (Config.TenantWeight, 1 by default) over the weights of
// the class's active tenants, rounded up. A request over it is rejected
// with ReasonTenantShare. The class counts as contended when the admission
// would leave no room for another request like it, when it has waiters,
// and for Config.DemandHold after a tenant's request within its share was
// refused for lack of capacity (if that tenant had nothing in flight, the
// class counts it as one more tenant meanwhile). So a tenant alone, or
// in an idle class, may use all of it; a tenant above its share never
// takes the last free place of a busy class, and once its work ends it is
// held to its share while the others want theirs. Running work is never
// preempted.
//
// A request over its share is rejected rather than queued: waiting would
// let a noisy tenant fill the class's bounded queue ahead of the others,
// and it could not be admitted at its turn anyway. A waiter whose tenant
// is over its share when its turn comes is rejected likewise.
//
// Only tenants with work in flight or queued are tracked
// (ClassSnapshot.Tenants), so memory is bounded by the limit and the
// queues whatever the number of tenants; an entry is freed when its last
// work is released, on every path that gives a permit's capacity back.
//
// # Deadlines
//
// A request may carry a deadline: when its caller stops waiting. Work that
// cannot finish before it only holds capacity that others could use, so a
// request whose deadline has passed is never admitted, and one whose
// remaining time is at most its expected queue wait (plus, when
// Config.DeadlineMargin is set, that many times its class's expected
// service time) is rejected at once with ReasonDeadline, without waiting
// and without touching the limit. The expected service time tracks the median
// time the class's recent work held its permits (ClassSnapshot.ServiceTime;
// per unit of cost with Config.ServiceTimePerCost): with a margin of at
// most 1, a rejected request had at most an even chance of finishing in
// time, whatever the shape of the latency distribution. A waiter leaves
// the queue once it could no longer finish. After a slowdown, a class
// whose every request is refused lets one probe through per expected
// service time, so that a stale estimate cannot shut it out for good. With
// the wall-clock API a request with a deadline reads the clock once.
//
// # Rejections
//
// A rejection is a *[Rejection] (errors.Is(err, [ErrRejected])) with a
// [Reason] and a Retry-After hint. Rejection values are shared and
// immutable, so rejecting allocates nothing.
//
// # Time
//
// Every decision has an explicit-time form ([Limiter.TryAcquireAt],
// [Limiter.EnqueueAt], [Permit.ReleaseAt], [Limiter.ExpireAt],
// [Limiter.DrainAt]): the core is a synchronous state machine that never
// sleeps and starts no goroutines, which is what lets package sim run it in
// virtual time. [Limiter.TryAcquire], [Limiter.Acquire] and [Limiter.Drain]
// are wall-clock wrappers. A clock that goes back counts as no time
// passed: a demand hold, a queued request's wait, the deadline probe's
// interval and the sampling rate's window each last at most their own
// length after the step, never until the clock has caught up with it.
// Reading the clock costs about 100 ns, so the
// wall-clock API times only a subset of permits above
// Config.MaxSamplesPerSecond (every 2^k-th admission of each class); drops
// are always reported.
//
// # Cost
//
// While nothing waits and no class is short of its protected share,
// admission and release are one compare-and-swap each on a packed state
// word, plus one atomic add on a per-class counter; they allocate nothing
// and take no lock. A timed permit also takes and frees a guard slot, one
// compare-and-swap each, which tells copies of it apart. Queueing,
// protected-capacity decisions and draining take a mutex. A request with
// a tenant also takes the mutex of one shard of the tenant map on each
// side, and allocates nothing once its shard has an entry to reuse.
// Requests without a tenant pay one comparison for the feature. See
// bench_test.go and `make bench`.
//
// # Observability
//
// [Limiter.Snapshot] reports the limit, the work in flight and per-class
// counters by decision and reason. An [Observer] is told about every
// decision and costs nothing when unset; it is the hook for metrics.
//
// # Shutdown and rollout
//
// [Limiter.Drain] stops admitting, waits for the work in flight until its
// context ends and reports what was still running. Config.DryRun computes
// and reports every decision but admits everything, except while draining
// and a cost above MaxCost.
package shed
