package sim

// leaseBook keeps the leases of Shared key concurrency limits as the store
// holds them when its calls are modelled (Service.Store), following
// shedredis.Concurrency: a lease taken through the store counts for the
// fleet until it is released or expires, LeaseTTL after its last write;
// each replica renews its leases every LeaseTTL/3 in one call, which
// also writes back the leases taken in fallback and removes those whose
// release failed (orphans). An orphan is kept, as Concurrency keeps it,
// until a renewal succeeds, even once the store no longer counts it (a
// lease taken in fallback, or expired): while a replica has one, its
// renewer calls the store at every tick. Releases and renewals are
// store calls with the latency, time budget, outages and breaker of the
// acquisitions, so that a slow or failing store shows its full load,
// leases released late, and leases that expire while their work goes on.
//
// Not modelled: an acquisition that timed out but still runs in the
// store (shedredis removes it at the next renewal), a failed renewal
// that still runs there, and the race between a renewal and a release
// that overlap (shedredis removes the lease again).
type leaseBook struct {
	recs      []leaseRec
	free      []int32   // records to reuse
	byReplica [][]int32 // each replica's records, held or orphaned
	orphans   []int32   // by replica: its orphans, at most maxLeaseOrphans
	ttl       int64
	renewTO   int64   // renewals' time budget: max(Timeout, LeaseTTL/10)
	renewAt   []int64 // by replica: when its renewal call out started
	renewGen  []uint32
	renewOK   []bool
	expiries  int16 // lane of the records' expiries (a constant TTL)
}

// leaseRec is one lease of a Shared limit.
type leaseRec struct {
	class, key, replica int32
	pos                 int32  // its index in byReplica[replica]
	gen                 uint32 // bumped at each write: older expiries are stale
	since               int64  // when it was taken
	orphanAt            int64  // when its release failed (orphan)
	held                bool   // its request still runs
	inStore             bool   // counted in its class's fleet count
	releasing           bool   // its release call is out
	orphan              bool   // its release failed: kept for a renewal
	callOK              bool   // the release call's outcome...
	callGen             uint32 // ...and its breaker generation
}

// maxLeaseOrphans is shedredis's maxOrphans: the orphans a replica keeps
// for its renewals while the store is unreachable; past it, the rest
// expire on their own.
const maxLeaseOrphans = 4096

// newLeaseBook returns the book of sc's Shared leases, or nil when the
// store's calls are not modelled or no class keeps leases there.
func (e *engine) newLeaseBook() *leaseBook {
	if e.store == nil || e.leases == nil {
		return nil
	}
	shared := false
	for _, cl := range e.leases.classes {
		shared = shared || cl.shared
	}
	if !shared {
		return nil
	}
	m, n := e.store.m, e.sc.Service.Replicas
	b := &leaseBook{
		byReplica: make([][]int32, n), orphans: make([]int32, n), ttl: int64(m.LeaseTTL),
		renewTO: max(int64(m.Timeout), int64(m.LeaseTTL)/10),
		renewAt: make([]int64, n), renewGen: make([]uint32, n), renewOK: make([]bool, n),
		expiries: e.h.newLane(),
	}
	// The replicas' renewers started at different times: spread them
	// over a period, without a draw that would shift the store's.
	period := b.ttl / 3
	for r := range n {
		e.schedule(period*int64(r+1)/int64(n), evRenew, nil, int32(r))
	}
	return b
}

// taken records a lease of key of class c just taken at replica r:
// through the store (it counts for the fleet until it expires) or, when
// fallback, on the replica's share (the next renewal writes it). It
// returns the record's index.
func (e *engine) leaseTaken(r, c int, key int32, fallback bool) int32 {
	b := e.book
	var i int32
	if n := len(b.free); n > 0 {
		i, b.free = b.free[n-1], b.free[:n-1]
	} else {
		b.recs = append(b.recs, leaseRec{})
		i = int32(len(b.recs) - 1)
	}
	l := &b.recs[i]
	*l = leaseRec{class: int32(c), key: key, replica: int32(r), pos: int32(len(b.byReplica[r])), gen: l.gen, since: e.now, held: true}
	b.byReplica[r] = append(b.byReplica[r], i)
	if !fallback {
		e.leaseWritten(i)
	}
	return i
}

// leaseWritten writes lease i to the store at now: it counts for the
// fleet (again) until now+LeaseTTL.
func (e *engine) leaseWritten(i int32) {
	b := e.book
	l := &b.recs[i]
	if !l.inStore {
		l.inStore = true
		e.leases.classes[l.class].fleet[l.key]++
	}
	l.gen++
	e.h.pushLane(b.expiries, event{at: e.now + b.ttl, kind: evLeaseExpire, slot: -1, gen: l.gen, arg: i})
}

// leaseGone takes lease i out of the fleet's count.
func (e *engine) leaseGone(i int32) {
	l := &e.book.recs[i]
	if l.inStore {
		l.inStore = false
		e.leases.classes[l.class].fleet[l.key]--
	}
}

// drop forgets lease i once nothing refers to it any more.
func (b *leaseBook) drop(i int32) {
	l := &b.recs[i]
	if l.orphan {
		b.orphans[l.replica]--
	}
	rs := b.byReplica[l.replica]
	last := rs[len(rs)-1]
	rs[l.pos] = last
	b.recs[last].pos = l.pos
	b.byReplica[l.replica] = rs[:len(rs)-1]
	l.gen++ // its expiry is stale
	b.free = append(b.free, i)
}

// leaseReleased releases lease i as Lease.Release does once the request
// ends: the replica's share at once (the caller's job), the store by a
// call. A release the breaker skips leaves the lease to the next renewal
// or its expiry.
func (e *engine) leaseReleased(i int32) {
	b := e.book
	l := &b.recs[i]
	l.held = false
	wait, ok, gen, called := e.store.call(e.now, int(l.replica), storeLease)
	switch {
	case !called:
		e.releaseEnded(i, false)
	case wait == 0:
		e.store.answered(e.now, int(l.replica), storeLease, gen, ok)
		e.releaseEnded(i, ok)
	default:
		l.releasing, l.callOK, l.callGen = true, ok, gen
		e.schedule(e.now+wait, evLeaseRelease, nil, i)
	}
}

// releaseAnswered ends the release call of lease i.
func (e *engine) releaseAnswered(i int32) {
	l := &e.book.recs[i]
	l.releasing = false
	e.store.answered(e.now, int(l.replica), storeLease, l.callGen, l.callOK)
	e.releaseEnded(i, l.callOK)
}

// releaseEnded ends released lease i's release, ok or not. A lease whose
// release failed is an orphan, as Release records it: kept for the next
// renewal that succeeds, whether the store counts it or not, so that
// the renewer keeps calling the store for it. Past maxLeaseOrphans it is
// forgotten once the store no longer counts it.
func (e *engine) releaseEnded(i int32, ok bool) {
	b := e.book
	l := &b.recs[i]
	switch {
	case ok:
		e.leaseGone(i)
		b.drop(i)
	case b.orphans[l.replica] < maxLeaseOrphans:
		l.orphan, l.orphanAt = true, e.now
		b.orphans[l.replica]++
	case !l.inStore:
		b.drop(i)
	}
}

// leaseExpired ends lease i's count for the fleet when its last write
// (generation gen) is LeaseTTL old.
func (e *engine) leaseExpired(i int32, gen uint32) {
	l := &e.book.recs[i]
	if l.gen != gen || !l.inStore {
		return
	}
	e.leaseGone(i)
	if !l.held && !l.releasing && !l.orphan {
		e.book.drop(i) // an orphan past maxLeaseOrphans
	}
}

// renew starts replica r's renewal, when it holds leases or keeps
// orphans, and schedules the next one LeaseTTL/3 later.
func (e *engine) renew(r int) {
	b := e.book
	e.schedule(e.now+b.ttl/3, evRenew, nil, int32(r))
	if !b.renews(r) {
		return
	}
	wait, ok, gen, called := e.store.callWithin(e.now, r, storeLease, b.renewTO)
	if !called {
		return
	}
	b.renewAt[r], b.renewGen[r], b.renewOK[r] = e.now, gen, ok
	e.schedule(e.now+wait, evRenewDone, nil, int32(r)) // renewTO < LeaseTTL/3: one out at a time
}

// renews reports whether replica r's renewer calls the store, as
// Concurrency.renew does while it holds a lease or keeps an orphan (not
// for a lease whose release is still out).
func (b *leaseBook) renews(r int) bool {
	for _, i := range b.byReplica[r] {
		if l := &b.recs[i]; l.held || l.orphan {
			return true
		}
	}
	return false
}

// renewed ends replica r's renewal call: when it succeeded, the leases
// held when it started are written (again) and the orphans removed.
func (e *engine) renewed(r int) {
	b := e.book
	e.store.answered(e.now, r, storeLease, b.renewGen[r], b.renewOK[r])
	if !b.renewOK[r] {
		return
	}
	rs := b.byReplica[r]
	for k := 0; k < len(rs); {
		i := rs[k]
		l := &b.recs[i]
		// Only what the renewal's snapshot held: leases taken, and
		// orphans left, before it started.
		switch {
		case l.held && l.since <= b.renewAt[r]:
			e.leaseWritten(i)
		case l.orphan && l.orphanAt <= b.renewAt[r]:
			e.leaseGone(i)
			b.drop(i) // moves the last record to k
			rs = b.byReplica[r]
			continue
		}
		k++
	}
}
