package shed

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Class identifies a priority class by its index in Config.Classes. Class 0
// has the highest priority.
type Class uint8

// Request describes a unit of work that asks for admission.
type Request struct {
	// Class is the request's priority class (default 0).
	Class Class
	// Cost is what the request reserves against the cost budget, for
	// example its estimated tokens. Zero means 1; negative is an error.
	// Every request also counts as one against the concurrency limit.
	Cost int64
	// Deadline is when the caller stops waiting for the result. A request
	// whose deadline has passed, or whose remaining time is at most its
	// expected queue wait plus Config.DeadlineMargin times its class's
	// expected service time, is rejected at once (ReasonDeadline) instead
	// of admitted or queued. Zero means none. With the wall-clock API, a
	// request with a deadline costs one reading of the clock.
	Deadline time.Time
	// Tenant names who the work is for (a customer, an API key). Empty, the
	// default, means no tenant. While the class is contended, a request
	// whose tenant already holds its share of the class is rejected with
	// ReasonTenantShare, so that one tenant cannot take every slot the
	// class may use; an uncontended class lets one tenant use all of it.
	// See Config.TenantWeight and ClassSnapshot.Tenants.
	Tenant string
}

// ErrInvalidRequest is wrapped by errors about malformed requests (unknown
// class, negative cost). They are caller bugs, not rejections.
var ErrInvalidRequest = errors.New("shed: invalid request")

// Layout of the packed in-flight state word: the in-flight count in the low
// bits, a flag that sends every operation through the locked slow path, and
// the in-flight cost in the high bits.
const (
	countBits = 24
	countMask = 1<<countBits - 1
	slowFlag  = 1 << countBits
	costShift = countBits + 1
	costBits  = 64 - costShift
)

func inFlightOf(s uint64) int64 { return int64(s & countMask) }
func costOf(s uint64) int64     { return int64(s >> costShift) }

// delta is the state word's change for one admission of cost.
func delta(cost int64) uint64 {
	return 1 + uint64(cost)<<costShift
}

// Limiter admits, queues or rejects units of work so that the work in
// flight stays within a concurrency limit (and optionally a cost budget),
// with priority classes, protected capacity and bounded queues.
//
// Admission and release take no lock while nothing waits and no class is
// short of its protected capacity: they are one compare-and-swap on a
// packed state word. Queueing, protected-capacity decisions and draining
// go through a mutex. The Limiter starts no goroutines and never sleeps;
// Acquire and Drain are blocking wrappers over the explicit-time core.
//
// Make a Limiter with New. The zero Limiter has no class and admits
// nothing: every request is invalid (ErrInvalidRequest).
type Limiter struct {
	// state and class 0's counters fill the first cache line (a Limiter
	// is larger than 512 bytes, so the allocator aligns it to 64).
	state atomic.Uint64
	hot0  hotCounters

	source     LimitSource
	prober     Prober // source, if it may close
	static     uint64
	maxCost    int64
	costBudget bool
	multi      bool
	// classCost: several classes and a cost budget, so protected shares
	// apply to cost too and each class's cost is tracked.
	classCost  bool
	strict     bool
	dryRun     bool
	demandHold time.Duration
	maxQueue   int
	observer   Observer
	clock      func() time.Time
	epoch      time.Time
	onLeak     func(Leak)
	trackLeaks bool
	maxSamples float64
	// quiet: no observer, so an untimed success needs no event.
	quiet bool
	// margin is Config.DeadlineMargin, 0 when the service time does not
	// count; perCost is Config.ServiceTimePerCost.
	margin  float64
	perCost bool
	// sawDeadline is set by the first request that carries a deadline:
	// only then do releases pay for the service-time estimate.
	sawDeadline atomic.Bool
	// drainStarted mirrors draining for the lock-free deadline check: a
	// draining limiter rejects everything with ReasonDraining.
	drainStarted atomic.Bool

	cfg         []ClassConfig
	names       []string
	counts      []classCounters
	marksDemand [MaxClasses]bool

	// sampleMask selects the admissions the wall-clock API times: those
	// whose per-class sequence number n has n&sampleMask == 0.
	sampleMask    atomic.Uint64
	lastRateCheck atomic.Int64 // ns since epoch
	lastRateCount atomic.Uint64
	rej           rejections
	// latency is an EWMA of timed successful work, in nanoseconds (float64
	// bits). It sizes Retry-After hints and expected queue waits.
	latency atomic.Uint64

	// guards tell copies of a Permit apart (see guard.go); nil when every
	// permit is tracked.
	guards     []atomic.Uint64
	guardMask  uint64
	guardLines uint8 // log2 of the cache lines in guards

	mu          sync.Mutex
	queued      int
	queues      [MaxClasses]waitQueue
	demandUntil [MaxClasses]time.Time
	demandAny   bool
	// lastAttempt is when an admission last took the lock (see
	// expireQuietDemandLocked).
	lastAttempt time.Time
	draining    bool
	drained     chan struct{}

	// tenants tracks the tenants with work in flight or queued (tenant.go).
	// Last, so that the fields the hot path reads keep their cache lines.
	tenants *tenantTable
}

// New returns a Limiter for cfg, or an error naming the invalid field.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		source:     cfg.Source,
		static:     uint64(cfg.Limit),
		maxCost:    cfg.MaxCost,
		costBudget: cfg.MaxCost > 0,
		multi:      len(cfg.Classes) > 1,
		strict:     cfg.Strict,
		dryRun:     cfg.DryRun,
		demandHold: cfg.DemandHold,
		maxQueue:   cfg.MaxQueue,
		observer:   cfg.Observer,
		clock:      cfg.Clock,
		onLeak:     cfg.OnLeak,
		trackLeaks: cfg.TrackLeaks,
		maxSamples: cfg.MaxSamplesPerSecond,
		cfg:        cfg.Classes,
		prober:     asProber(cfg.Source),
		counts:     make([]classCounters, len(cfg.Classes)),
	}
	l.epoch = l.clock()
	l.tenants = newTenantTable(cfg.TenantWeight)
	l.quiet = cfg.Observer == nil
	l.margin = max(cfg.DeadlineMargin, 0)
	l.perCost = cfg.ServiceTimePerCost
	l.classCost = l.multi && l.costBudget
	if !l.costBudget {
		l.maxCost = MaxTotalCost
	}
	for i, c := range cfg.Classes {
		l.names = append(l.names, c.Name)
		// A class reserves capacity when it has a protected share; under
		// strict priority every class but the lowest outranks another.
		l.marksDemand[i] = c.Protected > 0 || (cfg.Strict && i < len(cfg.Classes)-1)
	}
	l.rej.init(cfg.RetryAfterMin, cfg.RetryAfterMax, l.names)
	l.initGuards(guardSlots(cfg))
	return l, nil
}

// limit returns the current limit, clamped to [1, MaxLimit], or 0 when
// a Prober's limit is closed (see probed); only 0 means closed.
func (l *Limiter) limit() uint64 {
	if l.source == nil {
		return l.static
	}
	n := l.source.Limit()
	if n < 1 {
		if n == 0 && l.prober != nil {
			return 0
		}
		return 1
	}
	if n > MaxLimit {
		return MaxLimit
	}
	return uint64(n)
}

// Limit returns the concurrency limit in force now: 0 while a
// [Prober]'s limit is closed.
func (l *Limiter) Limit() int { return int(l.limit()) }

// asProber returns src as a Prober, if it is one.
func asProber(src LimitSource) Prober {
	p, _ := src.(Prober)
	return p
}

// probed returns the limit for a request of cost arriving at now while
// the source's limit is closed: one more than the work in flight if the
// source lets it through as its probe, else 0. A request over the cost
// budget does not ask: it would spend the probe and be rejected anyway.
func (l *Limiter) probed(now time.Time, cost int64) uint64 {
	if costOf(l.state.Load())+cost <= l.maxCost && l.prober.Probe(now) {
		return uint64(inFlightOf(l.state.Load())) + 1
	}
	return 0
}

// InFlight returns the number of admitted units of work not yet released.
func (l *Limiter) InFlight() int { return int(inFlightOf(l.state.Load())) }

// ClassByName returns the class with the given name.
func (l *Limiter) ClassByName(name string) (Class, bool) {
	for i, n := range l.names {
		if n == name {
			return Class(i), true
		}
	}
	return 0, false
}

// ClassName returns the name of class c, or "" if there is no such class.
func (l *Limiter) ClassName(c Class) string {
	if int(c) < len(l.names) {
		return l.names[c]
	}
	return ""
}

// check validates req and returns its effective cost.
func (l *Limiter) check(req Request) (int64, error) {
	if int(req.Class) >= len(l.cfg) {
		return 0, fmt.Errorf("%w: unknown class %d (the limiter has %d)", ErrInvalidRequest, req.Class, len(l.cfg))
	}
	switch {
	case req.Cost == 0:
		return 1, nil
	case req.Cost < 0:
		return 0, fmt.Errorf("%w: negative cost %d", ErrInvalidRequest, req.Cost)
	}
	return req.Cost, nil
}

// TryAcquire admits req at once or rejects it at once; it never waits.
// The error is a *Rejection (errors.Is(err, ErrRejected)) or, for a
// malformed request, wraps ErrInvalidRequest.
func (l *Limiter) TryAcquire(req Request) (Permit, error) {
	return l.acquire(time.Time{}, false, req, nil, false, unchecked)
}

// TryAcquireAt is TryAcquire at an explicit time now, for virtual time.
// The permit's latency is measured from now.
func (l *Limiter) TryAcquireAt(now time.Time, req Request) (Permit, error) {
	return l.acquire(now, true, req, nil, false, unchecked)
}

// EnqueueAt admits req at once if it can, rejects it at once if it can
// neither run nor wait, or else queues w and returns queued true. The
// outcome of a queued request is delivered later, exactly once, through
// w's notify function, from whichever call frees capacity (a release, a
// limit change seen at a release, ExpireAt), unless CancelAt removes w
// first. This is the explicit-time core of Acquire. A nil waiter, or one
// without a notify function (the zero Waiter, NewWaiter(nil)), is an
// error wrapping ErrInvalidRequest.
func (l *Limiter) EnqueueAt(now time.Time, req Request, w *Waiter) (p Permit, queued bool, err error) {
	if w == nil || w.notify == nil {
		// Queued, it would be granted capacity nobody is told about.
		return Permit{}, false, fmt.Errorf("%w: waiter without a notify function (use NewWaiter)", ErrInvalidRequest)
	}
	p, err = l.acquire(now, true, req, w, true, unchecked)
	if err == errQueued {
		return Permit{}, true, nil
	}
	return p, false, err
}

// Internal results of acquire.
var (
	// errQueued: w was queued; its outcome comes through its notify.
	errQueued = errors.New("shed: queued")
	// errNeedWaiter: the request would queue but mayQueue came without a
	// waiter; the caller supplies one and calls again, with the verdict
	// of the deadline check passed on (see needWaiter).
	errNeedWaiter = errors.New("shed: need a waiter")
	// errNeedWaiterProbe is errNeedWaiter for a request that claimed its
	// class's deadline probe.
	errNeedWaiterProbe = errors.New("shed: need a waiter (probe)")
)

// acquire is the admission path. It returns a permit or an error: a
// rejection, errQueued when w was queued (mayQueue), or errNeedWaiter (or
// errNeedWaiterProbe) when the request would queue and w is nil. v is the
// verdict of the deadline check: unchecked, or what an earlier pass for the
// same request decided (see needWaiter); the check is not run again, since
// it may claim the class's probe, and a second run would find the probe
// taken, by this very request.
func (l *Limiter) acquire(now time.Time, hasNow bool, req Request, w *Waiter, mayQueue bool, v verdict) (Permit, error) {
	cost := req.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 0 || int(req.Class) >= len(l.cfg) || cost > l.maxCost {
		return l.acquireOdd(now, req, cost)
	}
	if v == unchecked {
		v = inTime
		if !req.Deadline.IsZero() {
			var err error
			if now, hasNow, v, err = l.deadlineFirst(now, hasNow, req, cost); err != nil {
				return Permit{}, err
			}
		}
	}
	limit := l.limit()
	closed := limit == 0
	if closed {
		if !hasNow {
			now, hasNow = l.clock(), true
		}
		limit = l.probed(now, cost)
	}
	if req.Tenant != "" {
		var p Permit
		var err error
		if closed {
			// A probe's tenant is counted under the lock, not judged:
			// see probeFits.
			p, err = l.acquireShort(now, hasNow, req, cost, w, mayQueue, limit, v)
		} else {
			p, err = l.acquireTenant(now, hasNow, req, cost, w, mayQueue, limit, v)
		}
		if v == probing {
			l.probeOutcome(req.Class, err)
		}
		return p, err
	}
	s, ok := l.addFits(l.state.Load(), cost, limit)
	if !ok {
		p, err := l.acquireShort(now, hasNow, req, cost, w, mayQueue, limit, v)
		if v == probing {
			l.probeOutcome(req.Class, err)
		}
		return p, err
	}
	shadow := v.shadow()
	p := l.newPermit(now, hasNow, req.Class, cost, inFlightOf(s), 0, shadow, tenantHold{})
	if v == probing {
		l.startedProbe(&p)
	}
	if l.observer != nil || shadow != ReasonNone {
		l.admitted(now, hasNow, p, 0)
	}
	return p, nil
}

// addFits adds one admission of cost to the state word, starting from its
// value s, if it fits the limit and the cost budget and the slow flag is
// down; it returns the new value. The check comes before the change, in
// one compare-and-swap: added first and checked after, concurrent
// admissions that all passed a check on the same old value could carry the
// count into the slow flag, or the cost past the top of the word, where it
// wraps to a small value that passes the budget check. Checked first, the
// word never holds more than the limit (<= MaxLimit) and the budget (<=
// MaxTotalCost), so neither field can overflow. Admissions under the lock
// check, then add: the slow flag keeps other admissions out meanwhile, but
// not a Reconcile, which may raise the cost up to MaxTotalCost in between;
// the cost field holds twice MaxTotalCost for that. Uncontended, the CAS
// costs what an atomic add does.
func (l *Limiter) addFits(s uint64, cost int64, limit uint64) (uint64, bool) {
	for {
		if s&slowFlag != 0 || uint64(inFlightOf(s)) >= limit || costOf(s)+cost > l.maxCost {
			return s, false
		}
		next := s + delta(cost)
		if l.state.CompareAndSwap(s, next) {
			return next, true
		}
		s = l.state.Load()
	}
}

// deadlineFirst runs the deadline check of a request with a deadline
// before anything else (see deadline.go): a request that cannot finish in
// time is rejected without touching the state word. It returns the time
// and hasNow to go on with: unchanged, except for a probe, which is timed
// because its latency is the sample it is admitted for. With the
// wall-clock API it reads the clock once. In dry-run mode a request that
// is too late goes on, to be admitted with ReasonDeadline as its shadow.
func (l *Limiter) deadlineFirst(now time.Time, hasNow bool, req Request, cost int64) (time.Time, bool, verdict, error) {
	if !l.sawDeadline.Load() {
		l.sawDeadline.Store(true)
	}
	at := now
	if !hasNow {
		at = l.clock()
	}
	switch v := l.checkDeadline(at, req, cost, 0); v {
	case tooLate:
		switch {
		case l.drainStarted.Load():
			return now, hasNow, inTime, nil // the slow path rejects it as draining
		case l.dryRun:
			return now, hasNow, v, nil
		}
		return now, hasNow, v, l.reject(at, req.Class, cost, ReasonDeadline, 0, false)
	case probing:
		return at, true, v, nil
	}
	return now, hasNow, inTime, nil
}

// shadow is the reason a dry run admits a request with verdict v despite.
func (v verdict) shadow() Reason {
	if v == tooLate {
		return ReasonDeadline
	}
	return ReasonNone
}

// acquireOdd handles the requests the fast path does not: malformed ones
// and those costing more than the whole budget.
func (l *Limiter) acquireOdd(now time.Time, req Request, cost int64) (Permit, error) {
	if _, err := l.check(req); err != nil {
		return Permit{}, err
	}
	return Permit{}, l.reject(now, req.Class, cost, ReasonCostTooLarge, l.rej.max, false)
}

// acquireShort handles admission when the lock-free path cannot decide: the
// limit is reached, or waiters, protected demand or draining need the lock.
// A plain rejection at the limit is still decided without the lock.
// v is the verdict of the deadline check (deadlineFirst).
func (l *Limiter) acquireShort(now time.Time, hasNow bool, req Request, cost int64, w *Waiter, mayQueue bool, limit uint64, v verdict) (Permit, error) {
	if s := l.state.Load(); s&slowFlag == 0 && !l.dryRun && !l.marksDemand[req.Class] && (!mayQueue || l.cfg[req.Class].QueueDepth == 0) &&
		(uint64(inFlightOf(s)) >= limit || costOf(s)+cost > l.maxCost) {
		if req.Tenant != "" {
			l.markShort(now, hasNow, req, 0, cost, l.roomFast(s, req.Class, limit))
		}
		return Permit{}, l.reject(now, req.Class, cost, ReasonLimit, l.hint(0, limit), false)
	}
	return l.acquireSlow(now, hasNow, req, cost, w, mayQueue, limit, v)
}

// acquireSlow decides under the lock: admit, queue or reject. A request
// with a tenant is also held to its tenant's share (see tenant.go): a
// request over it is rejected with ReasonTenantShare rather than queued,
// since waiting would let a noisy tenant fill the class's bounded queue
// ahead of the others, and it could not be admitted at its turn anyway.
// The tenant's weight is resolved before the lock, as the limit is: no
// user code but the Observer's runs under it, after it is released.
func (l *Limiter) acquireSlow(now time.Time, hasNow bool, req Request, cost int64, w *Waiter, mayQueue bool, probe uint64, v verdict) (Permit, error) {
	if !hasNow {
		now, hasNow = l.clock(), true
	}
	c := req.Class
	limit := l.limit() // before the lock: see grantLocked
	closedProbe := limit == 0 && probe > 0
	if limit == 0 {
		limit = probe // closed: what the probe, if any, allowed
	}
	var wt uint64
	if req.Tenant != "" {
		wt = l.tenants.weightFor(c, req.Tenant)
	}
	l.mu.Lock()
	l.freezeLocked()
	l.expireDemandLocked(now)
	l.lastAttempt = now
	reason := ReasonDraining
	hint := l.rej.max
	if !l.draining {
		s := l.state.Load()
		fair := true
		if l.fitsLocked(s, c, cost, limit) || closedProbe && l.probeFits(s, cost, limit) {
			var h tenantHold
			if req.Tenant != "" {
				h, fair = l.tenantDo(c, req.Tenant, wt, cost, l.roomLocked(now, s, c, limit), tenantAdmit, closedProbe)
			}
			if fair {
				l.state.Add(delta(cost))
				p := l.newPermit(now, hasNow, c, cost, inFlightOf(s)+1, 0, v.shadow(), h)
				if v == probing {
					l.startedProbe(&p)
				}
				l.thawLocked()
				l.mu.Unlock()
				l.admitted(now, hasNow, p, 0)
				return p, nil
			}
		}
		reason = ReasonTenantShare
		hint = l.hint(l.queued, limit)
		if fair {
			var p Permit
			var err error
			if reason, p, err = l.queueLocked(now, req, wt, cost, w, mayQueue, limit, v); reason == ReasonNone {
				return p, err // the lock is released
			}
			if reason != ReasonTenantShare {
				l.markDemandLocked(now, c)
				if req.Tenant != "" {
					l.markShort(now, true, req, wt, cost, l.roomLocked(now, s, c, limit))
				}
			}
		}
	}
	if s := l.state.Load(); l.dryRun && reason != ReasonDraining && inFlightOf(s) < MaxLimit && costOf(s)+cost <= MaxTotalCost {
		if v == tooLate {
			reason = ReasonDeadline // the first reason it would have been rejected for
		}
		// Report the decision, then admit anyway.
		var h tenantHold
		if req.Tenant != "" {
			h, _ = l.tenantDo(c, req.Tenant, wt, cost, classRoom{}, tenantAdmit, true)
		}
		s = l.state.Add(delta(cost))
		p := l.newPermit(now, hasNow, c, cost, inFlightOf(s), 0, reason, h)
		if v == probing {
			l.startedProbe(&p)
		}
		l.thawLocked()
		l.mu.Unlock()
		l.admitted(now, hasNow, p, hint)
		return p, nil
	}
	l.thawLocked()
	l.mu.Unlock()
	return Permit{}, l.reject(now, c, cost, reason, hint, false)
}

// queueLocked queues a request that does not fit, if its class queues and
// it may wait. It returns ReasonNone when it is done (w queued, or a caller
// error), having released the lock, with acquireSlow's results; otherwise
// the reason to reject it for, with the lock still held. wt is the weight
// of req's tenant, resolved before the lock (see weightFor).
func (l *Limiter) queueLocked(now time.Time, req Request, wt uint64, cost int64, w *Waiter, mayQueue bool, limit uint64, v verdict) (Reason, Permit, error) {
	c := req.Class
	cc := &l.cfg[c]
	if !mayQueue || cc.QueueDepth == 0 || l.dryRun {
		return ReasonLimit, Permit{}, nil
	}
	wait := l.expectedWaitLocked(c, limit)
	switch {
	case l.queues[c].n >= cc.QueueDepth || l.queued >= l.maxQueue:
		return ReasonQueueFull, Permit{}, nil
	case !req.Deadline.IsZero() && l.tooLateToQueue(now, req, cost, wait, v):
		return ReasonDeadline, Permit{}, nil
	case w == nil:
		l.thawLocked()
		l.mu.Unlock()
		return ReasonNone, Permit{}, needWaiter(v)
	case w.queued:
		l.thawLocked()
		l.mu.Unlock()
		return ReasonNone, Permit{}, fmt.Errorf("%w: waiter already queued", ErrInvalidRequest)
	}
	var h tenantHold
	if req.Tenant != "" {
		// Its share of the class's demand: what it holds, what waits, and
		// this request.
		r := l.roomLocked(now, l.state.Load(), c, limit)
		r.roomN += int64(l.queues[c].n) + 1
		r.roomC += cost
		var fair bool
		if h, fair = l.tenantDo(c, req.Tenant, wt, cost, r, tenantQueue, false); !fair {
			return ReasonTenantShare, Permit{}, nil
		}
	}
	l.enqueueLocked(now, req, cost, w, v, h.e)
	l.markDemandLocked(now, c)
	l.mu.Unlock()
	l.counts[c].queued.Add(1)
	if o := l.observer; o != nil {
		l.reportQueued(o, now, w)
	}
	return ReasonNone, Permit{}, errQueued
}

// needWaiter returns the error that asks the caller of acquire for a waiter
// and tells it the verdict v of the deadline check, to pass back in.
func needWaiter(v verdict) error {
	if v == probing {
		return errNeedWaiterProbe
	}
	return errNeedWaiter
}

// freezeLocked sets the slow flag so that the state word changes only under
// l.mu until thawLocked.
func (l *Limiter) freezeLocked() {
	for {
		s := l.state.Load()
		if s&slowFlag != 0 || l.state.CompareAndSwap(s, s|slowFlag) {
			return
		}
	}
}

// thawLocked clears the slow flag unless waiters, unmet protected demand or
// draining still need every operation to take the lock.
func (l *Limiter) thawLocked() {
	if l.queued > 0 || l.draining || l.demandAny {
		return
	}
	for {
		s := l.state.Load()
		if s&slowFlag == 0 || l.state.CompareAndSwap(s, s&^slowFlag) {
			return
		}
	}
}

func (l *Limiter) markDemandLocked(now time.Time, c Class) {
	if l.marksDemand[c] {
		l.demandUntil[c] = now.Add(l.demandHold)
		l.demandAny = true
	}
}

func (l *Limiter) expireDemandLocked(now time.Time) { l.ageDemandLocked(now, true) }

// expireQuietDemandLocked is expireDemandLocked for the paths that free
// capacity (releases, cancellations, ExpireAt): it drops demand that has
// run out only once no admission has come for a whole DemandHold. While
// requests keep coming, the next one sees the hold's end within an
// interarrival time, and lending the share on release first would only
// change which request gets a freed slot in that gap, not how much
// capacity is used. Once requests stop, no admission comes to see it, and
// a lower-class waiter would sit until its MaxWait with the share idle.
func (l *Limiter) expireQuietDemandLocked(now time.Time) {
	if !l.demandAny {
		return
	}
	if now.Before(l.lastAttempt) {
		l.lastAttempt = now // the clock went back: no time passed
	}
	l.ageDemandLocked(now, now.Sub(l.lastAttempt) >= l.demandHold)
}

// ageDemandLocked drops the demand whose hold has run out if drop is set.
// Either way, a mark further ahead than DemandHold was made later than
// now: the clock went back. That counts as no time passed, so that a step
// back holds no demand longer than DemandHold.
func (l *Limiter) ageDemandLocked(now time.Time, drop bool) {
	if !l.demandAny {
		return
	}
	any := false
	for i := range l.cfg {
		t := l.demandUntil[i]
		switch {
		case t.IsZero():
			continue
		case t.Sub(now) > l.demandHold:
			l.demandUntil[i] = now.Add(l.demandHold)
		case drop && !now.Before(t):
			l.demandUntil[i] = time.Time{}
			continue
		}
		any = true
	}
	l.demandAny = any
}

// reserved returns the count and cost that class c has protected at limit.
func (l *Limiter) reserved(c int, limit uint64) (int64, int64) {
	share := l.cfg[c].Protected
	if share == 0 {
		return 0, 0
	}
	n := int64(share*float64(limit) + 1e-9)
	var cost int64
	if l.costBudget {
		cost = int64(share*float64(l.maxCost) + 1e-9)
	}
	return n, cost
}

// fitsLocked reports whether one more unit of class c with the given cost
// may be admitted in state s. Beyond the limit and the cost budget:
//   - a class with unmet demand (waiters, or rejected within DemandHold)
//     keeps the unused part of its protected share: nobody else gets it;
//   - while a higher class has waiters (or, with Strict, any unmet demand),
//     a lower class is admitted only within its own protected share.
func (l *Limiter) fitsLocked(s uint64, c Class, cost int64, limit uint64) bool {
	n, tc := inFlightOf(s), costOf(s)
	if n+1 > int64(limit) || tc+cost > l.maxCost {
		return false
	}
	if !l.multi {
		return true
	}
	free := int64(limit) - n - 1
	freeCost := l.maxCost - tc - cost
	ownN, ownC := l.reserved(int(c), limit)
	own := l.hot(c)
	withinOwn := own.inflight()+1 <= ownN && (!l.costBudget || own.cost()+cost <= ownC)
	for j := range l.cfg {
		if j == int(c) {
			continue
		}
		waiting := l.queues[j].n > 0
		if !waiting && l.demandUntil[j].IsZero() {
			continue
		}
		if j < int(c) && (waiting || l.strict) && !withinOwn {
			return false
		}
		rn, rc := l.reserved(j, limit)
		if u := rn - l.hot(Class(j)).inflight(); u > 0 {
			free -= u
		}
		if u := rc - l.hot(Class(j)).cost(); u > 0 && l.costBudget {
			freeCost -= u
		}
	}
	return free >= 0 && freeCost >= 0
}

// probeFits is fitsLocked for a probe of a closed limit: only the limit
// the probe allowed and the cost budget apply, and its tenant's share
// does not. While the limit is closed nothing else is admitted, so a
// probe refused for another class's share or priority, or for its
// tenant's share, would spend the probe interval on nobody.
func (l *Limiter) probeFits(s uint64, cost int64, limit uint64) bool {
	return uint64(inFlightOf(s)) < limit && costOf(s)+cost <= l.maxCost
}

// meanLatency returns the EWMA of timed successful work, or 0 if unknown.
func (l *Limiter) meanLatency() float64 { return math.Float64frombits(l.latency.Load()) }

// recordLatency folds a timed success into the EWMA. Concurrent updates may
// lose one another; the estimate only sizes hints.
func (l *Limiter) recordLatency(d time.Duration) {
	x := float64(d)
	old := l.meanLatency()
	if old != 0 {
		x = old + 0.1*(x-old)
	}
	l.latency.Store(math.Float64bits(x))
}

// hint estimates when a slot frees for a request with ahead others before
// it: by Little's law a slot frees every latency/limit on average.
func (l *Limiter) hint(ahead int, limit uint64) time.Duration {
	return time.Duration(l.meanLatency() * float64(ahead+1) / float64(max(limit, 1)))
}

// expectedWaitLocked estimates the queue wait of a new request of class c:
// it waits behind the queued requests of its own and higher classes. An
// unknown latency gives 0, so nothing is rejected before anything is known.
func (l *Limiter) expectedWaitLocked(c Class, limit uint64) time.Duration {
	ahead := 0
	for j := 0; j <= int(c); j++ {
		ahead += l.queues[j].n
	}
	return l.hint(ahead, limit)
}

// reject counts and reports a rejection and returns its shared error value.
func (l *Limiter) reject(now time.Time, c Class, cost int64, reason Reason, hint time.Duration, dry bool) *Rejection {
	l.counts[c].rejected[reason].Add(1)
	rej := l.rej.get(reason, c, hint)
	if o := l.observer; o != nil {
		o.Observe(Event{Kind: EventRejected, Time: now, Class: c, Reason: reason, Cost: cost, DryRun: dry, InFlight: l.InFlight()})
	}
	return rej
}

// admitted completes an admission that did not queue: in dry-run mode it
// counts and reports the rejection that p overrode (with hint), and it
// reports the admission. If the Observer panics, the caller never receives
// p, so the admission is undone (released as Ignored, without an event)
// while the panic unwinds.
func (l *Limiter) admitted(now time.Time, hasNow bool, p Permit, hint time.Duration) {
	reported := false
	defer func() {
		if !reported {
			l.revoke(now, hasNow, &p)
		}
	}()
	if r := p.shadow(); r != ReasonNone {
		l.reject(now, p.class(), p.cost(), r, hint, true)
	}
	if o := l.observer; o != nil {
		l.observeAdmitted(o, p, false)
	}
	reported = true
}

// revoke undoes an admission whose permit never reached its caller.
func (l *Limiter) revoke(now time.Time, hasNow bool, p *Permit) {
	q := p.untracked()
	switch {
	case p.meta&metaTracked != 0:
		if !(*tracker)(p.ref).done() {
			return
		}
		l.settle(&q) // a tenant's ticket
	case !l.settle(&q):
		return
	}
	p.ref = nil
	l.returnCapacity(now, hasNow, &q, Ignored, false)
}

// reportQueued reports that w joined the queue. If the Observer panics, the
// caller does not learn that w was queued, so w is taken out of the queue
// again, counted as cancelled but not reported, unless its outcome was
// decided meanwhile: that outcome is delivered through w's notify as usual.
func (l *Limiter) reportQueued(o Observer, now time.Time, w *Waiter) {
	reported := false
	defer func() {
		if !reported {
			l.removeWaiter(now, w, ReasonNone, false)
		}
	}()
	o.Observe(Event{Kind: EventQueued, Time: now, Class: w.req.Class, Cost: w.cost, Queued: true, InFlight: l.InFlight()})
	reported = true
}

// observeAdmitted reports an admission (after waiting when queued).
func (l *Limiter) observeAdmitted(o Observer, p Permit, queued bool) {
	var t time.Time
	if p.timed() {
		t = l.epoch.Add(time.Duration(p.start))
	}
	o.Observe(Event{Kind: EventAdmitted, Time: t, Class: p.class(), Reason: p.shadow(), Cost: p.cost(), Wait: p.wait(), Queued: queued, DryRun: p.shadow() != ReasonNone, InFlight: int(p.inflight())})
}
