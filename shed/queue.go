package shed

import (
	"sync"
	"time"
)

// Waiter is a request waiting in a Limiter's queue, for the explicit-time
// API (EnqueueAt). The blocking Acquire manages its own waiters.
//
// A Waiter may be reused once its outcome was delivered or it was
// cancelled. Its fields are guarded by the limiter it is queued in.
type Waiter struct {
	notify func(*Waiter)

	l        *Limiter
	req      Request
	cost     int64
	enqueued time.Time
	deadline time.Time
	// patience is deadline less enqueued as queued: what Acquire's timer
	// waits. It is never changed while queued (rebaseLocked moves
	// enqueued and deadline), so Acquire may read it without the lock.
	patience time.Duration
	prev     *Waiter
	next     *Waiter
	decided  time.Time
	queued   bool
	// probe: the request claimed its class's deadline probe (see
	// deadline.go) at probeClaim; the probe starts when it is granted,
	// and is given back if w leaves the queue otherwise.
	probe      bool
	probeClaim int64
	done       *Waiter // link in a waiterList of waiters to notify

	permit Permit
	err    error

	ch chan struct{} // blocking waiters only

	// tenant is the entry of the request's tenant while it is queued.
	tenant *tenantEntry
}

// NewWaiter returns a Waiter whose outcome is delivered by calling notify,
// exactly once per EnqueueAt that queued it (unless CancelAt removed it).
// notify is called outside the limiter's lock, on the goroutine whose call
// decided the outcome; it may enqueue the waiter again. It must not panic;
// if it does, the other waiters decided by the same call are still
// notified and the panic propagates to that call's caller. EnqueueAt
// refuses a waiter whose notify is nil.
func NewWaiter(notify func(*Waiter)) *Waiter { return &Waiter{notify: notify} }

// Result returns the outcome delivered to the waiter: a permit, or a
// *Rejection (ReasonQueueTimeout, ReasonDraining, or ReasonTenantShare
// when its tenant is over its share as its turn comes).
func (w *Waiter) Result() (Permit, error) { return w.permit, w.err }

// Request returns the request the waiter was queued with.
func (w *Waiter) Request() Request { return w.req }

// Deadline returns when the waiter times out: its enqueue time plus the
// class's MaxWait, or, if earlier, the last moment from which the request
// can still finish before its deadline: the deadline less
// Config.DeadlineMargin times the expected service time of its class, as
// estimated when it was queued. A simulation calls ExpireAt at that time.
// If the estimate rises while w waits, w may be rejected earlier, when its
// turn comes (ReasonQueueTimeout): see lateToStart.
// If the limiter sees its clock go back while w waits, the time before the
// step counts as no time passed: the deadline moves back by as much as the
// clock went back before the enqueue time.
func (w *Waiter) Deadline() time.Time { return w.deadline }

// rebaseLocked counts a clock that went back to now, before w was queued,
// as no time passed: w keeps the wait it had left when queued, instead of
// staying queued (and its class marked as short) for the size of the step.
func (w *Waiter) rebaseLocked(now time.Time) {
	if d := w.enqueued.Sub(now); d > 0 {
		w.enqueued = now
		w.deadline = w.deadline.Add(-d)
	}
}

// waitQueue is an intrusive doubly linked list of the waiters of one class.
type waitQueue struct {
	head, tail *Waiter
	n          int
}

func (q *waitQueue) push(w *Waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
}

func (q *waitQueue) remove(w *Waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}

// waiterList collects waiters whose outcome was decided under the lock, to
// be notified after it is released.
type waiterList struct{ head, tail *Waiter }

func (d *waiterList) push(w *Waiter) {
	w.done = nil
	if d.tail != nil {
		d.tail.done = w
	} else {
		d.head = w
	}
	d.tail = w
}

// enqueueLocked queues w for req; v is the verdict of its deadline check,
// e the entry of its tenant (already counting it as queued), if any.
func (l *Limiter) enqueueLocked(now time.Time, req Request, cost int64, w *Waiter, v verdict, e *tenantEntry) {
	c := req.Class
	w.l, w.req, w.cost, w.enqueued, w.tenant = l, req, cost, now, e
	w.deadline = l.waiterDeadline(now, req, cost, l.cfg[c].MaxWait, v)
	w.patience = w.deadline.Sub(now)
	w.permit, w.err, w.queued = Permit{}, nil, true
	w.probe = v == probing
	if w.probe {
		// Claimed by this very request, just now: no other claim can
		// come for a service time.
		w.probeClaim = l.counts[c].probeClaim.Load()
	}
	l.queues[c].push(w)
	l.queued++
}

// removeLocked takes w out of the queue. A probe leaving unadmitted
// (timed out, cancelled, rejected) measured nothing: it is given back.
func (l *Limiter) removeLocked(w *Waiter) {
	l.queues[w.req.Class].remove(w)
	l.queued--
	w.queued = false
	if w.probe {
		w.probe = false
		l.giveBackProbe(w.req.Class, w.probeClaim)
	}
	if e := w.tenant; e != nil {
		w.tenant = nil
		l.tenantUnqueue(e)
	}
}

// timeoutLocked removes w with a rejection for reason.
func (l *Limiter) timeoutLocked(now time.Time, w *Waiter, reason Reason, limit uint64, done *waiterList) {
	w.rebaseLocked(now)
	w.decided = now
	l.removeLocked(w)
	hint := l.rej.max
	if reason != ReasonDraining {
		hint = l.hint(l.queued, limit)
	}
	w.err = l.rej.get(reason, w.req.Class, hint)
	done.push(w)
}

// grantLocked admits waiters while capacity allows: classes in priority
// order, FIFO (or LIFO) within a class. A waiter whose deadline has
// passed, or that can no longer finish by its class's current estimate
// (lateToStart), is rejected instead of admitted. The state must be
// frozen. limit is read before taking the lock, like every call into the
// LimitSource: a source that panics must not leave the mutex locked. Demand that has run out is
// dropped here only once admissions have stopped (expireQuietDemandLocked).
func (l *Limiter) grantLocked(now time.Time, limit uint64, done *waiterList) {
	l.expireQuietDemandLocked(now)
	if l.queued == 0 {
		return
	}
	for c := range l.cfg {
		q := &l.queues[c]
		for q.n > 0 {
			w := q.head
			if l.cfg[c].LIFO {
				w = q.tail
			}
			w.rebaseLocked(now)
			if !now.Before(w.deadline) || l.lateToStart(now, w) {
				l.timeoutLocked(now, w, ReasonQueueTimeout, limit, done)
				continue
			}
			s := l.state.Load()
			if !l.fitsLocked(s, Class(c), w.cost, limit) {
				break
			}
			var h tenantHold
			if e := w.tenant; e != nil {
				r := l.roomLocked(now, s, Class(c), limit)
				r.waiters = q.n > 1
				var fair bool
				if h, fair = l.tenantGrantLocked(e, w.cost, r); !fair {
					l.timeoutLocked(now, w, ReasonTenantShare, limit, done)
					continue
				}
				w.tenant = nil // counted in flight now
			}
			probe := w.probe
			w.probe = false // admitted: the probe keeps its claim
			l.removeLocked(w)
			l.state.Add(delta(w.cost))
			w.permit = l.newPermit(now, true, Class(c), w.cost, inFlightOf(s)+1, now.Sub(w.enqueued), ReasonNone, h)
			if probe {
				l.startedProbe(&w.permit)
			}
			done.push(w)
		}
	}
}

// notify counts, reports and delivers the outcomes decided under the lock.
// Every waiter is notified even if the Observer panics: the waiters not yet
// notified are then notified without further events, and the panic goes
// on to the caller (see Observer).
func (l *Limiter) notify(d *waiterList) {
	if d.head == nil {
		return
	}
	// Count first: no user code runs here, so the counts are complete
	// whatever happens below.
	for w := d.head; w != nil; w = w.done {
		if w.err != nil {
			rej := w.err.(*Rejection)
			l.counts[rej.Class].rejected[rej.Reason].Add(1)
		} else {
			l.counts[w.permit.class()].afterWait.Add(1)
		}
	}
	l.deliver(d.head, l.observer)
}

// deliver reports (when o is not nil) and notifies the waiters from w on.
// If o or a notify function panics, the deferred call notifies the rest,
// unobserved, while the panic unwinds.
func (l *Limiter) deliver(w *Waiter, o Observer) {
	defer func() {
		if w != nil {
			l.deliver(w, nil)
		}
	}()
	for w != nil {
		if o != nil {
			if w.err != nil {
				rej := w.err.(*Rejection)
				o.Observe(Event{Kind: EventRejected, Time: w.decided, Class: rej.Class, Reason: rej.Reason, Cost: w.cost, Wait: w.decided.Sub(w.enqueued), Queued: true, InFlight: l.InFlight()})
			} else {
				l.observeAdmitted(o, w.permit, true)
			}
		}
		cur := w
		w = cur.done
		cur.done = nil
		cur.notify(cur)
	}
}

// kick hands capacity that was just returned to the state word to waiters,
// and completes a drain when nothing is left in flight.
func (l *Limiter) kick(now time.Time, hasNow bool) {
	if !hasNow {
		now = l.clock()
	}
	limit := l.limit()
	var done waiterList
	l.mu.Lock()
	l.freezeLocked()
	l.grantLocked(now, limit, &done)
	if l.draining && l.drained != nil && inFlightOf(l.state.Load()) == 0 {
		close(l.drained)
		l.drained = nil
	}
	l.thawLocked()
	l.mu.Unlock()
	l.notify(&done)
}

// CancelAt removes a queued waiter (its caller gave up) and reports whether
// it was still queued. If it was not, its outcome has been or is being
// delivered: a waiter that was granted a permit must release it.
func (l *Limiter) CancelAt(now time.Time, w *Waiter) bool {
	return l.removeWaiter(now, w, ReasonNone, true)
}

// removeWaiter takes w out of the queue: cancelled (reason None, reported
// as an EventCancelled when observe is set) or rejected with reason.
// Removing a waiter can unblock lower classes.
func (l *Limiter) removeWaiter(now time.Time, w *Waiter, reason Reason, observe bool) bool {
	limit := l.limit()
	var done waiterList
	l.mu.Lock()
	if !w.queued || w.l != l {
		l.mu.Unlock()
		return false
	}
	l.freezeLocked()
	w.rebaseLocked(now)
	if reason == ReasonNone {
		l.removeLocked(w)
	} else {
		l.timeoutLocked(now, w, reason, limit, &done)
	}
	l.grantLocked(now, limit, &done)
	l.thawLocked()
	l.mu.Unlock()
	if reason == ReasonNone {
		l.counts[w.req.Class].cancelled.Add(1)
	}
	// Deliver the outcomes first: a panicking Observer must not keep the
	// waiters just granted from learning them.
	l.notify(&done)
	if reason == ReasonNone {
		if o := l.observer; o != nil && observe {
			o.Observe(Event{Kind: EventCancelled, Time: now, Class: w.req.Class, Cost: w.cost, Wait: now.Sub(w.enqueued), Queued: true, InFlight: l.InFlight()})
		}
	}
	return true
}

// ExpireAt rejects every waiter whose deadline is at or before now with
// ReasonQueueTimeout. The blocking API expires its own waiters with
// timers; a simulation calls ExpireAt at the waiters' deadlines.
func (l *Limiter) ExpireAt(now time.Time) {
	limit := l.limit()
	var done waiterList
	l.mu.Lock()
	if l.queued == 0 {
		l.mu.Unlock()
		return
	}
	l.freezeLocked()
	for c := range l.cfg {
		for w := l.queues[c].head; w != nil; {
			next := w.next
			w.rebaseLocked(now)
			if !now.Before(w.deadline) {
				l.timeoutLocked(now, w, ReasonQueueTimeout, limit, &done)
			}
			w = next
		}
	}
	l.grantLocked(now, limit, &done)
	l.thawLocked()
	l.mu.Unlock()
	l.notify(&done)
}

// Blocking waiters are pooled with their channel and notify function.
var waiterPool = sync.Pool{New: func() any {
	w := &Waiter{ch: make(chan struct{}, 1)}
	w.notify = func(w *Waiter) { w.ch <- struct{}{} }
	return w
}}

func getBlockingWaiter() *Waiter { return waiterPool.Get().(*Waiter) }

func putBlockingWaiter(w *Waiter) {
	w.permit, w.err, w.l, w.req = Permit{}, nil, nil, Request{}
	waiterPool.Put(w)
}
