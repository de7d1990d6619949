package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Scenario describes one simulated system and its load: classes of
// clients, an optional gateway, the service (replicas, each with its own
// limiter) and the upstream it depends on. Zero fields take the defaults
// documented on each field; [Scenario.Validate] names the first invalid
// field. Scenarios come from YAML files ([LoadScenario], [ParseScenario]),
// the built-in suite ([Suite]) or Go code.
type Scenario struct {
	Name        string
	Description string
	// Duration of the simulated run. Required.
	Duration time.Duration
	// Interval is the length of one row of the time series. Default 1s.
	Interval time.Duration
	// Warmup is excluded from every summary figure (adaptive limits start
	// from their initial limit). Default 10s (at most half the Duration);
	// it must be shorter than the Duration.
	Warmup time.Duration
	// Trigger is the span of the disturbance that recovery is measured
	// from. Default: from the first upstream event's start to the last
	// one's end, or none.
	Trigger *Span
	// Sustain is how long throughput must stay at 90% of the healthy
	// throughput for the system to count as recovered. Default 5s.
	Sustain time.Duration

	Classes  []Class
	Gateway  *Gateway
	Service  Service
	Upstream Upstream

	// Policies lists the policies this scenario is meant to compare;
	// empty means the built-in set. Overridden by shedsim -policies.
	Policies []string
	// Expect holds the ranges the scenario's figures must fall in, per
	// policy, in the way Vector tests its adaptive concurrency: a
	// regression test reads them (see [Result.Check]).
	Expect []Expect
}

// Span is an interval of simulated time.
type Span struct{ At, For time.Duration }

// End returns At + For, saturated at the largest (or smallest)
// time.Duration instead of wrapping around.
func (s Span) End() time.Duration { return addDur(s.At, s.For) }

// addDur returns a + b saturated to the range of time.Duration, so that
// validation compares sums of user-given durations without overflow.
func addDur(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// Class is a class of logical requests: its arrivals, cost, deadline and
// retry policy on the client, and its admission settings in the service's
// limiter (a shed class of the same name, in the order of Classes:
// the first class has the highest priority).
type Class struct {
	Name string
	// Rate is the open-loop Poisson arrival rate in requests per second,
	// changed over time by Schedule. Exactly one of Rate and Users.
	Rate     float64
	Schedule []RateChange
	// Users is the number of closed-loop users: each sends a request,
	// waits for its outcome, thinks for a draw of Think, and repeats.
	Users int
	// Think is the think time in nanoseconds. Default exponential 1s.
	Think Dist
	// Cost is the cost a request reserves (for example estimated tokens).
	// Default constant 1. Draws are rounded to integers of at least 1.
	Cost Dist
	// Actual is the actual cost as a multiple of the reserved cost, for
	// example uniform [0.2, 1] when a request reserves its maximum output.
	// The service reconciles its permit when the upstream starts the
	// work. Zero: the actual cost is the reserved cost.
	Actual Dist
	// Timeout is the client's deadline for the logical request, retries
	// included. Default 1s.
	Timeout time.Duration
	// AttemptTimeout bounds each client attempt. Default Timeout.
	AttemptTimeout time.Duration
	// Retry is the client's retry policy. Default: no retries.
	Retry Retry

	// Protected, Queue, MaxWait and LIFO configure the class in the
	// service's limiter (shed.ClassConfig Protected, QueueDepth, MaxWait,
	// LIFO). Default: no protected share, no queue.
	Protected float64
	Queue     int
	MaxWait   time.Duration
	LIFO      bool
	// RateLimit, when set, is a token bucket per key in front of the
	// class's admission, as the middleware's shedhttp.Options.RateLimits
	// sets one: a request over it is rejected with 429 before it reaches
	// the limiter, and counted as rate limited rather than shed. Each
	// replica keeps its own buckets (the default MemoryStore) unless the
	// limit is Shared. Default nil: no rate limit.
	RateLimit *RateLimit
	// Keys spreads the class's traffic over tenants (the middleware's
	// rate-limit keys). Default nil: the class is one key.
	Keys *Keys
	// KeyConcurrency, when set, bounds the requests of one key in flight,
	// as shedredis.ConcurrencyMiddleware does in front of the shedkit
	// middleware: a request over it is answered 429 before the rate limit
	// and the limiter see it. A rate limit bounds how fast a tenant
	// sends, not how much work it holds: a tenant whose requests are slow
	// fills the fleet at a modest rate, and only a cap on its requests in
	// flight stops that. Default nil: no cap.
	KeyConcurrency *KeyConcurrency
}

// KeyConcurrency bounds the requests of each key (tenant) of a class in
// flight: a request takes a lease of its key when it reaches a replica
// and holds it until the replica answers (its queue wait in the limiter,
// its upstream calls and their retries included), whatever the answer.
// A request of a key at its limit is answered 429 with a Retry-After of
// a second and "do not retry", as shedredis.ConcurrencyMiddleware
// answers; the 429s count as rate limited (Summary.RateLimited). Each
// class counts its own leases, as a ConcurrencyMiddleware on the class's
// routes alone would (a Concurrency with its own Config.Prefix).
type KeyConcurrency struct {
	// Limit is the number of requests of one key in flight, in
	// [1, MaxKeyConcurrency]: in each replica, or in the fleet when
	// Shared.
	Limit int
	// Shared: one count per key for the whole fleet, as
	// shedredis.Concurrency keeps leases in Redis. During
	// Service.StoreOutages each replica falls back, as shedredis does, to
	// Limit/Replicas (rounded up) counted on the leases it took during
	// the fallback; once the store is back, the fleet's count includes
	// them again (the real renewer writes them back within LeaseTTL/3).
	// Without Service.Store the store's round trip and the breaker's wait
	// take no time; with it each acquire waits the round trip and a
	// replica's breaker keeps it on its share for BreakerOpen after
	// repeated failures. The leases' TTL is not modelled: a lease counts
	// from when it is taken to when its request ends. Without Shared each replica counts its own, so a key
	// spread over n replicas may hold up to n x Limit.
	Shared bool
}

// MaxKeyConcurrency bounds KeyConcurrency.Limit: no run holds more
// requests of one key in flight (Upstream.Capacity and Class.Users stop
// at a million too), so a larger limit is a typo.
const MaxKeyConcurrency = 1_000_000

// clone returns a copy of k (nil for nil), so that a setting handed on
// is not shared with its source.
func (k *KeyConcurrency) clone() *KeyConcurrency {
	if k == nil {
		return nil
	}
	c := *k
	return &c
}

// validate checks a key concurrency limit; p is its path.
func (k *KeyConcurrency) validate(p string) error {
	if k.Limit < 1 || k.Limit > MaxKeyConcurrency {
		return fieldErr(p+".limit", "must be in [1, %d], got %d", MaxKeyConcurrency, k.Limit)
	}
	return nil
}

// Keys spreads a class's requests over Count keys (tenants): key k, from
// 0, is drawn with a weight of 1/(k+1)^Zipf, so key 0 is the heaviest
// tenant. Zipf 0 spreads the traffic evenly; near 1 and above, a few
// tenants send most of it, as they do in most multi-tenant services. The
// simulator keeps every key's bucket; the middleware's MemoryStore forgets
// the least recently used beyond its MaxKeys (65,536 by default).
type Keys struct {
	// Count is the number of keys, in [1, MaxKeys].
	Count int
	// Zipf is the skew of the traffic over the keys, in [0, MaxZipf].
	Zipf float64
	// Source is where the service takes the keys from, as its recording
	// said (record.Header.KeySource, which shedsim fit carries over):
	// "header:NAME" a trusted request header (shedhttp.Options.KeyHeader),
	// "addr" the client's address, "classify" a Classify function of the
	// service's own; "" when unknown. The simulator draws keys alike
	// whatever it says; shedsim tune's Go snippet sets KeyHeader from a
	// header, so that a quota per tenant is keyed as the traffic was. At
	// most record.MaxKeySourceBytes of visible ASCII (record.CheckKeySource).
	Source string
	// Surge, when set, multiplies the heaviest key's traffic for a while:
	// one tenant floods while the others send as before. Default nil.
	Surge *KeySurge
}

// KeySurge multiplies the traffic of a class's heaviest key (key 0) by
// Factor from At for For, on top of the class's schedule: the class's
// rate grows by key 0's extra traffic alone, and key 0 is drawn that much
// more often, so that the other keys' rates stay as they were. It needs
// an open-loop class of two keys or more: a closed-loop user sends when
// its last request ends, and a class of one key is a spike of the class,
// which a schedule expresses. It is what a tenant that floods looks like
// (shedsim tune's "flood" variant), and what per-key rate limits exist for.
type KeySurge struct {
	At, For time.Duration
	// Factor multiplies key 0's traffic, in (1, MaxSurgeFactor].
	Factor float64
}

// MaxSurgeFactor bounds KeySurge.Factor.
const MaxSurgeFactor = 1000

// span returns the surge's time span.
func (s *KeySurge) span() Span { return Span{At: s.At, For: s.For} }

// keyCount returns the number of keys of the class's traffic: one
// without Keys.
func (cl *Class) keyCount() int {
	if cl.Keys == nil {
		return 1
	}
	return cl.Keys.Count
}

// MaxKeys bounds Keys.Count, MaxZipf Keys.Zipf.
const (
	MaxKeys = 100_000
	MaxZipf = 10
)

// clone returns a copy of k (nil for nil).
func (k *Keys) clone() *Keys {
	if k == nil {
		return nil
	}
	c := *k
	if k.Surge != nil {
		s := *k.Surge
		c.Surge = &s
	}
	return &c
}

func (k *Keys) validate(p string) error {
	if k.Count < 1 || k.Count > MaxKeys {
		return fieldErr(p+".count", "must be in [1, %d], got %d", MaxKeys, k.Count)
	}
	if !(k.Zipf >= 0 && k.Zipf <= MaxZipf) {
		return fieldErr(p+".zipf", "must be in [0, %d], got %v", MaxZipf, k.Zipf)
	}
	if err := record.CheckKeySource(k.Source); err != nil {
		return fieldErr(p+".source", "%v", err)
	}
	return nil
}

// checkSurge checks the surge of the class's keys, if any, against the
// class and the run's duration d.
func (cl *Class) checkSurge(p string, d time.Duration) error {
	if cl.Keys == nil || cl.Keys.Surge == nil {
		return nil
	}
	s, p := cl.Keys.Surge, p+".keys.surge"
	switch {
	case cl.Keys.Count < 2:
		return fieldErr(p, "needs keys.count >= 2 (the surge of a class of one key is a schedule change), got %d", cl.Keys.Count)
	case cl.Users > 0:
		return fieldErr(p, "needs an open-loop class (rate), not closed-loop users")
	case !(s.Factor > 1 && s.Factor <= MaxSurgeFactor):
		return fieldErr(p+".factor", "must be in (1, %d], got %v", MaxSurgeFactor, s.Factor)
	case s.At < 0 || s.For <= 0 || addDur(s.At, s.For) > d:
		return fieldErr(p, "must start at or after 0s, last > 0 and end by the duration (%v); got at %v for %v", d, s.At, s.For)
	}
	return nil
}

// RateLimit is a token bucket per key (shedhttp.RateLimit): it refills at
// RPS tokens per second up to Burst, and each request takes one token or
// is rejected with 429. Without Shared each replica has its own buckets,
// so a tenant whose requests are spread over n replicas gets up to n
// times RPS; with Shared the replicas count each key once for the fleet.
type RateLimit struct {
	// RPS is the sustained rate in requests per second. Required: > 0.
	RPS float64
	// Burst is how many requests may pass at once, the bucket's size.
	// Default DefaultBurst(RPS).
	Burst int
	// Shared: one bucket per key for the whole fleet, as shedredis.Store
	// keeps in Redis (its GCRA admits what this token bucket admits).
	// During Service.StoreOutages each replica falls back, as shedredis
	// does, to buckets of its own with RPS/Replicas and Burst/Replicas
	// (rounded up), charged meanwhile with what the store admits.
	// Without Service.Store the store's round trip takes no simulated
	// time and replicas use it again as soon as it is back; with it each
	// decision waits the round trip, and a replica's breaker keeps it off
	// the store for BreakerOpen after repeated failures. The same for
	// every class: one KeyStore keeps every class's limits.
	Shared bool
}

// clone returns a copy of l (nil for nil), so that a setting handed on
// is not shared with its source.
func (l *RateLimit) clone() *RateLimit {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

// MaxRateLimitRPS bounds RateLimit.RPS, so that a typo is an error
// rather than a bucket that never empties.
const MaxRateLimitRPS = 1e9

// DefaultBurst is the burst of a RateLimit of rps requests per second
// whose Burst is zero: a tenth of a second of traffic, at least 1. Poisson
// arrivals at the limit's own rate need a burst of that order not to see
// many 429s from chance alone (with a burst of 1 they would see half).
func DefaultBurst(rps float64) int {
	if !(rps > 0) {
		return 1
	}
	return int(max(math.Round(min(rps, MaxRateLimitRPS)/10), 1))
}

// normalize checks a rate limit and fills in its default burst.
func (l *RateLimit) normalize(p string) error {
	if math.IsNaN(l.RPS) || l.RPS <= 0 || l.RPS > MaxRateLimitRPS {
		return fieldErr(p+".rps", "must be in (0, %g], got %v", MaxRateLimitRPS, l.RPS)
	}
	if l.Burst < 0 || l.Burst > math.MaxInt32 {
		return fieldErr(p+".burst", "must be >= 1 (0: default %d), got %d", DefaultBurst(l.RPS), l.Burst)
	}
	if l.Burst == 0 {
		l.Burst = DefaultBurst(l.RPS)
	}
	return nil
}

// Retry is a layer's retry policy: full-jitter exponential backoff, the
// wait drawn uniformly in [0, min(MaxBackoff, Backoff x 2^(n-1))] before
// the n-th retry. A retry is made only when its wait ends before the
// deadline of the request it serves.
type Retry struct {
	// MaxAttempts counts the first attempt: 1 (the default) never retries.
	MaxAttempts int
	// Backoff is the base wait. Default 10ms.
	Backoff time.Duration
	// MaxBackoff caps the wait. Default 1s (or Backoff if larger).
	MaxBackoff time.Duration
	// HonorNoRetry: a rejection by a shedding service ("overloaded, do
	// not retry") is final. Default false: naive clients retry it.
	HonorNoRetry bool
	// HonorRetryAfter: the wait before retrying a rejection is at least
	// the rejection's Retry-After hint.
	HonorRetryAfter bool
	// Budget, when set, asks a retrybudget.Budget shared by the whole
	// layer before every retry; every logical request of the layer
	// deposits.
	Budget *Budget
	// Throttle, when set, puts a retrybudget.Throttle (Google SRE
	// client-side throttling) in front of every attempt of the layer.
	Throttle *Throttle
}

// Budget configures a retrybudget.Budget. Zero fields take its defaults
// (ratio 0.2, 10 retries per second, TTL 10s); a negative Ratio or
// MinPerSecond means none.
type Budget struct {
	Ratio        float64
	MinPerSecond float64
	TTL          time.Duration
}

// Throttle configures a retrybudget.Throttle. Zero fields take its
// defaults (K 2, window 2 minutes).
type Throttle struct {
	K      float64
	Window time.Duration
}

// Gateway is an optional proxy layer between clients and the service,
// with its own per-attempt timeout and retry policy: with retries at the
// client, the gateway and the service, attempts multiply.
type Gateway struct {
	// Timeout bounds each attempt to the service. Default: none (the
	// client's deadline still applies).
	Timeout time.Duration
	Retry   Retry
}

// Balancer picks the replica of each attempt to the service.
type Balancer uint8

const (
	// RoundRobin cycles through the replicas.
	RoundRobin Balancer = iota
	// LeastInFlight picks the replica with the fewest requests in
	// progress (the lowest index on ties).
	LeastInFlight
	// PowerOfTwo picks two distinct replicas at random and takes the one
	// with fewer requests in progress.
	PowerOfTwo
)

var balancerNames = [...]string{"round_robin", "least_in_flight", "power_of_two"}

// String returns the balancer's name as written in scenario files.
func (b Balancer) String() string {
	if int(b) < len(balancerNames) {
		return balancerNames[b]
	}
	return "unknown"
}

// Discipline is how an upstream's servers share the jobs present.
type Discipline uint8

const (
	// FIFO serves at most Capacity jobs at once, each at full speed, the
	// others waiting in arrival order (M/G/c with no degradation or
	// events): a model of worker pools and connection pools.
	FIFO Discipline = iota
	// PS is egalitarian processor sharing over Capacity servers: with n
	// jobs present each progresses at min(1, Capacity/n) of full speed,
	// so a job's latency grows with everything present, not only with
	// what arrived before it. It models CPU-bound servers, thread-per-
	// request servers with more threads than cores, and anything whose
	// work is time-sliced. Its mean sojourn time, unlike FIFO's, does not
	// depend on the shape of the service time distribution (M/G/1-PS
	// behaves as M/M/1), and slow requests do not block fast ones.
	PS
)

var disciplineNames = [...]string{"fifo", "ps"}

// String returns the discipline's name as written in scenario files.
func (d Discipline) String() string {
	if int(d) < len(disciplineNames) {
		return disciplineNames[d]
	}
	return "unknown"
}

// Service is the layer protected by the limiters under test: Replicas
// copies behind a load balancer, each with its own shed.Limiter built by
// the policy. A replica admits a request, calls the upstream (retrying per
// Retry) and releases the permit when the upstream answers: Success when
// it answered in time, Dropped for an error, a timeout, or an answer after
// the request's deadline; or at that deadline with CancelAtDeadline.
type Service struct {
	// Replicas is the number of replicas. Default 1.
	Replicas int
	// Balancer spreads attempts over the replicas. Default RoundRobin.
	Balancer Balancer
	// MaxCost is the cost budget of each replica's limiter
	// (shed.Config.MaxCost) under every policy but "none". Zero: none.
	MaxCost int64
	// StaticLimit is the limit of the "static" policy when the policy
	// names none. Default: Upstream.Capacity (per replica).
	StaticLimit int
	// Strict, MaxQueue and DemandHold configure each limiter
	// (shed.Config).
	Strict     bool
	MaxQueue   int
	DemandHold time.Duration
	// Timeout bounds each upstream call. When it fires, the replica
	// stops waiting (and may retry) while the upstream keeps working
	// (unless Upstream.Abandon).
	// Default: none, so a permit lives as long as the upstream work.
	Timeout time.Duration
	// Retry is the replica's retry policy for upstream calls.
	Retry Retry
	// NoDeadlinePropagation: callers do not pass their deadline on (no
	// deadline header, or a middleware that does not trust it). Replicas
	// then see no deadline: their limiters reject nothing for one, and they
	// wait for the upstream however late. By default a replica sees its
	// caller's deadline as the middleware reads it from retrybudget's
	// Transport, and stops waiting there.
	NoDeadlinePropagation bool
	// CancelAtDeadline: each replica stops waiting for its upstream call
	// at the deadline it sees for the request, as a handler that passes
	// the request's context to the call does, and releases its permit
	// then (Dropped); it starts no retry past it. Its upstream keeps
	// working on the call unless Upstream.Abandon. Default false: a
	// replica waits for the upstream however late (only Timeout stops
	// it), as a handler whose call ignores the request's context does;
	// the permit then bounds the upstream work. No effect without a
	// deadline (NoDeadlinePropagation, or callers that set none).
	CancelAtDeadline bool
	// DeadlineMargin is each limiter's shed.Config.DeadlineMargin under
	// every policy but "none": also reject a request whose remaining time
	// is at most this many times its class's expected service time. Zero:
	// only a passed deadline and the expected queue wait count.
	DeadlineMargin float64
	// StoreOutages are the spans during which the store of Shared rate
	// limits and Shared key concurrency limits (Redis) cannot be reached:
	// each replica then decides on its own share of each limit. In order,
	// not overlapping, within the run.
	StoreOutages []Span
	// Store, when set, models the calls to that store as shedredis makes
	// them: each decision of a Shared limit waits its round trip, and the
	// client's time budget and breaker decide when a replica falls back.
	// Nil: the round trip takes no time and no breaker delays the return
	// to the store after an outage, as before the model existed, so that
	// older scenarios keep their figures.
	Store *StoreModel
}

// StoreModel is the shared store (Redis) as a replica's shedredis client
// sees it. A request of a class with a Shared rate limit or a Shared key
// concurrency makes one call per decision before the decision is taken
// (two with both: shedredis's Concurrency and Store are separate clients,
// each with its own breaker, so each replica has two breakers); it holds
// nothing of its limiter meanwhile, and its latency includes the wait.
// With a Shared key concurrency its response also waits for the release
// of its lease, one more call, as ConcurrencyMiddleware's does. A call
// during Service.StoreOutages, or one whose round trip exceeds Timeout,
// costs Timeout and fails: the decision is taken on the replica's share.
// A call that timed out (to take, release or renew a lease, or to take a
// rate-limit token) still runs in the store when it gets there, as Redis
// runs a script whose caller stopped waiting. A decision's call also
// ends when the request's caller stops waiting (its context ends): the
// breaker counts it neither way; a lease's acquisition then answers 503
// without running the handler and keeps the lease as an orphan, which
// the script may still add to the store until the next renewal removes
// it; a rate decision is taken on the replica's share, and the limiter
// refuses the request at once. BreakerFailures consecutive failures of a
// client open its breaker: its calls are skipped (no wait, local
// decisions) for BreakerOpen, then one call probes the store, and the
// others fall back until it answers; a success closes the breaker, a
// failure opens it again. The renewals of leases (every LeaseTTL/3, two
// round trips within max(Timeout, LeaseTTL/10)) and the call after a
// renewal that removes the leases released while it was out are calls of
// the same client, off the requests' path. The client's connection pool
// is not modelled: shedredis takes the redis client as given (its
// PoolSize, shared with the service's other Redis calls), and a call
// that waits for a connection past Timeout fails as a slow one does.
type StoreModel struct {
	// Latency is the round trip of one call. Zero: none.
	Latency Dist
	// Timeout is shedredis's Config.Timeout, the time budget of a call.
	// Default DefaultStoreTimeout.
	Timeout time.Duration
	// BreakerFailures is Config.BreakerFailures, the consecutive failures
	// that open the breaker. Default DefaultStoreBreakerFailures.
	BreakerFailures int
	// BreakerOpen is Config.BreakerOpen, how long an open breaker skips
	// the store before it probes. Default DefaultStoreBreakerOpen.
	BreakerOpen time.Duration
	// LeaseTTL is Config.LeaseTTL: a key concurrency lease stops counting
	// for the fleet this long after it was last written (taken or
	// renewed), and each replica renews its leases every LeaseTTL/3.
	// Default DefaultStoreLeaseTTL; at least 4 x Timeout, as shedredis
	// requires.
	LeaseTTL time.Duration
	// Restarts: each of Service.StoreOutages ends with the store
	// restarted (a crash, a deploy, a failover to a replica that never
	// ran the scripts), which comes back with an empty script cache. The
	// first call of each script that reaches it then fails with
	// NOSCRIPT, and go-redis's Script.Run sends the script again (EVAL)
	// within the same time budget: one more round trip, and the call
	// does nothing in the store when the budget ends before the EVAL is
	// sent. Scripts run by EVAL stay in the cache for every replica's
	// later calls; renewals load their script first and never see
	// NOSCRIPT. The data (buckets, leases) is kept, as with persistence.
	// False: the outages leave the store as it was (a network
	// partition), as before the field existed.
	Restarts bool
}

// Defaults of StoreModel: shedredis's (DefaultTimeout,
// DefaultBreakerFailures, DefaultBreakerOpen), repeated because sim does
// not import shedredis (see keyConcurrencyRetryAfter).
const (
	DefaultStoreTimeout         = 5 * time.Millisecond
	DefaultStoreBreakerFailures = 5
	DefaultStoreBreakerOpen     = time.Second
	DefaultStoreLeaseTTL        = 10 * time.Second
)

// clone returns a copy of m (nil for nil).
func (m *StoreModel) clone() *StoreModel {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// normalize checks m and fills in its defaults.
func (m *StoreModel) normalize() error {
	if err := m.Latency.validate("service.store.latency"); err != nil {
		return err
	}
	if err := orDefault("service.store.timeout", &m.Timeout, DefaultStoreTimeout, 0); err != nil {
		return err
	}
	if err := orDefault("service.store.breaker_failures", &m.BreakerFailures, DefaultStoreBreakerFailures, math.MaxInt32); err != nil {
		return err
	}
	if err := orDefault("service.store.breaker_open", &m.BreakerOpen, DefaultStoreBreakerOpen, 0); err != nil {
		return err
	}
	if err := orDefault("service.store.lease_ttl", &m.LeaseTTL, DefaultStoreLeaseTTL, 0); err != nil {
		return err
	}
	if m.LeaseTTL < 4*m.Timeout || m.LeaseTTL < time.Millisecond {
		return fieldErr("service.store.lease_ttl", "must be at least 4 x timeout (%v) and 1ms, as shedredis requires, got %v", 4*m.Timeout, m.LeaseTTL)
	}
	return nil
}

// orDefault checks a setting *v of field, >= 0 and at most most unless
// that is 0, and gives it def when zero, as shedredis's Config does.
func orDefault[T int | time.Duration](field string, v *T, def, most T) error {
	switch {
	case *v < 0:
		return fieldErr(field, "must be >= 0, got %v", *v)
	case most > 0 && *v > most:
		return fieldErr(field, "must be at most %v, got %v", most, *v)
	case *v == 0:
		*v = def
	}
	return nil
}

// Upstream is what each replica depends on: Capacity servers, with
// service times (the work of a job) drawn from ServiceTime. Under the
// default discipline, FIFO, past capacity work waits in arrival order,
// and with Degradation it also gets slower: a job that starts while q
// jobs wait takes 1 + Degradation x q / Capacity times longer (at most
// MaxDegradation times), as thrashing servers do. Under PS (processor
// sharing) nothing waits: every job present is served at once, and past
// capacity they all slow down together (see Discipline). Work whose
// caller gave up is finished anyway, and wasted, unless Abandon.
type Upstream struct {
	// Capacity is the number of jobs served at once at full speed, the
	// concurrency at which latency starts to grow. Required.
	Capacity int
	// Discipline is how the servers share the jobs present: FIFO (the
	// default) or PS.
	Discipline Discipline
	// MaxInFlight, when > 0, bounds the jobs present: a job that arrives
	// when MaxInFlight are present fails at once, without service, as a
	// server whose worker pool and accept queue are full answers 503.
	// Default 0: no bound.
	MaxInFlight int
	// ServiceTime is the time a job takes at nominal speed, in
	// nanoseconds. Required.
	ServiceTime Dist
	// Degradation and MaxDegradation model congestion collapse (see
	// Upstream). Default 0 (none) and 10.
	Degradation    float64
	MaxDegradation float64
	// CostScaling makes service time grow with a request's actual cost:
	// it is multiplied by (cost / CostRef)^CostScaling. Default 0 (no
	// effect); 1 models LLM work proportional to tokens.
	CostScaling float64
	// CostRef is the cost that takes ServiceTime. Default 1.
	CostRef float64
	// Shared makes all replicas share one upstream of Capacity (a shared
	// database) instead of each replica having its own.
	Shared bool
	// Abandon: the upstream stops a job whose caller stopped waiting (a
	// replica's call that timed out, by Service.Timeout or
	// Service.CancelAtDeadline), as a server that honours its request's
	// cancellation does (a context-aware Go server, a database query
	// with a context): a job still waiting is dropped without service,
	// one in service frees its server at once (under PS, leaves the
	// shared server). Its partial work counts as wasted; it is not a
	// completed job. Default false: work whose caller left is finished
	// anyway. Without one of those two timeouts a replica never stops
	// waiting, and Abandon changes nothing.
	Abandon bool
	// Events are slowdowns, error bursts and capacity changes.
	Events []UpstreamEvent
}

// UpstreamEvent changes the upstream during [At, At+For).
type UpstreamEvent struct {
	At, For time.Duration
	// Slowdown multiplies the service time of jobs that start during the
	// event. Default 1.
	Slowdown float64
	// Errors is the probability that a job started during the event
	// fails (after its service time).
	Errors float64
	// Capacity multiplies the number of servers. Default 1.
	Capacity float64
	// Replicas limits the event to the first Replicas upstreams (when
	// not Shared). Default: all.
	Replicas int
}

// Expect is a range a summary figure must fall in: Min <= value <= Max.
// Metric is a name accepted by [Summary.Metric].
type Expect struct {
	Policy   string
	Metric   string
	Min, Max float64
}

// ErrInvalidScenario is matched (errors.Is) by every scenario error.
var ErrInvalidScenario = errors.New("sim: invalid scenario")

// FieldError reports an invalid scenario field: its path (for example
// "classes[1].retry.backoff") and, for files, its position.
type FieldError struct {
	File         string
	Line, Column int
	Path         string
	Msg          string
}

// Error formats the error as file:line:column: path: message.
func (e *FieldError) Error() string {
	s := ""
	if e.File != "" {
		s = e.File + ":"
	}
	if e.Line > 0 {
		s += strconv.Itoa(e.Line) + ":"
		if e.Column > 0 {
			s += strconv.Itoa(e.Column) + ":"
		}
		s += " "
	} else if s != "" {
		s += " "
	}
	if e.Path != "" {
		s += e.Path + ": "
	}
	return s + e.Msg
}

// Is makes errors.Is(err, ErrInvalidScenario) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidScenario }

func fieldErr(path, format string, args ...any) error {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Defaults.
const (
	DefaultInterval       = time.Second
	DefaultWarmup         = 10 * time.Second
	DefaultSustain        = 5 * time.Second
	DefaultTimeout        = time.Second
	DefaultBackoff        = 10 * time.Millisecond
	DefaultMaxBackoff     = time.Second
	DefaultMaxDegradation = 10.0
	// MaxEvents bounds the simulated requests of one run (arrivals over
	// the run at the highest rate), so a typo cannot hang a run.
	MaxEvents = 2_000_000_000
)

// Validate checks s and returns nil or a *FieldError naming the first
// invalid field.
func (s *Scenario) Validate() error {
	_, err := s.normalize()
	return err
}

// normalize returns a copy of s with defaults filled in.
func (s *Scenario) normalize() (*Scenario, error) {
	c := *s
	if c.Name == "" {
		return nil, fieldErr("name", "must not be empty")
	}
	// Each step checks and fills in c, the copy; later steps rely on the
	// defaults of earlier ones (the trigger on the timing and the events).
	for _, step := range []func() error{
		c.normalizeTimes, c.normalizeClasses, c.normalizeServers,
		c.normalizeTrigger, c.checkExpect, c.checkWork,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// normalizeTimes checks the run's length and its divisions, whose
// defaults depend on the duration.
func (s *Scenario) normalizeTimes() error {
	if s.Duration <= 0 {
		return fieldErr("duration", "must be > 0, got %v", s.Duration)
	}
	if s.Interval < 0 {
		return fieldErr("interval", "must be >= 0, got %v", s.Interval)
	}
	if s.Interval == 0 {
		s.Interval = DefaultInterval
	}
	if s.Interval > s.Duration || s.Duration%s.Interval != 0 {
		return fieldErr("interval", "must divide the duration (%v), got %v", s.Duration, s.Interval)
	}
	if s.Warmup < 0 {
		return fieldErr("warmup", "must be >= 0, got %v", s.Warmup)
	}
	if s.Warmup == 0 {
		s.Warmup = min(DefaultWarmup, s.Duration/2)
	}
	if s.Warmup >= s.Duration {
		return fieldErr("warmup", "must be shorter than the duration (%v), got %v", s.Duration, s.Warmup)
	}
	if s.Sustain < 0 {
		return fieldErr("sustain", "must be >= 0, got %v", s.Sustain)
	}
	if s.Sustain == 0 {
		s.Sustain = DefaultSustain
	}
	return nil
}

// normalizeClasses checks the classes on a copy of the slice, so that
// filling in their defaults leaves the caller's scenario as it was.
func (s *Scenario) normalizeClasses() error {
	if len(s.Classes) == 0 {
		return fieldErr("classes", "at least one class is required")
	}
	if len(s.Classes) > 16 {
		return fieldErr("classes", "at most 16 classes, got %d", len(s.Classes))
	}
	s.Classes = append([]Class(nil), s.Classes...)
	names := map[string]bool{}
	share := 0.0
	for i := range s.Classes {
		p := fmt.Sprintf("classes[%d]", i)
		if err := s.Classes[i].normalize(p, names); err != nil {
			return err
		}
		if err := s.Classes[i].checkSurge(p, s.Duration); err != nil {
			return err
		}
		share += s.Classes[i].Protected
	}
	if share > 1+1e-9 {
		return fieldErr("classes", "protected shares sum to %.3f, more than 1", share)
	}
	return nil
}

// normalizeServers checks the gateway, the service and the upstream, in
// the order requests go through them. The gateway is copied, like the
// classes, before its defaults are filled in.
func (s *Scenario) normalizeServers() error {
	if s.Gateway != nil {
		g := *s.Gateway
		if g.Timeout < 0 {
			return fieldErr("gateway.timeout", "must be >= 0, got %v", g.Timeout)
		}
		if err := g.Retry.normalize("gateway.retry"); err != nil {
			return err
		}
		s.Gateway = &g
	}
	if err := s.Service.normalize(s); err != nil {
		return err
	}
	return s.Upstream.normalize(s)
}

// normalizeTrigger checks the given trigger, or derives one from the
// upstream events, as recovery is measured from it. It needs the timing
// and the events checked first.
func (s *Scenario) normalizeTrigger() error {
	firstTrigger := addDur(s.Warmup, s.Interval)
	validTrigger := func(t Span) bool {
		return t.At >= firstTrigger && t.For > 0 && t.End() <= s.Duration
	}
	if s.Trigger == nil && len(s.Upstream.Events) > 0 {
		// Derived from the events, when they make a usable trigger (an
		// event from the start is a condition, not a trigger).
		t := Span{At: s.Upstream.Events[0].At}
		end := time.Duration(0)
		for _, e := range s.Upstream.Events {
			t.At = min(t.At, e.At)
			end = max(end, Span{e.At, e.For}.End())
		}
		t.For = end - t.At
		if validTrigger(t) {
			s.Trigger = &t
		}
	} else if s.Trigger != nil {
		t := *s.Trigger
		if !validTrigger(t) {
			return fieldErr("trigger", "must start after warmup + one interval (%v), last > 0 and end by the duration (%v); got at %v for %v", firstTrigger, s.Duration, t.At, t.For)
		}
		s.Trigger = &t
	}
	return nil
}

// checkExpect checks the policies and the expectations, so that a typo in
// a regression test fails at load rather than never matching.
func (s *Scenario) checkExpect() error {
	for i, p := range s.Policies {
		if _, err := ParsePolicy(p); err != nil {
			return fieldErr(fmt.Sprintf("policies[%d]", i), "%v", err)
		}
	}
	for i, e := range s.Expect {
		p := fmt.Sprintf("expect[%d]", i)
		if e.Policy == "" {
			return fieldErr(p+".policy", "must not be empty")
		}
		if !knownMetric(e.Metric, s) {
			return fieldErr(p+".metric", "unknown metric %q (known: %s)", e.Metric, metricHelp)
		}
		if math.IsNaN(e.Min) || math.IsNaN(e.Max) || e.Min > e.Max {
			return fieldErr(p, "needs min <= max, got [%v, %v]", e.Min, e.Max)
		}
	}
	return nil
}

// checkWork bounds the work of one run (see MaxEvents).
func (s *Scenario) checkWork() error {
	total := 0.0
	for i := range s.Classes {
		cl := &s.Classes[i]
		if cl.Users == 0 {
			f, _ := classRate(cl)
			total += f.integral(0, s.Duration.Seconds())
		}
	}
	if total > MaxEvents {
		return fieldErr("classes", "the run would simulate %.3g requests, more than %d", total, MaxEvents)
	}
	return nil
}

func (cl *Class) normalize(p string, names map[string]bool) error {
	if err := shed.CheckClassName(cl.Name); err != nil {
		// The limiter would refuse it at the start of every run.
		return fieldErr(p+".name", "%.40q: %v", cl.Name, err)
	}
	if names[cl.Name] {
		return fieldErr(p+".name", "duplicate class %q", cl.Name)
	}
	names[cl.Name] = true
	if math.IsNaN(cl.Rate) || math.IsInf(cl.Rate, 0) || cl.Rate < 0 {
		return fieldErr(p+".rate", "must be a finite rate >= 0, got %v", cl.Rate)
	}
	if cl.Users < 0 || cl.Users > 1_000_000 {
		return fieldErr(p+".users", "must be in [0, 1000000], got %d", cl.Users)
	}
	if cl.Users > 0 && (cl.Rate > 0 || len(cl.Schedule) > 0) {
		return fieldErr(p+".users", "a class is either open-loop (rate, schedule) or closed-loop (users), not both")
	}
	if cl.Users == 0 {
		if _, err := buildRate(cl.Rate, cl.Schedule, p+".schedule"); err != nil {
			return err
		}
	}
	if cl.Think.IsZero() {
		cl.Think = Exp(float64(time.Second))
	}
	if err := cl.Think.validate(p + ".think"); err != nil {
		return err
	}
	if cl.Cost.IsZero() {
		cl.Cost = Const(1)
	}
	if err := cl.Cost.validate(p + ".cost"); err != nil {
		return err
	}
	if !cl.Actual.IsZero() {
		if err := cl.Actual.validate(p + ".actual"); err != nil {
			return err
		}
	}
	if cl.Timeout < 0 {
		return fieldErr(p+".timeout", "must be >= 0, got %v", cl.Timeout)
	}
	if cl.Timeout == 0 {
		cl.Timeout = DefaultTimeout
	}
	if cl.AttemptTimeout < 0 || cl.AttemptTimeout > cl.Timeout {
		return fieldErr(p+".attempt_timeout", "must be in [0, timeout (%v)], got %v", cl.Timeout, cl.AttemptTimeout)
	}
	if cl.AttemptTimeout == 0 {
		cl.AttemptTimeout = cl.Timeout
	}
	if err := cl.Retry.normalize(p + ".retry"); err != nil {
		return err
	}
	return cl.normalizeAdmission(p)
}

// normalizeAdmission checks the class's settings in each replica: its
// rate limit and its class in the limiter.
func (cl *Class) normalizeAdmission(p string) error {
	if math.IsNaN(cl.Protected) || cl.Protected < 0 || cl.Protected > 1 {
		return fieldErr(p+".protected", "must be in [0, 1], got %v", cl.Protected)
	}
	if cl.Queue < 0 {
		return fieldErr(p+".queue", "must be >= 0, got %d", cl.Queue)
	}
	if cl.MaxWait < 0 {
		return fieldErr(p+".max_wait", "must be >= 0, got %v", cl.MaxWait)
	}
	if cl.Queue > 0 && cl.MaxWait == 0 {
		return fieldErr(p+".queue", "a queue needs max_wait (the longest a request waits)")
	}
	if cl.Queue == 0 && cl.MaxWait > 0 {
		return fieldErr(p+".max_wait", "max_wait needs a queue (queue > 0)")
	}
	if cl.RateLimit != nil {
		// A copy: filling in the burst leaves the caller's scenario as it was.
		l := *cl.RateLimit
		if err := l.normalize(p + ".rate_limit"); err != nil {
			return err
		}
		cl.RateLimit = &l
	}
	if cl.Keys != nil {
		if err := cl.Keys.validate(p + ".keys"); err != nil {
			return err
		}
		cl.Keys = cl.Keys.clone()
	}
	if cl.KeyConcurrency != nil {
		if err := cl.KeyConcurrency.validate(p + ".key_concurrency"); err != nil {
			return err
		}
		cl.KeyConcurrency = cl.KeyConcurrency.clone()
	}
	return nil
}

func (r *Retry) normalize(p string) error {
	if r.MaxAttempts < 0 || r.MaxAttempts > 100 {
		return fieldErr(p+".max_attempts", "must be in [1, 100], got %d", r.MaxAttempts)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 1
	}
	if r.Backoff < 0 {
		return fieldErr(p+".backoff", "must be >= 0, got %v", r.Backoff)
	}
	if r.Backoff == 0 {
		r.Backoff = DefaultBackoff
	}
	if r.MaxBackoff < 0 {
		return fieldErr(p+".max_backoff", "must be >= 0, got %v", r.MaxBackoff)
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = max(DefaultMaxBackoff, r.Backoff)
	}
	if r.MaxBackoff < r.Backoff {
		return fieldErr(p+".max_backoff", "must be >= backoff (%v), got %v", r.Backoff, r.MaxBackoff)
	}
	if b := r.Budget; b != nil {
		if math.IsNaN(b.Ratio) || math.IsInf(b.Ratio, 0) || b.Ratio > 1000 {
			return fieldErr(p+".budget.ratio", "must be at most 1000 (0: default 0.2, negative: none), got %v", b.Ratio)
		}
		if math.IsNaN(b.MinPerSecond) || math.IsInf(b.MinPerSecond, 0) || b.MinPerSecond > 1e6 {
			return fieldErr(p+".budget.min_per_second", "must be at most 1e6 (0: default 10, negative: none), got %v", b.MinPerSecond)
		}
		if b.TTL < 0 {
			return fieldErr(p+".budget.ttl", "must be >= 0, got %v", b.TTL)
		}
	}
	if t := r.Throttle; t != nil {
		if math.IsNaN(t.K) || (t.K != 0 && t.K < 1) || math.IsInf(t.K, 0) {
			return fieldErr(p+".throttle.k", "must be >= 1, got %v", t.K)
		}
		if t.Window < 0 {
			return fieldErr(p+".throttle.window", "must be >= 0, got %v", t.Window)
		}
	}
	return nil
}

func (s *Service) normalize(sc *Scenario) error {
	if s.Replicas < 0 || s.Replicas > 10000 {
		return fieldErr("service.replicas", "must be in [1, 10000], got %d", s.Replicas)
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	if s.Balancer > PowerOfTwo {
		return fieldErr("service.balancer", "unknown balancer %d", s.Balancer)
	}
	if s.MaxCost < 0 {
		return fieldErr("service.max_cost", "must be >= 0, got %d", s.MaxCost)
	}
	if s.StaticLimit < 0 {
		return fieldErr("service.static_limit", "must be >= 0, got %d", s.StaticLimit)
	}
	if s.MaxQueue < 0 {
		return fieldErr("service.max_queue", "must be >= 0, got %d", s.MaxQueue)
	}
	if s.DemandHold < 0 {
		return fieldErr("service.demand_hold", "must be >= 0, got %v", s.DemandHold)
	}
	if s.Timeout < 0 {
		return fieldErr("service.timeout", "must be >= 0, got %v", s.Timeout)
	}
	if m := s.DeadlineMargin; !(m >= 0 && m <= shed.MaxDeadlineMargin) {
		return fieldErr("service.deadline_margin", "must be in [0, %v], got %v", float64(shed.MaxDeadlineMargin), m)
	}
	if err := s.checkKeyBuckets(sc); err != nil {
		return err
	}
	if err := s.checkLeaseCounts(sc); err != nil {
		return err
	}
	if err := s.normalizeOutages(sc); err != nil {
		return err
	}
	if err := s.normalizeStore(sc); err != nil {
		return err
	}
	return s.Retry.normalize("service.retry")
}

// MaxKeyBuckets bounds the buckets that the rate limits of a scenario
// may need: a key's in each replica, and the fleet's. Each costs a
// pointer whether its key comes or not, and about a hundred bytes once it
// does: at most about 100 MB per run, so that a scenario file cannot ask
// for gigabytes (runs of several policies run side by side).
const MaxKeyBuckets = 1_000_000

// checkKeyBuckets bounds the rate limits' buckets (see MaxKeyBuckets).
func (s *Service) checkKeyBuckets(sc *Scenario) error {
	total, shared := 0, -1
	for i, c := range sc.Classes {
		if c.RateLimit == nil {
			continue
		}
		if shared >= 0 && c.RateLimit.Shared != sc.Classes[shared].RateLimit.Shared {
			return fieldErr(fmt.Sprintf("classes[%d].rate_limit.shared", i), "must be the same for every class (%v in classes[%d]): one KeyStore keeps every class's limits in the middleware", sc.Classes[shared].RateLimit.Shared, shared)
		}
		shared = i
		if c.Keys == nil {
			continue
		}
		if total += c.Keys.Count * (s.Replicas + 1); total > MaxKeyBuckets {
			return fieldErr(fmt.Sprintf("classes[%d].keys.count", i), "rate limits need %d buckets (keys x (replicas + 1), summed over classes), more than %d", total, MaxKeyBuckets)
		}
	}
	return nil
}

// MaxLeaseCounts bounds the counts that the key concurrency limits of a
// scenario may need: a key's in each replica, and the fleet's. Each is
// an int32 whether its key comes or not: at most 40 MB per run.
const MaxLeaseCounts = 10_000_000

// checkLeaseCounts bounds the key concurrency limits' counts (see
// MaxLeaseCounts).
func (s *Service) checkLeaseCounts(sc *Scenario) error {
	total := 0
	for i, c := range sc.Classes {
		if c.KeyConcurrency == nil {
			continue
		}
		if total += c.keyCount() * (s.Replicas + 1); total > MaxLeaseCounts {
			return fieldErr(fmt.Sprintf("classes[%d].key_concurrency", i), "needs %d counts (keys x (replicas + 1), summed over classes), more than %d", total, MaxLeaseCounts)
		}
	}
	return nil
}

// usesStore reports whether class c keeps a limit in the fleet's store
// (Redis): a shared rate limit, or a shared key concurrency.
func usesStore(c Class) bool {
	return (c.RateLimit != nil && c.RateLimit.Shared) || (c.KeyConcurrency != nil && c.KeyConcurrency.Shared)
}

// normalizeOutages checks the store outages: in order, not overlapping,
// within the run, and of a store that some class's limit uses.
func (s *Service) normalizeOutages(sc *Scenario) error {
	if len(s.StoreOutages) == 0 {
		return nil
	}
	if !slices.ContainsFunc(sc.Classes, usesStore) {
		return fieldErr("service.store_outages", "no class has a shared rate limit (rate_limit.shared) or a shared key concurrency (key_concurrency.shared) for the store to fail")
	}
	s.StoreOutages = slices.Clone(s.StoreOutages)
	end := time.Duration(0)
	for i, o := range s.StoreOutages {
		if o.At < end || o.For <= 0 || o.End() > sc.Duration {
			return fieldErr(fmt.Sprintf("service.store_outages[%d]", i), "must start at or after %v (the end of the one before), last > 0 and end by the duration (%v); got at %v for %v", end, sc.Duration, o.At, o.For)
		}
		end = o.End()
	}
	return nil
}

// normalizeStore checks the store's model, of a store that some class's
// limit uses, on a copy: the caller's scenario keeps its zero fields.
func (s *Service) normalizeStore(sc *Scenario) error {
	if s.Store == nil {
		return nil
	}
	if !slices.ContainsFunc(sc.Classes, usesStore) {
		return fieldErr("service.store", "no class has a shared rate limit (rate_limit.shared) or a shared key concurrency (key_concurrency.shared) that calls the store")
	}
	s.Store = s.Store.clone()
	if s.Store.Restarts && len(s.StoreOutages) == 0 {
		return fieldErr("service.store.restarts", "set without service.store_outages: there is no outage for the store to restart after")
	}
	return s.Store.normalize()
}

func (u *Upstream) normalize(sc *Scenario) error {
	if u.Capacity <= 0 || u.Capacity > 1_000_000 {
		return fieldErr("upstream.capacity", "must be in [1, 1000000], got %d", u.Capacity)
	}
	if int(u.Discipline) >= len(disciplineNames) {
		return fieldErr("upstream.discipline", "must be fifo or ps, got %d", u.Discipline)
	}
	if u.MaxInFlight < 0 {
		return fieldErr("upstream.max_in_flight", "must be >= 0, got %d", u.MaxInFlight)
	}
	if u.ServiceTime.IsZero() {
		return fieldErr("upstream.service_time", "is required")
	}
	if err := u.ServiceTime.validate("upstream.service_time"); err != nil {
		return err
	}
	if math.IsNaN(u.Degradation) || u.Degradation < 0 || math.IsInf(u.Degradation, 0) {
		return fieldErr("upstream.degradation", "must be >= 0, got %v", u.Degradation)
	}
	if math.IsNaN(u.MaxDegradation) || (u.MaxDegradation != 0 && u.MaxDegradation < 1) || math.IsInf(u.MaxDegradation, 0) {
		return fieldErr("upstream.max_degradation", "must be >= 1, got %v", u.MaxDegradation)
	}
	if u.MaxDegradation == 0 {
		u.MaxDegradation = DefaultMaxDegradation
	}
	if math.IsNaN(u.CostScaling) || u.CostScaling < 0 || u.CostScaling > 4 {
		return fieldErr("upstream.cost_scaling", "must be in [0, 4], got %v", u.CostScaling)
	}
	if math.IsNaN(u.CostRef) || u.CostRef < 0 || math.IsInf(u.CostRef, 0) {
		return fieldErr("upstream.cost_ref", "must be > 0, got %v", u.CostRef)
	}
	if u.CostRef == 0 {
		u.CostRef = 1
	}
	u.Events = append([]UpstreamEvent(nil), u.Events...)
	for i := range u.Events {
		e := &u.Events[i]
		p := fmt.Sprintf("upstream.events[%d]", i)
		// Compared as for > duration-at: at+for could overflow.
		if e.At < 0 || e.For <= 0 || e.At > sc.Duration || e.For > sc.Duration-e.At {
			return fieldErr(p, "needs at >= 0, for > 0 and at+for <= duration (%v), got at %v for %v", sc.Duration, e.At, e.For)
		}
		if math.IsNaN(e.Slowdown) || e.Slowdown < 0 || e.Slowdown > 1e6 {
			return fieldErr(p+".slowdown", "must be > 0, got %v", e.Slowdown)
		}
		if e.Slowdown == 0 {
			e.Slowdown = 1
		}
		if math.IsNaN(e.Errors) || e.Errors < 0 || e.Errors > 1 {
			return fieldErr(p+".errors", "must be in [0, 1], got %v", e.Errors)
		}
		if math.IsNaN(e.Capacity) || e.Capacity < 0 || e.Capacity > 1000 {
			return fieldErr(p+".capacity", "must be a factor in (0, 1000], got %v", e.Capacity)
		}
		if e.Capacity == 0 {
			e.Capacity = 1
		}
		if e.Replicas < 0 {
			return fieldErr(p+".replicas", "must be >= 0, got %d", e.Replicas)
		}
		if e.Replicas > 0 && u.Shared {
			return fieldErr(p+".replicas", "a shared upstream has no per-replica events")
		}
	}
	return nil
}
