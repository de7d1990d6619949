package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Which of a replica's shedredis clients makes a store call (task.storeKind):
// the Store of the rate limits or the Concurrency of the key concurrency
// limits. Each has its own breaker, as each has its own guard. Zero: no
// call is out.
const (
	storeRate uint8 = 1 + iota
	storeLease
)

// Breaker states, as gobreaker's.
const (
	brClosed uint8 = iota
	brOpen
	brHalfOpen
)

// breaker is gobreaker's TwoStepCircuitBreaker as shedredis sets it up
// (MaxRequests 1, no Interval, ReadyToTrip at BreakerFailures consecutive
// failures). gen is its generation: an answer to a call made in another
// one is ignored, as gobreaker ignores it, so that calls still out when
// the breaker opens do not count twice.
type breaker struct {
	state    uint8
	probing  bool  // half-open: the one probe is out
	failures int32 // consecutive failures while closed
	gen      uint32
	until    int64 // open: when it lets a probe through
}

// allow reports whether a call may be made at now.
func (b *breaker) allow(now int64) bool {
	switch b.state {
	case brOpen:
		if now <= b.until { // gobreaker probes once expiry is before now
			return false
		}
		b.state, b.probing = brHalfOpen, false
		b.gen++
		fallthrough
	case brHalfOpen:
		if b.probing {
			return false
		}
		b.probing = true
	}
	return true
}

// done records the answer, ok or not, at now of a call made in
// generation gen.
func (b *breaker) done(gen uint32, ok bool, now int64, m *StoreModel) {
	if gen != b.gen {
		return
	}
	switch {
	case ok:
		if b.state == brHalfOpen {
			b.state = brClosed
			b.gen++
		}
		b.failures = 0
	case b.state == brHalfOpen:
		b.open(now, m)
	default:
		if b.failures++; b.failures >= int32(m.BreakerFailures) {
			b.open(now, m)
		}
	}
}

func (b *breaker) open(now int64, m *StoreModel) {
	b.state, b.until, b.failures = brOpen, now+int64(m.BreakerOpen), 0
	b.gen++
}

// storeCalls models every replica's calls to the shared store
// (Service.Store).
type storeCalls struct {
	m        *StoreModel
	outages  []Span
	rng      []*rand.Rand // by replica: round trips
	breakers []breaker    // by replica, then storeKind-1
	calls    int64        // made, all replicas and clients together
}

// newStoreCalls returns the calls of sc's store, or nil when it is not
// modelled. Each replica draws its round trips from its own stream, so
// that one replica's calls do not shift another's.
func newStoreCalls(sc *Scenario, seed uint64) *storeCalls {
	if sc.Service.Store == nil {
		return nil
	}
	n := sc.Service.Replicas
	s := &storeCalls{m: sc.Service.Store, outages: sc.Service.StoreOutages, rng: make([]*rand.Rand, n), breakers: make([]breaker, 2*n)}
	for r := range s.rng {
		s.rng[r] = newStream(seed, fmt.Sprintf("store/%d", r))
	}
	return s
}

// storeCall is one call to the store as a replica's client makes it.
type storeCall struct {
	wait int64 // how long the client waits for it: its round trips, or the budget
	// lands is how long after it was made the call takes effect in the
	// store, when it does (-1: never, the store was out). A call the
	// client gave up on still reaches the store and runs there, as
	// Redis runs a script whose caller stopped waiting.
	lands  int64
	gen    uint32 // the breaker's generation, to hand to answered
	ok     bool   // it succeeded within the budget
	called bool   // false: the breaker skipped it, and it never happened
}

// late reports whether the call failed on the client but still takes
// effect in the store, after the client gave up.
func (c storeCall) late() bool { return c.called && !c.ok && c.lands > c.wait }

// call starts a call of client kind at replica r at now, of one round
// trip within the time budget. A call fails when the store is out or its
// round trip exceeds the budget: the client then waits the budget.
func (s *storeCalls) call(now int64, r int, kind uint8) storeCall {
	return s.callWithin(now, r, kind, int64(s.m.Timeout), 1)
}

// callWithin is call of trips round trips, one after the other, within a
// time budget of budget: a renewal's is longer, as it is off the request
// path, and it takes two round trips.
func (s *storeCalls) callWithin(now int64, r int, kind uint8, budget int64, trips int) storeCall {
	b := &s.breakers[2*r+int(kind)-1]
	if !b.allow(now) {
		return storeCall{}
	}
	s.calls++
	c := storeCall{gen: b.gen, called: true}
	sent := true
	for k := range trips {
		// The budget ended before the last round trip was sent: the
		// call never reaches the store.
		sent = sent && (k < trips-1 || c.lands <= budget)
		c.lands += int64(s.m.Latency.sample(s.rng[r]))
	}
	c.wait, c.ok = c.lands, c.lands <= budget
	if !sent || inSpans(s.outages, time.Duration(now)) {
		c.ok, c.lands = false, -1
	}
	if !c.ok {
		c.wait = budget
	}
	return c
}

// answered records at now the answer to a call that call started.
func (s *storeCalls) answered(now int64, r int, kind uint8, gen uint32, ok bool) {
	s.breakers[2*r+int(kind)-1].done(gen, ok, now, s.m)
}

// askStore starts the store call that service request t's decision of
// kind needs, if any. It returns whether the decision falls back to the
// replica's share, or wait: t waits for the answer, and evStore resumes
// its decisions. Without a store model the store answers at once, unless
// it is out.
func (e *engine) askStore(t *task, kind uint8) (fallback, wait bool) {
	if e.store == nil {
		return inSpans(e.sc.Service.StoreOutages, time.Duration(e.now)), false
	}
	if !e.callsStore(t, kind) {
		return false, false
	}
	c := e.store.call(e.now, int(t.replica), kind)
	switch {
	case !c.called:
		return true, false
	case c.wait == 0:
		e.store.answered(e.now, int(t.replica), kind, c.gen, c.ok)
		return !c.ok, false
	}
	if c.late() {
		// The client will give up on the call, but the store runs it
		// all the same when it gets there.
		if kind == storeLease {
			t.leaseRec = e.acquireLate(t, c.lands) + 1
		} else {
			// arg packs class and key as evThink's does (at most 16
			// classes, MaxKeys keys).
			e.schedule(e.now+c.lands, evRateLands, nil, int32(t.class)|t.key<<8)
		}
	}
	t.storeKind, t.storeGen, t.storeOK = kind, c.gen, c.ok
	e.schedule(e.now+c.wait, evStore, t, 0)
	return false, true
}

// callsStore reports whether t's class keeps its limit of kind in the
// store.
func (e *engine) callsStore(t *task, kind uint8) bool {
	if kind == storeLease {
		return e.leases != nil && e.leases.classes[t.class].shared
	}
	return e.rates != nil && e.rates.shared[t.class].b != nil
}

// rateLanded runs in the store the rate-limit call of key of class c
// that timed out on the client: shedredis.Store's context deadline
// stops the client waiting, not Redis, which runs the GCRA script when
// the call gets there and takes the key's token if it has one. The
// replica has meanwhile decided on its share and charged that, so the
// request is charged twice; the share is not charged again here, as
// shedredis shadows only the admissions it sees.
func (e *engine) rateLanded(c int, key int32) {
	e.rates.shared[c].allow(e.nowT, key)
}

// storeAnswered resumes service request t's decisions once its store
// call has answered.
func (e *engine) storeAnswered(t *task) {
	kind := t.storeKind
	t.storeKind = 0
	e.store.answered(e.now, int(t.replica), kind, t.storeGen, t.storeOK)
	e.decided(t, kind, !t.storeOK)
}
