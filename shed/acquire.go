package shed

import (
	"context"
	"time"
)

// Acquire admits req, waiting in the class's queue when the class has one
// and capacity is short. It returns a permit, a *Rejection (for example
// ReasonQueueFull, ReasonQueueTimeout, ReasonDeadline), or ctx's error if
// ctx ends first. The context's deadline is the request's deadline unless
// req.Deadline is set. A request whose deadline has already passed gets a
// ReasonDeadline rejection (counted and observed as one, but for a dry
// run, which returns ctx's error as for any ended ctx); a ctx that ended
// otherwise (cancelled, or a deadline that only bounds the wait, earlier
// than req.Deadline) gets its error. A request still queued when its
// deadline passes gets a ReasonQueueTimeout rejection, whether the
// limiter or ctx saw the deadline first.
//
// When ctx ends at the same moment a permit is granted, the permit is
// released (Ignored) and ctx's error is returned: the caller never has to
// release a permit it did not receive.
func (l *Limiter) Acquire(ctx context.Context, req Request) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, l.ended(ctx, req, err)
	}
	if req.Deadline.IsZero() {
		if d, ok := ctx.Deadline(); ok {
			req.Deadline = d
		}
	}
	p, err := l.acquire(time.Time{}, false, req, nil, true, unchecked)
	// The second pass takes the first one's deadline verdict: checked
	// again, a probe claimed by the first would reject this request. A
	// probe is timed from an explicit time, as deadlineFirst does.
	now, hasNow, v := time.Time{}, false, inTime
	switch err {
	case errNeedWaiter:
	case errNeedWaiterProbe:
		now, hasNow, v = l.clock(), true, probing
	default:
		return p, err
	}
	w := getBlockingWaiter()
	// A panicking Observer (see Observer) may unwind through Acquire, and
	// so may a panicking LimitSource.Limit or Config.Clock as the wait
	// ends: the limiter stays consistent, and this function makes sure
	// the waiter is neither reused while a notification may still reach
	// its channel, nor left in the queue, nor left holding a permit that
	// nobody will receive.
	queuing, waiting, reuse := true, false, false
	defer func() {
		switch {
		case reuse:
			putBlockingWaiter(w)
		case queuing && w.permit.Valid():
			// The Observer panicked as w was queued, and w was granted
			// before the limiter could take it out again.
			p := w.permit
			p.Release(Ignored)
		case waiting:
			l.abandon(w)
		}
	}()
	p, err = l.acquire(now, hasNow, req, w, true, v)
	queuing = false
	if err != errQueued {
		reuse = true
		return p, err
	}
	waiting = true
	// The wait is measured on the limiter's clock, which may be a fake one.
	timer := time.NewTimer(w.patience)
	defer timer.Stop()
	select {
	case <-w.ch:
		waiting, reuse = false, true
		return w.Result()
	case <-timer.C:
		// The clock may be a fake one: expire this waiter by identity.
		l.removeWaiter(l.clock(), w, ReasonQueueTimeout, true)
		<-w.ch
		waiting, reuse = false, true
		return w.Result()
	case <-ctx.Done():
		granted, p, err := l.leaveQueue(ctx, req, w)
		waiting, reuse = false, true
		if granted.Valid() {
			granted.Release(Ignored) // granted as ctx ended: never received
		}
		return p, err
	}
}

// leaveQueue ends the wait of Acquire's waiter w for req once ctx ended:
// a queue timeout if the request's deadline ended it (see deadlineEnded),
// else ctx's error, with the permit granted meanwhile, if any, for
// Acquire to release once w is out of its hands.
func (l *Limiter) leaveQueue(ctx context.Context, req Request, w *Waiter) (granted, p Permit, err error) {
	reason := deadlineEnded(ctx, req)
	if l.removeWaiter(l.clock(), w, reason, true) {
		if reason == ReasonNone {
			return Permit{}, Permit{}, ctx.Err()
		}
		<-w.ch // the rejection removeWaiter decided
		p, err := w.Result()
		return Permit{}, p, err
	}
	<-w.ch
	if p, err := w.Result(); err == nil {
		granted = p
	}
	return granted, Permit{}, ctx.Err()
}

// deadlineEnded returns the reason to end the wait of req for, once its
// ctx ended: ReasonQueueTimeout when ctx's deadline, at or after the
// request's, has passed and ended it, since the request then waited until
// its deadline; else ReasonNone, a cancellation (a context that ends
// before the deadline it reports, as shed/fanout's PermitWait does,
// included). Acquire's timer says the same a moment later, or later still
// on a clock that lags the context's: counted as a cancellation, that
// wait read as a caller that gave up, whichever timer fired first.
func deadlineEnded(ctx context.Context, req Request) Reason {
	d, ok := ctx.Deadline()
	if ok && ctx.Err() == context.DeadlineExceeded && !d.Before(req.Deadline) && !time.Now().Before(d) {
		return ReasonQueueTimeout
	}
	return ReasonNone
}

// abandon ends the wait of Acquire's waiter w when a panic (of
// Config.Clock or LimitSource.Limit as the wait ended, or of the Observer)
// unwinds through Acquire's wait: left queued, w would be granted a permit
// nobody receives. It reads neither the clock nor the limit: w is removed
// as cancelled, and the waiters it held up are granted at the next
// release. If w's outcome was decided, it is awaited and a permit w got is
// released; if w was cancelled already, nothing is left to do.
func (l *Limiter) abandon(w *Waiter) {
	l.mu.Lock()
	if w.queued && w.l == l {
		l.freezeLocked()
		l.removeLocked(w)
		l.thawLocked()
		l.mu.Unlock()
		l.counts[w.req.Class].cancelled.Add(1)
		return
	}
	decided := w.err != nil || w.permit.Valid()
	l.mu.Unlock()
	if !decided {
		return // cancelled: no outcome comes
	}
	<-w.ch
	if p, err := w.Result(); err == nil {
		p.Release(Ignored)
	}
}

// ended returns the error of Acquire for a request whose ctx ended (with
// err) before it asked: a ReasonDeadline rejection when the request's
// deadline (req.Deadline, else ctx's) has passed, since that is what the
// limiter would have decided, and err for a cancellation, a ctx that only
// bounded the wait (its deadline is before the request's), a dry run or a
// malformed request.
func (l *Limiter) ended(ctx context.Context, req Request, err error) error {
	if err != context.DeadlineExceeded || l.dryRun {
		return err
	}
	dl := req.Deadline
	if dl.IsZero() {
		dl, _ = ctx.Deadline()
	}
	now := l.clock()
	if dl.IsZero() || now.Before(dl) {
		return err
	}
	cost, cerr := l.check(req)
	if cerr != nil {
		return cerr
	}
	if l.drainStarted.Load() {
		return l.reject(now, req.Class, cost, ReasonDraining, l.rej.max, false)
	}
	return l.reject(now, req.Class, cost, ReasonDeadline, 0, false)
}

// DrainReport says what was still in flight when Drain returned.
type DrainReport struct {
	// InFlight and InFlightCost are the work still running; zero when
	// everything finished in time.
	InFlight     int
	InFlightCost int64
	// Classes breaks InFlight down by class (name and count).
	Classes []ClassSnapshot
}

// DrainAt starts draining at now: from then on every request is rejected
// with ReasonDraining (also in dry-run mode) and every queued request is
// rejected likewise. Work in flight continues. It is the explicit-time
// core of Drain; draining cannot be undone.
func (l *Limiter) DrainAt(now time.Time) {
	limit := l.limit()
	var done waiterList
	l.mu.Lock()
	l.freezeLocked()
	if !l.draining {
		l.draining = true
		l.drainStarted.Store(true)
		l.drained = make(chan struct{})
		for c := range l.cfg {
			for w := l.queues[c].head; w != nil; {
				next := w.next
				l.timeoutLocked(now, w, ReasonDraining, limit, &done)
				w = next
			}
		}
		if inFlightOf(l.state.Load()) == 0 {
			close(l.drained)
			l.drained = nil
		}
	}
	l.mu.Unlock()
	l.notify(&done)
}

// Drain stops admitting (see DrainAt) and waits until the work in flight
// finishes or ctx ends. It reports what was still running; the error is
// ctx's when the work did not finish in time.
func (l *Limiter) Drain(ctx context.Context) (DrainReport, error) {
	if l.clock == nil {
		return DrainReport{}, nil // the zero Limiter: nothing to drain
	}
	l.DrainAt(l.clock())
	l.mu.Lock()
	ch := l.drained
	l.mu.Unlock()
	var err error
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	snap := l.Snapshot()
	rep := DrainReport{InFlight: snap.InFlight, InFlightCost: snap.InFlightCost}
	if rep.InFlight > 0 {
		rep.Classes = snap.Classes
	}
	return rep, err
}
