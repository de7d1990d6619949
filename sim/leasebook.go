package sim

import "github.com/shedkit/shedkit/record"

// leaseBook keeps the leases of Shared key concurrency limits as the store
// holds them when its calls are modelled (Service.Store), following
// shedredis.Concurrency: a lease taken through the store counts for the
// fleet until it is released or expires, LeaseTTL after its last write.
// Each replica renews its leases every LeaseTTL/3 in one call of two
// round trips (loading the script, then the pipeline), which also writes
// back the leases taken in fallback and removes those whose release
// failed (orphans); one more call then removes the leases released while
// the renewal was out, which it may have written back. An orphan is
// kept, as Concurrency keeps it, until a renewal succeeds, even once the
// store no longer counts it (a lease taken in fallback, or expired):
// while a replica has one, its renewer calls the store at every tick.
// Releases and renewals are store calls with the latency, time budget,
// outages and breaker of the acquisitions, so that a slow or failing
// store shows its full load, leases released late, and leases that
// expire while their work goes on.
//
// A call that timed out on the client still runs in the store when it
// gets there (unless the store is out, or the budget ended before the
// renewal's pipeline was sent): an acquisition adds its lease, if its
// key is under its limit; a release removes it; a renewal writes its
// leases, also those released since, and removes its orphans; a cleanup
// removes its leases. So a timed-out acquisition leaves an orphan
// (refused on the replica's share, or granted there and then released),
// and so does a lease released after a failed renewal, so that a
// renewal removes what the call may have written. A replica's renewals
// that are still on their way when the next one times out land together.
type leaseBook struct {
	recs       []leaseRec
	free       []int32   // records to reuse
	byReplica  [][]int32 // each replica's records, held or orphaned
	orphans    []int32   // by replica: its orphans, at most maxLeaseOrphans
	ttl        int64
	renewTO    int64   // renewals' time budget: max(Timeout, LeaseTTL/10)
	renewAt    []int64 // by replica: when its renewal (or cleanup) call out started
	renewGen   []uint32
	renewOK    []bool
	renewLands []int64 // by replica: when, after renewAt, that call reaches the store; -1 never
	// by replica: busy, its renewal or the cleanup after it is out;
	// missed, a tick came meanwhile (the renewer's time.Ticker keeps one).
	busy, missed []bool
	expiries     int16 // lane of the records' expiries (a constant TTL)
}

// leaseRec is one lease of a Shared limit.
type leaseRec struct {
	class, key, replica int32
	pos                 int32  // its index in byReplica[replica]
	gen                 uint32 // bumped at each write: older expiries are stale
	orphanAt            int64  // when it became an orphan
	held                bool   // its request still runs
	inStore             bool   // counted in its class's fleet count
	releasing           bool   // its release call is out
	orphan              bool   // kept for a renewal to remove
	// abandoned: taken on the replica's share after its acquisition
	// timed out, which may still add it to the store after its release.
	abandoned bool
	// inDoubt: the last renewal that covered it failed, and may still
	// write it after its release.
	inDoubt  bool
	renewing bool   // held when its replica's renewal out started
	cleaning bool   // the cleanup after that renewal is removing it
	landing  uint8  // its calls that timed out, still on their way to the store
	late     uint8  // what a timed-out renewal or cleanup does to it when it lands
	callOK   bool   // the release call's outcome...
	callGen  uint32 // ...and its breaker generation
}

// What a renewal or cleanup that timed out on the client does to a lease
// when it reaches the store (leaseRec.late).
const (
	lateWrite uint8 = 1 + iota
	lateRemove
)

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
		renewAt: make([]int64, n), renewGen: make([]uint32, n), renewOK: make([]bool, n), renewLands: make([]int64, n),
		busy: make([]bool, n), missed: make([]bool, n),
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

// newLeaseRec returns a new record, held by nothing yet, of a lease of
// key of class c at replica r.
func (e *engine) newLeaseRec(r, c int, key int32) int32 {
	b := e.book
	var i int32
	if n := len(b.free); n > 0 {
		i, b.free = b.free[n-1], b.free[:n-1]
	} else {
		b.recs = append(b.recs, leaseRec{})
		i = int32(len(b.recs) - 1)
	}
	l := &b.recs[i]
	*l = leaseRec{class: int32(c), key: key, replica: int32(r), pos: int32(len(b.byReplica[r])), gen: l.gen}
	b.byReplica[r] = append(b.byReplica[r], i)
	return i
}

// leaseTaken records a lease of key of class c just taken at replica r:
// through the store (it counts for the fleet until it expires) or, when
// fallback, on the replica's share (the next renewal writes it). late is
// the record of the lease's timed-out acquisition, still on its way to
// the store (acquireLate), or -1. It returns the record's index.
func (e *engine) leaseTaken(r, c int, key int32, fallback bool, late int32) int32 {
	i := late
	if i < 0 {
		i = e.newLeaseRec(r, c, key)
	}
	l := &e.book.recs[i]
	l.held, l.abandoned = true, late >= 0
	if !fallback {
		e.leaseWritten(i)
	}
	return i
}

// acquireLate records the lease that service request t's acquisition,
// which timed out on the client, adds when it reaches the store lands
// after it was made. The decision on the replica's share then takes
// that record (leaseTaken) or leaves it as an orphan (leaseRefused).
func (e *engine) acquireLate(t *task, lands int64) int32 {
	i := e.newLeaseRec(int(t.replica), int(t.class), t.key)
	e.book.recs[i].landing++
	e.schedule(e.now+lands, evAcquireLands, nil, i)
	return i
}

// acquireLanded runs lease i's timed-out acquisition in the store, as
// the script does: the lease is added if its key is under its limit.
func (e *engine) acquireLanded(i int32) {
	l := &e.book.recs[i]
	l.landing--
	if cl := &e.leases.classes[l.class]; !l.inStore && cl.fleet[l.key] < cl.limit {
		e.leaseWritten(i)
	}
	e.book.dropUnused(i)
}

// leaseRefused ends the record of a timed-out acquisition that the
// replica's share refused: an orphan, as Concurrency.Acquire keeps it, so
// that a renewal removes what the call may add.
func (e *engine) leaseRefused(i int32) {
	e.orphaned(i)
	e.book.dropUnused(i)
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

// orphaned keeps lease i for the next renewal that succeeds to remove,
// as Concurrency keeps its orphans, up to maxLeaseOrphans per replica;
// past it, what the store counts of the lease expires on its own.
func (e *engine) orphaned(i int32) {
	b := e.book
	l := &b.recs[i]
	if !l.orphan && b.orphans[l.replica] < maxLeaseOrphans {
		l.orphan, l.orphanAt = true, e.now
		b.orphans[l.replica]++
	}
}

// dropUnused forgets lease i once nothing refers to it any more: no
// request holds it, the store does not count it, no renewal is to remove
// it and no call is out with it. It reports whether it did, which moves
// the replica's last record to i's place in byReplica.
func (b *leaseBook) dropUnused(i int32) bool {
	l := &b.recs[i]
	if l.held || l.inStore || l.orphan || l.releasing || l.renewing || l.cleaning || l.landing != 0 {
		return false
	}
	rs := b.byReplica[l.replica]
	last := rs[len(rs)-1]
	rs[l.pos] = last
	b.recs[last].pos = l.pos
	b.byReplica[l.replica] = rs[:len(rs)-1]
	l.gen++ // its expiry is stale
	b.free = append(b.free, i)
	return true
}

// leaseReleased releases lease i as Lease.Release does once the request
// ends: the replica's share at once (the caller's job), the store by a
// call. It returns how long the call takes: the middleware's deferred
// Release returns before the response is sent, so the response waits
// that long. A release the breaker skips leaves the lease to the next
// renewal or its expiry; one that times out still removes it when it
// reaches the store.
func (e *engine) leaseReleased(i int32) int64 {
	l := &e.book.recs[i]
	l.held = false
	c := e.store.call(e.now, int(l.replica), storeLease, scriptRelease, never)
	e.recordStoreCall(int(l.replica), record.StoreRelease, c)
	switch {
	case !c.called:
		e.releaseEnded(i, false)
		return 0
	case c.wait == 0:
		e.store.answered(e.now, int(l.replica), storeLease, c.gen, c.ok, false)
		e.releaseEnded(i, c.ok)
		return 0
	}
	if c.late() {
		l.landing++
		e.schedule(e.now+c.lands, evReleaseLands, nil, i)
	}
	l.releasing, l.callOK, l.callGen = true, c.ok, c.gen
	e.schedule(e.now+c.wait, evLeaseRelease, nil, i)
	return c.wait
}

// releaseLanded runs lease i's timed-out release in the store.
func (e *engine) releaseLanded(i int32) {
	e.book.recs[i].landing--
	e.leaseGone(i)
	e.book.dropUnused(i)
}

// releaseAnswered ends the release call of lease i.
func (e *engine) releaseAnswered(i int32) {
	l := &e.book.recs[i]
	l.releasing = false
	e.store.answered(e.now, int(l.replica), storeLease, l.callGen, l.callOK, false)
	e.releaseEnded(i, l.callOK)
}

// releaseEnded ends released lease i's release, ok or not. A lease whose
// release failed is an orphan, as Release records it: kept for the next
// renewal that succeeds, whether the store counts it or not, so that
// the renewer keeps calling the store for it. So is a lease that a
// timed-out acquisition or renewal may still write to the store.
func (e *engine) releaseEnded(i int32, ok bool) {
	if ok {
		e.leaseGone(i)
	}
	if l := &e.book.recs[i]; !ok || l.abandoned || l.inDoubt {
		e.orphaned(i)
	}
	e.book.dropUnused(i)
}

// leaseExpired ends lease i's count for the fleet when its last write
// (generation gen) is LeaseTTL old.
func (e *engine) leaseExpired(i int32, gen uint32) {
	if l := &e.book.recs[i]; l.gen != gen || !l.inStore {
		return
	}
	e.leaseGone(i)
	e.book.dropUnused(i)
}

// renew is replica r's renewer's tick, every LeaseTTL/3: it starts a
// renewal, unless the last one or its cleanup is still out; then the
// renewal starts when that ends, as the renewer's time.Ticker keeps one
// tick for it.
func (e *engine) renew(r int) {
	b := e.book
	e.schedule(e.now+b.ttl/3, evRenew, nil, int32(r))
	if b.busy[r] {
		b.missed[r] = true
		return
	}
	e.startRenewal(r)
}

// startRenewal starts replica r's renewal when it holds leases or keeps
// orphans: one call within the renewals' budget, of two round trips when
// a lease is held (SCRIPT LOAD, then the pipeline with the renewal
// scripts), else one (the pipeline of the orphans' removals).
func (e *engine) startRenewal(r int) {
	b := e.book
	held, calls := b.renews(r)
	if !calls {
		return
	}
	trips := 1
	if held {
		trips = 2
	}
	c := e.store.callWithin(e.now, r, storeLease, b.renewTO, trips, noScript, never)
	e.recordStoreCall(r, record.StoreRenew, c)
	if !c.called {
		return
	}
	for _, i := range b.byReplica[r] {
		l := &b.recs[i]
		l.renewing = l.held // the renewal's snapshot
	}
	b.busy[r] = true
	b.renewAt[r], b.renewGen[r], b.renewOK[r], b.renewLands[r] = e.now, c.gen, c.ok, c.lands
	e.schedule(e.now+c.wait, evRenewDone, nil, int32(r))
}

// renews reports whether replica r's renewer calls the store, as
// Concurrency.renew does while it holds a lease or keeps an orphan (not
// for a lease whose release is still out), and whether it holds a lease.
func (b *leaseBook) renews(r int) (held, calls bool) {
	for _, i := range b.byReplica[r] {
		l := &b.recs[i]
		if l.held {
			return true, true
		}
		calls = calls || l.orphan
	}
	return false, calls
}

// renewed ends replica r's renewal call. When it succeeded, the leases
// held when it started are written (again), those released since too
// (their removal may have come first), and the orphans left before it
// started are removed; then a cleanup call removes the released ones
// again. When it failed, those released since are orphans, and the call
// may still do all that when it reaches the store.
func (e *engine) renewed(r int) {
	b := e.book
	ok, late := b.renewOK[r], b.renewLands[r] >= 0
	e.store.answered(e.now, r, storeLease, b.renewGen[r], ok, false)
	back := false
	rs := b.byReplica[r]
	for k := 0; k < len(rs); {
		i := rs[k]
		l := &b.recs[i]
		renewing := l.renewing
		l.renewing = false
		switch {
		case renewing && ok:
			e.leaseWritten(i)
			l.inDoubt, l.cleaning = false, !l.held
			back = back || l.cleaning
		case renewing:
			l.inDoubt = true
			b.lateDoes(i, late, lateWrite)
			if !l.held {
				e.orphaned(i)
			}
		case l.orphan && l.orphanAt <= b.renewAt[r] && ok:
			l.orphan = false
			b.orphans[r]--
			e.leaseGone(i)
		case l.orphan && l.orphanAt <= b.renewAt[r]:
			b.lateDoes(i, late, lateRemove)
		}
		if b.dropUnused(i) {
			rs = b.byReplica[r] // the last record moved to k
			continue
		}
		k++
	}
	switch {
	case back:
		e.cleanup(r)
		return
	case !ok && late:
		e.schedule(b.renewAt[r]+b.renewLands[r], evRenewLands, nil, int32(r))
	}
	e.renewerIdle(r)
}

// lateDoes marks lease i for what a renewal or cleanup that timed out
// does to it when it reaches the store, if late (it does get there).
func (b *leaseBook) lateDoes(i int32, late bool, what uint8) {
	if l := &b.recs[i]; late && l.late == 0 {
		l.late = what
		l.landing++
	}
}

// renewalLanded runs replica r's renewals or cleanups that timed out on
// the client when they reach the store.
func (e *engine) renewalLanded(r int) {
	b := e.book
	rs := b.byReplica[r]
	for k := 0; k < len(rs); {
		i := rs[k]
		l := &b.recs[i]
		switch l.late {
		case 0:
			k++
			continue
		case lateWrite:
			e.leaseWritten(i)
		case lateRemove:
			e.leaseGone(i)
		}
		l.late = 0
		l.landing--
		if b.dropUnused(i) {
			rs = b.byReplica[r] // the last record moved to k
			continue
		}
		k++
	}
}

// cleanup removes again, in one call within the renewals' budget, the
// leases replica r's renewal wrote back after their release, as
// Concurrency.renew does; those it fails to remove are orphans.
func (e *engine) cleanup(r int) {
	b := e.book
	c := e.store.callWithin(e.now, r, storeLease, b.renewTO, 1, noScript, never)
	e.recordStoreCall(r, record.StoreCleanup, c)
	if !c.called {
		e.cleaned(r, false, false)
		return
	}
	b.renewAt[r], b.renewGen[r], b.renewOK[r], b.renewLands[r] = e.now, c.gen, c.ok, c.lands
	e.schedule(e.now+c.wait, evCleanupDone, nil, int32(r))
}

// cleanupAnswered ends replica r's cleanup call.
func (e *engine) cleanupAnswered(r int) {
	b := e.book
	ok, late := b.renewOK[r], b.renewLands[r] >= 0
	e.store.answered(e.now, r, storeLease, b.renewGen[r], ok, false)
	if !ok && late {
		e.schedule(b.renewAt[r]+b.renewLands[r], evRenewLands, nil, int32(r))
	}
	e.cleaned(r, ok, late)
}

// cleaned ends the cleanup of replica r's leases, ok or not; late, it
// still removes them when it reaches the store.
func (e *engine) cleaned(r int, ok, late bool) {
	b := e.book
	rs := b.byReplica[r]
	for k := 0; k < len(rs); {
		i := rs[k]
		if l := &b.recs[i]; l.cleaning {
			l.cleaning = false
			if ok {
				e.leaseGone(i)
			} else {
				e.orphaned(i)
				b.lateDoes(i, late, lateRemove)
			}
			if b.dropUnused(i) {
				rs = b.byReplica[r] // the last record moved to k
				continue
			}
		}
		k++
	}
	e.renewerIdle(r)
}

// renewerIdle frees replica r's renewer, and starts the renewal of a
// tick that came while it was busy.
func (e *engine) renewerIdle(r int) {
	b := e.book
	b.busy[r] = false
	if b.missed[r] {
		b.missed[r] = false
		e.startRenewal(r)
	}
}
