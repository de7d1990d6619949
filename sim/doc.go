// Package sim is shedkit's deterministic simulator: it runs the real
// shed.Limiter, the limits of package limits (and of go-concurrency-limits
// through limits/gcl) and retrybudget in virtual time, against modelled
// clients, a gateway, service replicas and their upstream, so that
// admission policies can be compared and tuned before production.
// Command shedsim (package cli) is its front end.
//
// # Engine
//
// A discrete-event simulation: an event heap ordered by time, then by a
// scheduling sequence number, so that simultaneous events always run in
// the same order. Timers of a constant duration (attempt timeouts, queue
// deadlines) go to FIFO lanes of which only the head sits in the heap.
// Every random draw comes from a PCG stream (math/rand/v2) seeded with the
// run's seed and the name of the model component that draws from it
// (arrivals of each class, costs, each upstream's service times and
// errors, retry jitter, the balancer), so that adding a component does not
// shift the draws of the others. Nothing iterates over a map, nothing reads
// the clock and a run starts no goroutine: the same scenario, policy and
// seed give the same bytes in every output. Requests are pooled; a run
// allocates little beyond its time series. [RunBatch] runs independent
// runs in parallel, with results independent of the number of workers.
//
// The limiters are driven through their explicit-time API: EnqueueAt
// admits, rejects or queues (a queued request is woken by the waiter's
// notify, and its queue deadline is enforced by ExpireAt at
// Waiter.Deadline), ReleaseAt ends the work with the outcome the
// middleware would give it (Dropped for an answer after the request's
// deadline, an error or a timeout; Ignored when the caller went away
// before the deadline; else Success),
// ReconcileAt replaces the reserved cost by the actual one. Each
// limiter's epoch is [Epoch].
//
// # Model
//
// Logical requests of each class arrive as a Poisson process whose rate
// follows a piecewise-linear schedule (steps, ramps, spikes), or from
// closed-loop users who think between requests. A request carries a cost
// (for example estimated tokens), a deadline and the class's retry policy.
// It goes from the client through an optional gateway to a service
// replica picked by the balancer (round robin, least in flight, power of
// two choices); each of these layers may time out its attempt and retry
// with full-jitter exponential backoff, optionally asking a
// retrybudget.Budget (shared by the layer) and a retrybudget.Throttle,
// and optionally honouring a shedding service's "do not retry" and
// Retry-After. Deadlines propagate as retrybudget.Transport sends them
// and the middleware reads them (DeadlineHeader): a replica sees the time
// its caller has left, in whole milliseconds rounded down, at most
// shedhttp.DefaultMaxDeadline, never more than the caller's attempt
// allows; its limiter rejects at once a request whose deadline has passed
// or is shorter than its expected queue wait (plus service.deadline_margin
// times its expected service time; 0 by default, as in shed.Config). With
// service.no_deadline_propagation replicas see no deadline at all, as a
// service whose callers send none.
//
// A class may spread its traffic over tenants (Keys, whose heaviest may
// surge), and limit each tenant before the limiter sees it, as the
// middlewares do: a cap on the tenant's requests in flight
// (KeyConcurrency, shedredis.ConcurrencyMiddleware in front of the
// shedkit middleware), then a rate limit (RateLimit, the shedkit
// middleware's), each answered 429. Each is counted in every replica on
// its own or, Shared, once for the fleet as shedredis keeps it in Redis;
// during Service.StoreOutages a shared limit falls back to each
// replica's share, and with Service.Store each decision waits the
// store's round trip, behind shedredis's time budget and breaker, and
// a shared cap's leases are released and renewed by store calls too,
// so that they count late or expire as shedredis's do: a response waits
// for its lease's release, and a call that timed out still takes,
// removes or renews its lease when it reaches the store. A rate limit's
// call that timed out likewise takes its token from the fleet's bucket
// when it gets there, though the replica has decided the request on its
// share and charged that too. A rate limit bounds how fast a tenant
// sends; only the cap bounds how much of the fleet its slow requests
// hold.
//
// The replica admits the request through its limiter (built by the
// [Policy]), calls the upstream (retrying per its own policy) and releases
// the permit when the upstream answers, even after the deadline, by
// default: its call ignores the request's context, so the permit bounds
// the upstream's work. With service.cancel_at_deadline the replica stops
// waiting at the deadline it sees and releases the permit then, as a
// handler that passes the request's context to its call does; with
// upstream.abandon the upstream then stops the work too (shedsim -family
// -deadline-model applies either to a family). The upstream is Capacity servers
// with a FIFO queue: service times drawn from a distribution (log-normal,
// exponential, constant, uniform), scaled by the request's actual cost
// when CostScaling is set, by slowdown events, and by Degradation when
// jobs wait (congestion collapse); error bursts fail jobs. A job whose
// caller gave up is finished anyway, unless upstream.abandon: that is
// wasted work, as in real systems. With Degradation 0 and no events the upstream is an M/G/c
// queue; the tests check M/M/1 and M/M/c against theory and Little's law.
// With discipline ps the upstream is a processor-sharing server instead
// (every job present is served, each at min(1, capacity/n) of full speed
// with n present), as CPU-bound and thread-per-request services are: the
// tests check M/M/1-PS and M/G/1-PS against theory, and that the service
// delivered equals the work completed.
//
// # Measures
//
// Each run has a time series (one [Row] per Interval) and a [Summary]:
// goodput (logical requests answered successfully within their client's
// deadline) against the ideal (see Summary.Ideal: what the upstream could
// serve at its current speed within the clients' deadlines, cheapest
// classes first), the same during the trigger, recovery time (from the
// trigger's end to the first Sustain of intervals at 90% of the healthy
// throughput), client latencies of successes per class, the latency of
// admitted work (healthy and during the trigger), amplification (attempts
// at the service per logical request), wasted upstream time, rejections.
// [Summary.Metric] names them for objectives and expectations.
//
// # Scenario files
//
// A scenario is YAML; unknown fields, duplicate keys, wrong types and
// invalid values are errors that name the file, line, column and field.
// Durations are Go durations (250ms, 1.5s, 2m). A distribution is a
// constant (50ms, or 1000 for a cost) or a mapping with dist (constant:
// value; exponential: mean; lognormal: median or mean, and sigma;
// uniform: min, max; pareto: median, alpha (tail index); bimodal: median,
// sigma, ratio (slow mode / fast mode), share (of the slow mode)) and
// optional clamp_min and clamp_max. Every field:
//
//	name: slowdown               # required
//	description: text
//	duration: 180s               # required
//	interval: 1s                 # one row of the series (default 1s)
//	warmup: 10s                  # left out of the summary (default 10s)
//	sustain: 5s                  # recovery must last this long (default 5s)
//	trigger: {at: 60s, for: 60s} # default: the span of the upstream events
//	classes:                     # highest priority first
//	  - name: interactive
//	    rate: 1200               # Poisson arrivals per second, or:
//	    users: 0                 # closed-loop users...
//	    think: {dist: exponential, mean: 1s}   # ...and their think time
//	    schedule:                # rate changes, in order, not overlapping
//	      - {at: 60s, factor: 3, for: 30s}     # spike: x3 for 30 s
//	      - {at: 120s, rate: 500, ramp: 10s}   # ramp to 500/s over 10 s
//	      - {at: 150s, rate: 800}              # step
//	    cost: {dist: lognormal, median: 1500, sigma: 0.6}  # reserved cost (default 1)
//	    actual: {dist: uniform, min: 0.3, max: 1}          # actual / reserved
//	    timeout: 1s              # client deadline, retries included (default 1s)
//	    attempt_timeout: 300ms   # per client attempt (default timeout)
//	    retry:                   # also under gateway: and service:
//	      max_attempts: 4        # 1 (default): no retry
//	      backoff: 20ms          # full jitter, doubling (default 10ms)
//	      max_backoff: 1s
//	      honor_no_retry: false  # a shedding service's rejection is final
//	      honor_retry_after: false
//	      budget: {ratio: 0.2, min_per_second: 10, ttl: 10s}  # retrybudget.Budget; {} = defaults
//	      throttle: {k: 2, window: 2m}                        # retrybudget.Throttle
//	    protected: 0.5           # shed.ClassConfig of the class
//	    queue: 50
//	    max_wait: 100ms
//	    lifo: false
//	    rate_limit: {rps: 200, burst: 50, shared: true}  # 429 before admission (burst default rps/10):
//	                             # a bucket per key for the fleet (shedredis.Store), or with
//	                             # shared: false (the default) one in each replica; the same for every class
//	    keys: {count: 1000, zipf: 1.1}     # tenants: key k sends in proportion to 1/(k+1)^zipf (default: one key)
//	    #   source: header:X-Tenant  # where the service takes them from, as recorded (shedsim fit):
//	    #                        # header:NAME, addr or classify; tune's snippet sets KeyHeader from a header
//	    #   surge: {at: 60s, for: 30s, factor: 8}  # key 0 (the heaviest) sends 8x its share meanwhile,
//	    #                        # the others as before (open-loop classes of two keys or more)
//	    key_concurrency: {limit: 20, shared: true}  # requests of one key in flight, 429 before the
//	                             # rate limit: for the fleet (shedredis.ConcurrencyMiddleware), or with
//	                             # shared: false (the default) in each replica; each class its own
//	gateway:                     # optional proxy layer
//	  timeout: 500ms             # per attempt
//	  retry: {max_attempts: 2}
//	service:
//	  replicas: 1
//	  balancer: round_robin      # least_in_flight, power_of_two
//	  max_cost: 0                # cost budget of each limiter (not under "none")
//	  static_limit: 0            # limit of the static policy (default: upstream capacity)
//	  strict: false              # shed.Config Strict, MaxQueue, DemandHold
//	  max_queue: 0
//	  demand_hold: 1s
//	  timeout: 0                 # per upstream call (default: wait for the answer)
//	  retry: {max_attempts: 1}
//	  no_deadline_propagation: false  # replicas see no deadline (callers send none)
//	  deadline_margin: 0         # shed.Config.DeadlineMargin
//	  store_outages:             # the shared limits' store (Redis) is out: each replica
//	    - {at: 60s, for: 20s}    # enforces rps/replicas, burst/replicas and limit/replicas on its own
//	                             # (without store: below, back as soon as the outage ends)
//	  store:                     # the calls to that store, as shedredis makes them (default: none,
//	                             # they take no time); only with a shared limit
//	    latency: {dist: lognormal, median: 1ms, sigma: 0.5}  # round trip of each call, before its
//	                             # decision: one per shared limit (a lease, then a rate limit)
//	    timeout: 5ms             # shedredis Config.Timeout: a call out or slower costs this and fails
//	                             # (a slower one still runs when it reaches the store)
//	    breaker_failures: 5      # consecutive failures that open a replica's breaker (one per client)
//	    breaker_open: 1s         # open: no calls, local decisions; then one probe
//	    lease_ttl: 10s           # shedredis Config.LeaseTTL: key concurrency leases are also released
//	                             # (the response waits for it) and renewed (every lease_ttl/3, two round
//	                             # trips, then a call that removes the leases released meanwhile) by store
//	                             # calls; a lease whose release failed counts until a renewal removes it or
//	                             # it expires, one not renewed for lease_ttl stops counting, one taken in
//	                             # fallback counts for the fleet from the next renewal, and a lease's call
//	                             # that timed out still runs when it reaches the store
//	    restarts: false          # each store outage ends with a restart (empty script cache): the first
//	                             # call of each script pays NOSCRIPT and a second round trip (EVAL)
//	upstream:
//	  capacity: 100              # servers: the concurrency where latency starts to grow
//	  discipline: fifo           # fifo: the rest wait; ps: all share the servers
//	  max_in_flight: 0           # jobs present beyond which one fails at once (0: no bound)
//	  service_time: {dist: lognormal, median: 50ms, sigma: 0.5}
//	  degradation: 0.5           # a job starting while q wait is 1 + 0.5 q/capacity times slower...
//	  max_degradation: 10        # ...at most this much
//	  cost_scaling: 0            # service time x (actual cost / cost_ref)^cost_scaling
//	  cost_ref: 1
//	  shared: false              # one upstream for all replicas, else one each
//	  events:
//	    - {at: 60s, for: 60s, slowdown: 10}          # service time x10
//	    - {at: 200s, for: 10s, errors: 0.5}          # half the jobs fail
//	    - {at: 250s, for: 30s, capacity: 0.5, replicas: 10}  # half the servers, first 10 replicas
//	policies: [none, static, shedkit-gradient]       # default list for this scenario
//	expect:                                          # ranges checked by tests and shedsim -check
//	  - {policy: shedkit-gradient, metric: goodput, min: 0.8, max: 1.05}
//	  - {policy: none, metric: recovery, min: 60s}
//
// The built-in suite ([Suite], shedsim -suite, shedsim -print NAME) covers
// steady load, a 10x upstream slowdown (and the same with an upstream
// provisioned with room), a ten-fold loss of upstream capacity (the work
// in flight it takes falls ten-fold too), a 3x spike, a retry storm that
// turns metastable without budgets and the same with budgets, interactive
// and batch traffic at 3x overload, an LLM token-cost mix and a fleet of
// 100 replicas. Each file states its expectations: the ranges that hold
// today.
//
// # Policies
//
// A [Policy] builds each replica's limiter. The built-in ones
// ([defaultPolicies]): none, static, shedkit-gradient, shedkit-aimd,
// gcl-gradient2, gcl-vegas and gcl-aimd, with parameters
// ("shedkit-gradient:tolerance=2,smoothing=0.3"); [RegisterPolicy] adds
// others. gcl-vegas runs with the library's probe disabled: the probe
// draws from math/rand's global source, which no seed controls. The gcl
// policies keep the library's default tuning unless given initial and max
// (and min, for gcl-gradient2): "gcl-gradient2:initial=500,max=5000"
// starts warm, with room above the library's default maximum of 200, so
// that peers can be compared on scenarios that need thousands in flight.
// [Grid], [Objective] and [Rank] implement sweeps; [Tune], [TuneSpace]
// and [StressVariants] search whole configurations on stressed copies of
// a scenario (shedsim tune), a class's per-tenant quota and cap on
// requests in flight included when it is spread over tenants: only a
// stressed copy where one tenant floods shows what either is worth, and
// the healthy scenario what it costs.
package sim
