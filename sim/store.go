package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
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

// excluded records the end of a call made in generation gen that counts
// neither as a success nor as a failure: half-open, the probe's place is
// free again, as gobreaker's counts of valid requests leave it.
func (b *breaker) excluded(gen uint32) {
	if gen == b.gen && b.state == brHalfOpen {
		b.probing = false
	}
}

func (b *breaker) open(now int64, m *StoreModel) {
	b.state, b.until, b.failures = brOpen, now+int64(m.BreakerOpen), 0
	b.gen++
}

// The scripts a store call runs with go-redis's Script.Run (EVALSHA, then
// EVAL on NOSCRIPT), whose place in the store's script cache the
// storeCalls follow: redis_rate's GCRA script (a rate-limit decision) and
// Concurrency's scripts to take and to release a lease. noScript: a call
// that runs none through Script.Run (a renewal loads its script first, a
// cleanup runs ZREM).
const (
	scriptAllow = iota
	scriptAcquire
	scriptRelease
	noScript
)

// never is a time that does not come: a script not in the cache, a
// caller that never stops waiting.
const never = math.MaxInt64

// storeCalls models every replica's calls to the shared store
// (Service.Store).
type storeCalls struct {
	m        *StoreModel
	outages  []Span
	rng      []*rand.Rand // by replica: round trips
	breakers []breaker    // by replica, then storeKind-1
	calls    int64        // made, all replicas and clients together
	// cached is, by script, when its EVAL reached the store since the
	// last restart (StoreModel.Restarts), so that EVALSHA finds it; 0
	// before any restart, never while no EVAL of it was sent.
	cached   [noScript]int64
	restarts int // the outages whose restart cached has seen
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
	wait int64 // how long the client waits for it: its round trips, the budget, or until its caller left
	// lands is how long after it was made the call takes effect in the
	// store, when it does (-1: never, the store was out, or the budget
	// ended before its last round trip was sent). A call the client
	// gave up on still reaches the store and runs there, as Redis runs
	// a script whose caller stopped waiting.
	lands  int64
	gen    uint32 // the breaker's generation, to hand to answered
	ok     bool   // it succeeded within the budget
	called bool   // false: the breaker skipped it, and it never happened
	// cut: the caller's context ended before the answer (its caller
	// left): go-redis returns the context's error at once, and the
	// breaker counts the call neither as a success nor as a failure.
	cut bool
}

// late reports whether the call failed on the client but still takes
// effect in the store, after the client gave up.
func (c storeCall) late() bool { return c.called && !c.ok && c.lands > c.wait }

// call starts a call of client kind at replica r at now that runs script
// (one round trip, two on NOSCRIPT) within the time budget, for a caller
// that stops waiting cut after now (never: it does not). A call fails
// when the store is out or its round trips exceed the budget: the client
// then waits the budget.
func (s *storeCalls) call(now int64, r int, kind uint8, script int, cut int64) storeCall {
	return s.callWithin(now, r, kind, int64(s.m.Timeout), 1, script, cut)
}

// callWithin is call of trips round trips, one after the other (and one
// more on NOSCRIPT), within a time budget of budget: a renewal's is
// longer, as it is off the request path, and it takes two round trips.
func (s *storeCalls) callWithin(now int64, r int, kind uint8, budget int64, trips, script int, cut int64) storeCall {
	b := &s.breakers[2*r+int(kind)-1]
	if !b.allow(now) {
		return storeCall{}
	}
	s.calls++
	c := storeCall{gen: b.gen, called: true}
	out := inSpans(s.outages, time.Duration(now))
	if !out && s.m.Restarts {
		s.restarted(now)
	}
	stops := min(budget, cut) // when the client stops waiting, whatever the answer
	sent, noscript := true, false
	for k := 0; k < trips; k++ {
		// The client stopped waiting before the last round trip was
		// sent: the call never reaches the store.
		sent = sent && (k < trips-1 || c.lands <= stops)
		c.lands += int64(s.m.Latency.sample(s.rng[r]))
		if k == trips-1 && !noscript && !out && script != noScript && s.cached[script] > now+c.lands {
			// NOSCRIPT: Script.Run sends the script's source (EVAL),
			// which puts it back in the cache when it gets there.
			noscript = true
			trips++
		}
	}
	if noscript && sent {
		s.cached[script] = min(s.cached[script], now+c.lands)
	}
	c.wait, c.ok = c.lands, c.lands <= budget
	if !sent || out {
		c.ok, c.lands = false, -1
	}
	if !c.ok {
		c.wait = budget
	}
	if cut < c.wait {
		c.wait, c.ok, c.cut = cut, false, true
	}
	return c
}

// restarted empties the script cache once for each outage, a restart,
// that ended by now.
func (s *storeCalls) restarted(now int64) {
	for s.restarts < len(s.outages) && int64(s.outages[s.restarts].End()) <= now {
		s.restarts++
		for i := range s.cached {
			s.cached[i] = never
		}
	}
}

// answered records at now the answer to a call that call started; a call
// cut short by its caller is not counted (gobreaker's IsExcluded, as
// shedredis sets it for context.Canceled).
func (s *storeCalls) answered(now int64, r int, kind uint8, gen uint32, ok, cut bool) {
	b := &s.breakers[2*r+int(kind)-1]
	if cut {
		b.excluded(gen)
		return
	}
	b.done(gen, ok, now, s.m)
}

// askStore starts the store call that service request t's decision of
// kind needs, if any. It returns whether the decision falls back to the
// replica's share, or wait: t waits for the answer, and evStore resumes
// its decisions. Without a store model the store answers at once, unless
// it is out. The call ends early when t's caller leaves (t.storeCut).
func (e *engine) askStore(t *task, kind uint8) (fallback, wait bool) {
	if e.store == nil {
		return inSpans(e.sc.Service.StoreOutages, time.Duration(e.now)), false
	}
	if !e.callsStore(t, kind) {
		return false, false
	}
	cut := e.callerLeft(t)
	if cut == 0 {
		// t's context has ended: Acquire returns its error before it
		// calls the store, Decide's call fails at once and falls back.
		t.storeCut = true
		return true, false
	}
	script := scriptAllow
	if kind == storeLease {
		script = scriptAcquire
	}
	c := e.store.call(e.now, int(t.replica), kind, script, cut)
	op := record.StoreAllow
	if kind == storeLease {
		op = record.StoreAcquire
	}
	e.recordStoreCall(int(t.replica), op, c)
	switch {
	case !c.called:
		return true, false
	case c.wait == 0:
		e.store.answered(e.now, int(t.replica), kind, c.gen, c.ok, c.cut)
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
	if c.cut && kind == storeLease && t.leaseRec == 0 {
		// Acquire keeps the lease as an orphan (acquireCut), sent or not.
		t.leaseRec = e.newLeaseRec(int(t.replica), int(t.class), t.key) + 1
	}
	t.storeKind, t.storeGen, t.storeOK, t.storeCut = kind, c.gen, c.ok, c.cut
	e.schedule(e.now+c.wait, evStore, t, 0)
	return false, true
}

// recordStoreCall records replica r's call c of operation op, made now,
// when r is the recorded replica.
func (e *engine) recordStoreCall(r int, op record.StoreOp, c storeCall) {
	if k := e.replicas[r].keys; k != nil {
		k.storeCall(e.nowT, op, c)
	}
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
	e.store.answered(e.now, int(t.replica), kind, t.storeGen, t.storeOK, t.storeCut)
	e.decided(t, kind, !t.storeOK)
}

// acquireCut ends service request t, whose lease acquisition its
// caller's leaving cut short. Concurrency.Acquire keeps the lease as an
// orphan, for the next renewal that succeeds to remove what its script,
// still on its way, may add to the store (until then the lease counts
// for the fleet), and returns the context's error; ConcurrencyMiddleware
// answers 503 (Retry-After, do not retry) to nobody, and the handler
// never runs.
func (e *engine) acquireCut(t *task) {
	if t.leaseRec != 0 {
		e.leaseRefused(t.leaseRec - 1)
		t.leaseRec = 0
	}
	t.retryAfter = shedhttp.RetryAfterSeconds(keyConcurrencyRetryAfter) * int64(time.Second)
	e.finish(t, resShed)
}
