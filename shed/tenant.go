package shed

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Fair share per tenant
//
// Within a class, one tenant (a customer, an API key) could otherwise take
// every slot the class may use, and a single noisy customer would crowd out
// the rest even when the limit is right. A request that names a tenant
// (Request.Tenant) is therefore held to the tenant's share of its class
// while the class is contended:
//
//   - the class is contended for an admission when, after it, the class
//     would have no room for another request like it (count or cost, as
//     far as its priority and the other classes' protected shares let it
//     use the limit now), or when the class has waiters;
//   - a tenant's share is the class's capacity (its in-flight work plus
//     that room) times the tenant's weight over the summed weights of the
//     class's active tenants, rounded up: equal shares by default, so a
//     tenant always gets at least one unit;
//   - an admission in a contended class must leave its tenant within its
//     share, in count and (with a cost budget) in cost.
//
// So an idle class lets one tenant use everything, but a tenant above its
// share never takes the last free place of a busy class: that place stays
// for the tenants below their share, and as the work of the tenant above
// it ends, the tenant is held to its share. Running work is never
// preempted.
//
// Only tenants with work in flight or queued are tracked: an entry is made
// when a tenant is first admitted or queued in a class and freed when both
// its counts drop to zero, so memory is bounded by the limit plus the
// queues, whatever the number of tenants. Entries live in a sharded map
// with a mutex per shard; requests without a tenant never touch it.

// tenantShards is the number of shards of the tenant map (a power of two).
const tenantShards = 32

// Fixed-point tenant weights: weightUnit units are a weight of 1. Weights
// are clamped to [1/weightUnit, maxTenantWeight].
const (
	weightUnit      = 1 << 10
	maxTenantWeight = 1 << 10
)

type tenantKey struct {
	class Class
	name  string
}

// tenantEntry is a tracked tenant of one class. Its fields are guarded by
// its shard's mutex. A permit of the tenant points to its entry and holds
// a ticket: the entry's record of that admission, as a guard slot is for
// other permits (guard.go), so that exactly one copy of the permit is
// released and a reconciled cost is shared by the copies. Entries are
// reused within their shard; tickets keep counting across reuses, so a
// stale copy of a permit finds no ticket (until 2^24 admissions later, as
// with guard tags).
type tenantEntry struct {
	l        *Limiter
	shard    *tenantShard
	key      tenantKey
	weight   uint64 // fixed point
	inflight int64
	cost     int64
	queued   int64
	// dead: the entry was freed (nothing in flight or queued).
	dead bool
	// tickets holds the tickets of the admissions in flight and their
	// costs; next is the next ticket.
	tickets ticketTable
	next    uint64
}

// tenantHold is an admission counted in its tenant's entry: the entry and
// the admission's ticket. The zero value means no tenant.
type tenantHold struct {
	e      *tenantEntry
	ticket uint64
}

// maxFreeEntries bounds each shard's list of entries to reuse.
const maxFreeEntries = 64

// tenantShard holds the entries of the tenants that hash to it, by class
// and name (maps keyed by a string take the runtime's fast path).
type tenantShard struct {
	mu   sync.Mutex
	m    [MaxClasses]map[string]*tenantEntry
	free []*tenantEntry
}

// tenantTable holds the tracked tenants of a limiter.
type tenantTable struct {
	seed   maphash.Seed
	weight func(string) float64
	// active[c] is the summed weight of class c's tracked tenants, count[c]
	// how many there are.
	active [MaxClasses]atomic.Uint64
	count  [MaxClasses]atomic.Int64
	// short[c] is until when (ns since the limiter's epoch) class c counts
	// as contended after a shortfall (see markShort); 0 when it does not.
	short [MaxClasses]atomic.Int64
	// phantom[c] is likewise until when class c counts one tenant more
	// than it tracks: one that was refused with nothing in flight.
	phantom [MaxClasses]atomic.Int64
	shards  [tenantShards]tenantShard
}

func newTenantTable(weight func(string) float64) *tenantTable {
	return &tenantTable{seed: maphash.MakeSeed(), weight: weight}
}

// weightOf returns the fixed-point weight of a tenant: Config.TenantWeight
// if set, clamped, else 1. A weight that is not a positive number counts
// as 1. TenantWeight is user code that may panic: it is called only where
// a panic leaves nothing to undo (see entryLocked and weightFor).
func (t *tenantTable) weightOf(name string) uint64 {
	if t.weight == nil {
		return weightUnit
	}
	w := t.weight(name)
	if !(w > 0) || math.IsInf(w, 0) {
		return weightUnit
	}
	return uint64(min(max(w*weightUnit, 1), maxTenantWeight*weightUnit))
}

// weightFor returns the weight that a request of tenant name in class c
// would give the tenant's entry if it made one: the entry's own weight
// while the tenant is tracked, else weightOf's. acquireSlow calls it before
// it takes the limiter's lock, so that no user code runs under that lock
// (a panic would leave it held); the fast path does not pay for it.
func (t *tenantTable) weightFor(c Class, name string) uint64 {
	if t.weight == nil {
		return weightUnit
	}
	sh := t.shard(c, name)
	sh.mu.Lock()
	e := sh.m[c][name]
	var w uint64
	if e != nil {
		w = e.weight
	}
	sh.mu.Unlock()
	if e != nil {
		return w
	}
	return t.weightOf(name)
}

func (t *tenantTable) shard(c Class, name string) *tenantShard {
	h := maphash.String(t.seed, name) + uint64(c)
	return &t.shards[h&(tenantShards-1)]
}

// entryLocked returns the entry of (c, name) in sh, whose lock is held,
// making it if the tenant is not tracked yet, with weight wt (from
// weightFor), or weightOf's when wt is 0. The weight is known before
// anything changes, so a panicking TenantWeight leaves sh as it was (the
// callers unlock it in a defer).
func (t *tenantTable) entryLocked(l *Limiter, sh *tenantShard, c Class, name string, wt uint64) *tenantEntry {
	k := tenantKey{c, name}
	m := sh.m[c]
	if e := m[name]; e != nil {
		return e
	}
	if wt == 0 {
		wt = t.weightOf(name)
	}
	if m == nil {
		m = make(map[string]*tenantEntry)
		sh.m[c] = m
	}
	var e *tenantEntry
	if n := len(sh.free); n > 0 {
		e = sh.free[n-1]
		sh.free = sh.free[:n-1]
		e.key, e.weight, e.dead = k, wt, false
	} else {
		e = &tenantEntry{l: l, shard: sh, key: k, weight: wt}
	}
	m[name] = e
	t.active[c].Add(e.weight)
	t.count[c].Add(1)
	return e
}

// dropIdleLocked frees e once nothing of its tenant is in flight or queued.
func (t *tenantTable) dropIdleLocked(e *tenantEntry) {
	if e.inflight > 0 || e.queued > 0 || e.dead {
		return
	}
	delete(e.shard.m[e.key.class], e.key.name)
	t.active[e.key.class].Add(^(e.weight - 1))
	t.count[e.key.class].Add(-1)
	e.dead, e.cost, e.key.name = true, 0, ""
	e.tickets.reset()
	if len(e.shard.free) < maxFreeEntries {
		e.shard.free = append(e.shard.free, e)
	}
}

// holdLocked counts an admission of the given cost in e and returns it.
func (e *tenantEntry) holdLocked(cost int64) tenantHold {
	h := tenantHold{e, e.next & guardTagMask}
	e.next++
	e.tickets.put(h.ticket, cost)
	e.inflight++
	e.cost += cost
	return h
}

// classRoom is what a class holds and may still take, for the share check.
type classRoom struct {
	n, cost      int64 // the class's in-flight count and cost
	roomN, roomC int64 // how much more it may take now
	waiters      bool  // other requests of the class are queued
	short        bool  // the class had a shortfall within DemandHold
	phantom      bool  // ... of a tenant it does not track
}

// classLoad returns class c's in-flight count and cost in state s (the
// cost is 0 when it is not tracked per class).
func (l *Limiter) classLoad(s uint64, c Class) (int64, int64) {
	if !l.multi {
		return inFlightOf(s), costOf(s)
	}
	h := l.hot(c)
	if l.classCost {
		return h.inflight(), h.cost()
	}
	return h.inflight(), 0
}

// roomFast is the room of class c in state s when nothing waits and no
// class has unmet demand: whatever the limit and the budget leave.
func (l *Limiter) roomFast(s uint64, c Class, limit uint64) classRoom {
	n, k := l.classLoad(s, c)
	return classRoom{n: n, cost: k, roomN: int64(limit) - inFlightOf(s), roomC: l.maxCost - costOf(s)}
}

// roomLocked is the room of class c in state s, less the unused protected
// shares of the classes with unmet demand, and only its own protected
// share while a higher class waits (or, with Strict, has unmet demand):
// the rules of fitsLocked, as amounts.
func (l *Limiter) roomLocked(now time.Time, s uint64, c Class, limit uint64) classRoom {
	r := l.roomFast(s, c, limit)
	r.waiters = l.queues[c].n > 0
	r.short, r.phantom = l.shortNow(c, now, true)
	if !l.multi {
		return r
	}
	ownN, ownC := l.reserved(int(c), limit)
	own := l.hot(c)
	for j := range l.cfg {
		waiting := l.queues[j].n > 0
		if j == int(c) || (!waiting && l.demandUntil[j].IsZero()) {
			continue
		}
		if j < int(c) && (waiting || l.strict) {
			r.roomN = min(r.roomN, ownN-own.inflight())
			if l.costBudget {
				r.roomC = min(r.roomC, ownC-own.cost())
			}
		}
		rn, rc := l.reserved(j, limit)
		r.roomN -= max(rn-l.hot(Class(j)).inflight(), 0)
		if l.costBudget {
			r.roomC -= max(rc-l.hot(Class(j)).cost(), 0)
		}
	}
	r.roomN, r.roomC = max(r.roomN, 0), max(r.roomC, 0)
	return r
}

// withinShareLocked reports whether e's tenant may add held units of work
// of the given cost in a class with room r (see the rules above). e's shard
// lock is held.
func (l *Limiter) withinShareLocked(e *tenantEntry, held, cost int64, r classRoom) bool {
	contended := r.roomN-1 < 1 || r.waiters || r.short || (l.costBudget && r.roomC-cost < cost)
	if !contended {
		return true
	}
	// Integers: capacity < 2^40 and weight <= 2^20, so no overflow, and a
	// share that is a whole number is not rounded up by a float's error.
	total := max(l.tenants.active[e.key.class].Load(), e.weight)
	if r.phantom {
		// A tenant was refused with nothing in flight, so it is not
		// tracked: count one more tenant, of weight 1, for it.
		total += weightUnit
	}
	if uint64(held+1) > ceilShare(r.n+r.roomN, e.weight, total) {
		return false
	}
	if l.costBudget && (l.classCost || !l.multi) && uint64(e.cost+cost) > ceilShare(r.cost+r.roomC, e.weight, total) {
		return false
	}
	return true
}

// ceilShare returns capacity * weight / total, rounded up.
func ceilShare(capacity int64, weight, total uint64) uint64 {
	return (uint64(max(capacity, 0))*weight + total - 1) / total
}

// tenantOp says what tenantLocked does with a request of a tenant.
type tenantOp uint8

const (
	tenantAdmit tenantOp = iota // count it in flight
	tenantQueue                 // count it queued
	tenantCheck                 // only check the share
)

// tenantDo checks whether a request of tenant name (of weight wt, 0 when
// not resolved yet: see entryLocked) in class c with the given cost is
// within its share of a class with room r (unless force), and if so
// applies op. It returns the tenant's entry (nil for
// tenantCheck or when refused) and whether the request is within its share.
// Waiting requests count against the share of a request that would queue.
func (l *Limiter) tenantDo(c Class, name string, wt uint64, cost int64, r classRoom, op tenantOp, force bool) (tenantHold, bool) {
	t := l.tenants
	sh := t.shard(c, name)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := t.entryLocked(l, sh, c, name, wt)
	held := e.inflight
	if op == tenantQueue {
		held += e.queued
	}
	ok := force || l.withinShareLocked(e, held, cost, r)
	switch {
	case !ok || op == tenantCheck:
		t.dropIdleLocked(e)
		return tenantHold{}, ok
	case op == tenantAdmit:
		return e.holdLocked(cost), true
	}
	e.queued++
	return tenantHold{e: e}, true
}

// tenantGrantLocked decides whether waiter w, whose tenant is e, may be
// admitted now with room r, and if so moves it from queued to in flight.
func (l *Limiter) tenantGrantLocked(e *tenantEntry, cost int64, r classRoom) (tenantHold, bool) {
	sh := e.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !l.withinShareLocked(e, e.inflight, cost, r) {
		return tenantHold{}, false
	}
	e.queued--
	return e.holdLocked(cost), true
}

// tenantUnqueue takes a waiter of e out of its counts.
func (l *Limiter) tenantUnqueue(e *tenantEntry) {
	mu := &e.shard.mu
	mu.Lock()
	e.queued--
	l.tenants.dropIdleLocked(e)
	mu.Unlock()
}

// settle takes an untracked permit's claim on its capacity: the ticket
// of a tenant's permit (which also ends the tenant's work), else the
// guard slot of a guarded one. It reports false when a copy of the permit
// took it already: the caller reports the misuse and gives nothing back.
// A tenant's permit comes back as a plain one, with its reconciled cost,
// so that the rest of its release knows nothing of tenants. Every path
// that gives a permit's capacity back (release, revoke, a leak) settles
// it first, which is what makes a tenant's count drop once per admission.
func (l *Limiter) settle(p *Permit) bool {
	if p.meta&metaTenant != 0 {
		return l.unhold(p)
	}
	return p.cw&guarded == 0 || l.unguard(p)
}

func (l *Limiter) unhold(p *Permit) bool {
	e := (*tenantEntry)(p.ref)
	ticket := p.cw >> guardTagShift & guardTagMask
	sh := e.shard
	sh.mu.Lock()
	var cost int64
	i := e.tickets.find(ticket)
	ok := i >= 0
	if ok {
		cost = e.tickets.slots[i].cost
		l.releaseHoldLocked(e, i)
	}
	sh.mu.Unlock()
	p.ref = unsafe.Pointer(l)
	p.meta &^= metaTenant
	if ok {
		p.cw = uint64(cost)
	}
	return ok
}

// releaseHoldLocked ends the admission in slot i of e's tickets.
func (l *Limiter) releaseHoldLocked(e *tenantEntry, i int) {
	e.cost = max(e.cost-e.tickets.slots[i].cost, 0)
	e.tickets.remove(i)
	if e.inflight--; e.inflight == 0 {
		e.cost = 0
	}
	l.tenants.dropIdleLocked(e)
}

// reconcileHold sets the cost of the admission with the given ticket in e
// (and, unless tracked, in the state word: a tracked permit's tracker did
// that) and returns the difference; errMisused when a copy of the permit
// was released already.
func (l *Limiter) reconcileHold(e *tenantEntry, ticket uint64, actual int64, tracked bool) (int64, error) {
	sh := e.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := e.tickets.find(ticket)
	if i < 0 {
		return 0, errMisused
	}
	old := e.tickets.slots[i].cost
	d := actual - old
	moved := d
	if d != 0 && !tracked {
		switch err := l.addCost(d); err {
		case nil:
		case errMisused:
			// Nothing in flight, though this admission is: an unguarded
			// copy of another permit took its place (see guard.go). The
			// ticket says this permit is live, so it stays valid; the
			// state word, at its floor, is left alone.
			moved = 0
		default:
			return 0, err
		}
	}
	e.tickets.slots[i].cost = actual
	e.cost = max(e.cost+d, 0)
	return moved, nil
}

// trackedTenants returns how many tenants class c tracks.
func (l *Limiter) trackedTenants(c Class) int { return int(l.tenants.count[c].Load()) }

// takeBack undoes an optimistic admission.
func (l *Limiter) takeBack(now time.Time, hasNow bool, c Class, cost int64) {
	if l.giveBack(now, hasNow, cost) != gaveBack {
		l.misused(now, hasNow, c, cost) // a copy took this unit
	}
}

// acquireTenant is acquire's lock-free path for a request with a tenant:
// the state word is changed as for any request, then the share is checked
// and counted under the tenant's shard lock. Whatever needs the limiter's
// lock goes to acquireShort.
func (l *Limiter) acquireTenant(now time.Time, hasNow bool, req Request, cost int64, w *Waiter, mayQueue bool, limit uint64, v verdict) (Permit, error) {
	if s := l.state.Load(); s&slowFlag != 0 || uint64(inFlightOf(s)) >= limit || costOf(s)+cost > l.maxCost || l.dryRun {
		return l.acquireShort(now, hasNow, req, cost, w, mayQueue, limit, v)
	}
	// shortNow may read the clock: before the state changes, so that a
	// panicking Config.Clock leaves nothing to undo.
	short, phantom := l.shortNow(req.Class, now, hasNow)
	// Take the place first, then judge the share on the room left after
	// this and every concurrent admission that came before it, so that
	// of several that race for the last places, the later ones see the
	// class contended. The word is read again: shortNow may have run
	// long enough for others to change it.
	s, ok := l.addFits(l.state.Load(), cost, limit)
	if !ok {
		return l.acquireShort(now, hasNow, req, cost, w, mayQueue, limit, v)
	}
	r := l.roomFast(s-delta(cost), req.Class, limit)
	r.short, r.phantom = short, phantom
	h, fair := l.holdTenant(now, hasNow, req, cost, r)
	if !fair {
		l.takeBack(now, hasNow, req.Class, cost)
		return Permit{}, l.reject(now, req.Class, cost, ReasonTenantShare, l.hint(0, limit), false)
	}
	shadow := v.shadow()
	p := l.newPermit(now, hasNow, req.Class, cost, inFlightOf(s), 0, shadow, h)
	if v == probing {
		l.startedProbe(&p)
	}
	if l.observer != nil || shadow != ReasonNone {
		l.admitted(now, hasNow, p, 0)
	}
	return p, nil
}

// holdTenant is acquireTenant's tenantDo, after the state word was changed
// for the request. A tenant's first request calls Config.TenantWeight (in
// entryLocked, under the shard's lock, which tenantDo releases in a
// defer): if it panics, the change is taken back as the panic unwinds, so
// the request takes nothing. The guard is a defer without recover, which
// costs no allocation.
func (l *Limiter) holdTenant(now time.Time, hasNow bool, req Request, cost int64, r classRoom) (h tenantHold, fair bool) {
	done := false
	defer func() {
		if !done {
			l.takeBack(now, hasNow, req.Class, cost)
		}
	}()
	h, fair = l.tenantDo(req.Class, req.Tenant, 0, cost, r, tenantAdmit, false)
	done = true
	return h, fair
}

// markShort records a shortfall of class c: a request of a tenant within
// its share was refused for lack of capacity. The
// class then counts as contended for Config.DemandHold, as a protected
// class keeps its share after a shortfall: otherwise a tenant above its
// share could take every place that several releases free at once, and
// the tenant that was refused would find the class full again. r is the
// class's room when the request was refused. A tenant alone in its class
// has nobody to make room for. Requests without a tenant are not held to
// shares, and do not mark shortfalls either: callers skip them, so that
// their rejections cost nothing more. wt is the tenant's weight (weightFor),
// or 0 when the caller holds no lock of the limiter and has changed
// nothing, so that a panicking TenantWeight leaves nothing to undo.
func (l *Limiter) markShort(now time.Time, hasNow bool, req Request, wt uint64, cost int64, r classRoom) {
	c := req.Class
	r.roomN++ // the share of the class with the refused request in it
	r.roomC += cost
	short, untracked := l.tenantShortfall(c, req.Tenant, wt, cost, r)
	if !short {
		return
	}
	if !hasNow {
		now = l.clock()
	}
	until := int64(now.Sub(l.epoch) + l.demandHold)
	l.tenants.short[c].Store(until)
	if untracked {
		l.tenants.phantom[c].Store(until)
	}
}

// shortNow reports whether class c had a shortfall within DemandHold of
// now, and whether one of a tenant it did not track. It reads the clock
// (without hasNow) only when it had one.
func (l *Limiter) shortNow(c Class, now time.Time, hasNow bool) (short, phantom bool) {
	v := l.tenants.short[c].Load()
	if v == 0 {
		return false, false
	}
	if !hasNow {
		now = l.clock()
	}
	t := int64(now.Sub(l.epoch))
	if t >= v {
		l.tenants.short[c].CompareAndSwap(v, 0)
		return false, false
	}
	p := l.tenants.phantom[c].Load()
	hold := int64(l.demandHold)
	if v-t > hold {
		// The mark was made later than now: the clock went back. That
		// counts as no time passed, so that the class is not held
		// contended for the size of the step.
		l.tenants.short[c].CompareAndSwap(v, t+hold)
		if p != 0 && p-t > hold && l.tenants.phantom[c].CompareAndSwap(p, t+hold) {
			p = t + hold
		}
	}
	return true, p != 0 && t < p // times before the epoch are negative
}

// tenantShortfall reports whether the refusal of a request of tenant name
// (of weight wt: see entryLocked) in class c with room r is a shortfall:
// the request was within its tenant's share, and another tenant is active
// in the class; and whether the tenant was untracked (nothing in flight or
// queued).
func (l *Limiter) tenantShortfall(c Class, name string, wt uint64, cost int64, r classRoom) (short, untracked bool) {
	t := l.tenants
	sh := t.shard(c, name)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := t.entryLocked(l, sh, c, name, wt)
	untracked = e.inflight == 0 && e.queued == 0
	short = t.active[c].Load() > e.weight && l.withinShareLocked(e, e.inflight, cost, r)
	t.dropIdleLocked(e)
	return short, untracked
}
