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

// call starts a call of client kind at replica r at now. It returns
// false when the breaker skips it (the decision falls back at once);
// else how long the call takes, whether it succeeds, and the breaker's
// generation to hand to answered. A call fails when the store is out or
// its round trip exceeds the time budget: it then takes the budget.
func (s *storeCalls) call(now int64, r int, kind uint8) (wait int64, ok bool, gen uint32, called bool) {
	return s.callWithin(now, r, kind, int64(s.m.Timeout))
}

// callWithin is call with a time budget of budget: the renewals' is
// longer, as they are off the request path.
func (s *storeCalls) callWithin(now int64, r int, kind uint8, budget int64) (wait int64, ok bool, gen uint32, called bool) {
	b := &s.breakers[2*r+int(kind)-1]
	if !b.allow(now) {
		return 0, false, 0, false
	}
	s.calls++
	wait = int64(s.m.Latency.sample(s.rng[r]))
	ok = wait <= budget && !inSpans(s.outages, time.Duration(now))
	if !ok {
		wait = budget
	}
	return wait, ok, b.gen, true
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
	d, ok, gen, called := e.store.call(e.now, int(t.replica), kind)
	switch {
	case !called:
		return true, false
	case d == 0:
		e.store.answered(e.now, int(t.replica), kind, gen, ok)
		return !ok, false
	}
	t.storeKind, t.storeGen, t.storeOK = kind, gen, ok
	e.schedule(e.now+d, evStore, t, 0)
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

// storeAnswered resumes service request t's decisions once its store
// call has answered.
func (e *engine) storeAnswered(t *task) {
	kind := t.storeKind
	t.storeKind = 0
	e.store.answered(e.now, int(t.replica), kind, t.storeGen, t.storeOK)
	e.decided(t, kind, !t.storeOK)
}
