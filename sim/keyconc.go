package sim

import (
	"net/http"
	"slices"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// keyConcurrencyRetryAfter is the Retry-After of a 429 for a key at its
// concurrency limit: shedredis.LimitError.RetryAfter, a second, since
// leases are released when their work ends. (sim does not import
// shedredis, which would bring a Redis client to every user of sim.)
const keyConcurrencyRetryAfter = time.Second

// Where a service request's lease of its key counts (task.lease): in the
// replica's count (a per-replica limit, or the fallback share of a
// Shared one), in the fleet's, or both (a lease taken in fallback, which
// the fleet's count holds once the store is back). Zero: no lease.
const (
	leaseInReplica uint8 = 1 << iota
	leaseInFleet
)

// keyLeases counts the leases of the classes' key concurrency limits
// (Class.KeyConcurrency): the requests of each key in flight, in each
// replica and in the fleet. Counts live in dense slices made when the run
// starts, so that taking and releasing a lease allocates nothing.
type keyLeases struct {
	classes []classLeases // by class
	// booked: the leaseBook keeps the fleet's counts of Shared limits,
	// which acquire only checks.
	booked bool
}

// classLeases is one class's counts; a zero limit means no limit.
type classLeases struct {
	limit  int32
	shared bool
	// share is a Shared limit's fallback: limit/replicas rounded up, as
	// shedredis.Concurrency computes it.
	share int32
	// fleet counts by key every lease of a Shared limit, however taken.
	fleet []int32
	// replica counts by replica, then key: the leases each replica holds
	// without Shared; with Shared those it took in fallback, what
	// shedredis.Concurrency's local share is checked against (nil when
	// the store never fails).
	replica [][]int32
}

// newKeyLeases returns the counts of sc's key concurrency limits, or nil
// when no class has one.
func newKeyLeases(sc *Scenario) *keyLeases {
	if !slices.ContainsFunc(sc.Classes, func(c Class) bool { return c.KeyConcurrency != nil }) {
		return nil
	}
	s := &keyLeases{classes: make([]classLeases, len(sc.Classes))}
	for c := range sc.Classes {
		if k := sc.Classes[c].KeyConcurrency; k != nil {
			s.classes[c] = newClassLeases(k, sc.Classes[c].keyCount(), sc.Service.Replicas, sc.Service.storeFails())
		}
	}
	return s
}

// newClassLeases returns the counts of limit k over keys keys in a fleet
// of n replicas, whose store may fail when fails is set.
func newClassLeases(k *KeyConcurrency, keys, n int, fails bool) classLeases {
	cl := classLeases{limit: int32(k.Limit), shared: k.Shared}
	cl.share = int32((k.Limit-1)/n + 1) // rounded up, at least 1, as shedredis's
	if k.Shared {
		cl.fleet = make([]int32, keys)
		if !fails {
			return cl // never a fallback
		}
	}
	cl.replica = make([][]int32, n)
	for r := range cl.replica {
		cl.replica[r] = make([]int32, keys)
	}
	return cl
}

// acquire takes a lease of key for a request of class c at replica r, at
// time at from the start, and returns where it counts (zero for a class
// without a limit) or false when the key is at its limit there. When
// fallback (the store could not be used: an outage, a failed call, an
// open breaker) a Shared limit is decided on the replica's fallback count
// against its share; the lease counts in the fleet too, where the
// renewer writes it once the store is back (at once, unless the
// leaseBook keeps the fleet's counts: then from its next renewal).
func (s *keyLeases) acquire(fallback bool, r, c int, key int32) (uint8, bool) {
	cl := &s.classes[c]
	switch {
	case cl.limit == 0:
		return 0, true
	case !cl.shared:
		return leaseInReplica, take(&cl.replica[r][key], cl.limit)
	case !fallback && s.booked:
		return leaseInFleet, cl.fleet[key] < cl.limit
	case !fallback:
		return leaseInFleet, take(&cl.fleet[key], cl.limit)
	}
	if !take(&cl.replica[r][key], cl.share) {
		return 0, false
	}
	if !s.booked {
		cl.fleet[key]++
	}
	return leaseInReplica | leaseInFleet, true
}

// count returns the leases of key that acquire judged a request by: the
// fleet's, or replica r's (per replica, or on its share in fallback).
func (s *keyLeases) count(fallback bool, r, c int, key int32) int {
	cl := &s.classes[c]
	if !cl.shared || fallback {
		return int(cl.replica[r][key])
	}
	return int(cl.fleet[key])
}

// recordKeyCapped records service request t, refused at its key's cap,
// when its replica is recorded: as shedredis.ConcurrencyMiddleware with
// a Recorder records it, a refusal on sight (record.KindRefused) with
// shed.ReasonKeyConcurrency, the key's hash and the leases counted.
func (e *engine) recordKeyCapped(t *task, fallback bool) {
	k := e.replicas[t.replica].keys
	if k == nil || k.rec == nil {
		return
	}
	c := shed.Class(t.class)
	if !k.rec.Refuse(c) {
		return
	}
	k.rec.Add(record.Record{Kind: record.KindRefused, Time: e.nowT, Class: c, Reason: shed.ReasonKeyConcurrency, Status: http.StatusTooManyRequests,
		InFlight: e.leases.count(fallback, int(t.replica), int(t.class), t.key), Key: e.recordedKey(t)})
	if k.rec.Pending() >= k.rec.Capacity()/2 {
		k.rec.Flush() // as the recording observer does: nothing dropped
	}
}

// take adds one to *n if it is under limit, and reports whether it was.
func take(n *int32, limit int32) bool {
	if *n >= limit {
		return false
	}
	*n++
	return true
}

// release ends a lease that acquire returned as held.
func (s *keyLeases) release(r, c int, key int32, held uint8) {
	cl := &s.classes[c]
	if held&leaseInFleet != 0 {
		cl.fleet[key]--
	}
	if held&leaseInReplica != 0 {
		cl.replica[r][key]--
	}
}

// storeFails reports whether the store of Shared limits may fail, so
// that replicas need their fallback shares: it has outages, or its calls
// are modelled (a round trip may exceed the time budget).
func (s *Service) storeFails() bool { return len(s.StoreOutages) > 0 || s.Store != nil }

// inSpans reports whether at falls in one of spans (ends excluded).
func inSpans(spans []Span, at time.Duration) bool {
	for _, o := range spans {
		if at >= o.At && at < o.End() {
			return true
		}
	}
	return false
}

// takeLease takes service request t's lease of its key at its replica, as
// shedredis.ConcurrencyMiddleware does before the shedkit middleware (and
// so before its rate limit and its limiter) sees the request. A key at
// its limit is answered as the middleware answers it: 429 with a
// Retry-After of keyConcurrencyRetryAfter and "do not retry", counted as
// the rate limits' 429s are. The replica's rate observer is not told:
// the shedkit middleware's Observer and Recorder sit inside, and never
// see it; a recorded replica's recorder records it as the middleware's
// own Recorder does (recordKeyCapped). It reports whether t goes on.
func (e *engine) takeLease(t *task, fallback bool) bool {
	late := t.leaseRec - 1 // a timed-out acquisition's record (askStore), or -1
	t.leaseRec = 0
	held, ok := e.leases.acquire(fallback, int(t.replica), int(t.class), t.key)
	if !ok {
		e.recordKeyCapped(t, fallback)
		if late >= 0 {
			e.leaseRefused(late)
		}
		e.rec.rateLimited(t.class)
		t.retryAfter = shedhttp.RetryAfterSeconds(keyConcurrencyRetryAfter) * int64(time.Second)
		e.finish(t, resShed)
		return false
	}
	t.lease = held
	if e.book != nil && held&leaseInFleet != 0 {
		t.leaseRec = e.leaseTaken(int(t.replica), int(t.class), t.key, fallback, late) + 1
		t.lease = held &^ leaseInFleet // the book counts it for the fleet
	}
	return true
}

// releaseLease ends service request t's lease, if it holds one, once: t
// ends, whatever its answer, as the middleware's deferred Release runs
// when the handler returns. It returns how long the release's store call
// takes, which t's response waits for.
func (e *engine) releaseLease(t *task) (wait int64) {
	if t.leaseRec != 0 {
		wait = e.leaseReleased(t.leaseRec - 1)
		t.leaseRec = 0
	}
	if t.lease != 0 {
		e.leases.release(int(t.replica), int(t.class), t.key, t.lease)
		t.lease = 0
	}
	return wait
}
