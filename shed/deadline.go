package shed

import (
	"math"
	"time"
)

// Deadlines
//
// A request that cannot finish before its caller stops waiting wastes the
// capacity it holds: the caller is gone when the answer comes. The limiter
// therefore rejects at the door (ReasonDeadline) a request whose deadline
// has passed, and one whose remaining time is at most its expected queue
// wait plus Config.DeadlineMargin times its class's expected service time.
// A queued request stops waiting once too little time is left for that
// service time: by the estimate when it was queued (its waiter deadline),
// and again by the current one when its turn comes, since samples that
// came during its wait may have raised it.
//
// The expected service time of a class tracks the median of its recent
// service times (the time timed permits were held, successes and drops):
// each sample moves the estimate by a tenth towards itself, up when it is
// longer, down when it is shorter, whatever its size. The estimate settles
// where as many samples fall above as below, the median, and a few very
// slow requests cannot drag it up the way they drag up a mean. That is
// what makes the check safe: with a margin of at most 1, a request that is
// rejected had at most an even chance of finishing in time had it started
// at once, whatever the shape of the latency distribution. Drops count
// because their latency is a lower bound of the service time (a timeout)
// or a fast failure: both err towards admitting. Each class has its own
// estimate, per unit of cost with Config.ServiceTimePerCost. A sample
// costs a comparison, a multiplication and two atomic stores.
//
// An estimate only moves with samples, and a class whose every request is
// rejected for its deadline produces none: an estimate left high by a past
// slowdown would then shut the class out for good. So once the class has
// refused probeAfter requests for their deadline since its last probe, and
// no sample (or probe) has come for the expected service time itself, one
// request that the estimate alone would reject is admitted as a probe, and
// timed. At most about one probe per class is in flight at a time, so the
// work wasted on probes while the service really is that slow stays under
// one slot. A probe that comes back faster than the estimate replaces it at
// once: the estimate was stale, and the class must not wait for tens of
// probes to be let in again. A probe that measured nothing, because it
// was rejected for another reason (the limit, a full queue) or left the
// queue without being admitted (timed out, cancelled, draining), is given
// back, so that the class's next request may be the probe. A probe that
// was admitted, at once or from the queue, keeps its claim even when it is
// released as Ignored: the next probe is due a service time after it.

// serviceStep is the factor by which one sample moves the estimate: it
// reaches a ten-fold change of the service time in 24 samples, and jitters
// by about a tenth around a steady median.
const serviceStep = 1.1

// probeAfter is how many deadline rejections a class must have made since
// its last probe before another one: a class that refuses nothing is not
// shut out, and a lone request is never let through on a stale estimate
// only because traffic is light.
const probeAfter = 3

// minServiceSample is the smallest service time a sample counts as: the
// estimate must stay positive to move by factors.
const minServiceSample = time.Nanosecond

// verdict is the outcome of the deadline check before admission.
type verdict uint8

const (
	inTime    verdict = iota // no deadline, or time enough
	tooLate                  // reject with ReasonDeadline
	probing                  // too late by the estimate, admitted as a probe
	unchecked                // the check has not run yet
)

// serviceEstimate returns the expected service time of class c (per unit
// of cost with perCost) in nanoseconds, 0 when unknown.
func (l *Limiter) serviceEstimate(c Class) float64 {
	return math.Float64frombits(l.counts[c].service.Load())
}

// expectedService returns the expected service time of a request of class
// c and the given cost, in nanoseconds, 0 when unknown.
func (l *Limiter) expectedService(c Class, cost int64) float64 {
	est := l.serviceEstimate(c)
	if l.perCost {
		est *= float64(cost)
	}
	return est
}

// recordService moves the estimate of class c towards the service time d
// of a timed permit admitted at start and released at now (nanoseconds
// since the epoch).
// Concurrent updates may lose one another: the estimate only needs to be
// about right.
func (l *Limiter) recordService(c Class, d time.Duration, cost int64, start, now int64) {
	x := float64(max(d, minServiceSample))
	if l.perCost {
		x /= float64(max(cost, 1))
	}
	cc := &l.counts[c]
	switch old := math.Float64frombits(cc.service.Load()); {
	case old == 0:
		// The first sample is the estimate.
	case cc.probeAt.Load() == start+1 && cc.probeAt.CompareAndSwap(start+1, 0):
		// The probe (or work admitted at the same instant): when it was
		// faster, the estimate was stale.
		x = min(x, old*serviceStep)
	case x > old:
		x = min(old*serviceStep, x)
	default:
		x = max(old/serviceStep, x)
	}
	cc.service.Store(math.Float64bits(x))
	cc.serviceAt.Store(now)
}

// checkDeadline decides, at now, whether req (with a deadline) can finish
// in time if it waits wait before it starts. A passed deadline is always
// too late. When only the service-time estimate makes it too late and the
// class has had no sample for that long, it claims the class's probe.
func (l *Limiter) checkDeadline(now time.Time, req Request, cost int64, wait time.Duration) verdict {
	left := req.Deadline.Sub(now)
	if left <= wait {
		return tooLate
	}
	if l.margin == 0 {
		return inTime
	}
	svc := l.expectedService(req.Class, cost)
	if float64(left) > float64(wait)+l.margin*svc {
		return inTime
	}
	return l.probe(now, req.Class, svc)
}

// probe returns probing when class c may let one request that is too late
// by the estimate svc through as a probe (see probeAfter), and claims the
// probe; else tooLate.
func (l *Limiter) probe(now time.Time, c Class, svc float64) verdict {
	cc := &l.counts[c]
	refused := cc.rejected[ReasonDeadline].Load()
	mark := cc.probeMark.Load()
	if refused-mark < probeAfter {
		return tooLate
	}
	t := int64(now.Sub(l.epoch))
	last := cc.serviceAt.Load()
	if t < last {
		// The clock went back: no time passed since the last sample, and
		// the next probe is due one service time from now, not once the
		// clock has caught up with the step.
		cc.serviceAt.CompareAndSwap(last, t)
		return tooLate
	}
	if float64(t-last) < svc || !cc.serviceAt.CompareAndSwap(last, t) {
		return tooLate
	}
	cc.probeClaim.Store(t)
	cc.probeSince.Store(last)
	cc.probeWas.Store(mark)
	cc.probeMark.Store(refused)
	return probing
}

// giveBackProbe gives back class c's probe claimed at claim (nanoseconds
// since the epoch) when the request that claimed it measured nothing: it
// was rejected for another reason (the limit, a full queue) or left the
// queue unadmitted. The class's next request may then be the probe at
// once, not a service time and probeAfter deadline rejections later.
// Nothing is given back when a sample, or a later claim, came since: the
// CAS on serviceAt fails then, so a probe never gives back another's.
func (l *Limiter) giveBackProbe(c Class, claim int64) {
	cc := &l.counts[c]
	if cc.serviceAt.CompareAndSwap(claim, cc.probeSince.Load()) {
		cc.probeMark.Store(cc.probeWas.Load())
	}
}

// probeOutcome gives back class c's probe when the request that claimed
// it was rejected (err): not admitted, not queued (a queued probe is given
// back as it leaves the queue, see removeLocked), and not about to ask
// again with a waiter (errNeedWaiterProbe). The claim is the class's last
// one: the next comes a service time later at the earliest, long after a
// rejection that takes no wait. It is kept out of line: the admission
// paths only test the verdict.
//
//go:noinline
func (l *Limiter) probeOutcome(c Class, err error) {
	if err != nil && err != errQueued && err != errNeedWaiterProbe {
		l.giveBackProbe(c, l.counts[c].probeClaim.Load())
	}
}

// startedProbe records that p, admitted with the verdict probing, is its
// class's probe, so that its sample is known as the probe's. It goes by
// the permit's start, not by the time the probe was claimed: a probe that
// queued starts when it is granted, and Acquire's second pass reads the
// clock again.
func (l *Limiter) startedProbe(p *Permit) {
	l.counts[p.class()].probeAt.Store(p.start + 1)
}

// tooLateToQueue reports whether req, expected to wait wait in the queue,
// would miss its deadline. A probe is judged by the queue wait alone.
func (l *Limiter) tooLateToQueue(now time.Time, req Request, cost int64, wait time.Duration, v verdict) bool {
	left := req.Deadline.Sub(now)
	if left <= wait {
		return true
	}
	return v != probing && l.margin > 0 && float64(left) <= float64(wait)+l.margin*l.expectedService(req.Class, cost)
}

// lateToStart reports whether queued w, whose turn came at now, can no
// longer finish before its deadline by its class's current expected
// service time (times the margin). Its waiter deadline holds the estimate
// from when it was queued, and samples that came during its wait may have
// raised it: a slot granted to w then would be wasted, as it would have
// been at the door. A probe is exempt: it waits until the deadline itself
// (see waiterDeadline).
func (l *Limiter) lateToStart(now time.Time, w *Waiter) bool {
	if l.margin == 0 || w.probe || w.req.Deadline.IsZero() {
		return false
	}
	return l.tooLateToQueue(now, w.req, w.cost, 0, inTime) // no wait left
}

// waiterDeadline returns when a waiter for req, enqueued at now with
// verdict v, stops waiting: after maxWait, or once too little time is left
// before the request's deadline for its expected service time (times the
// margin). A probe waits until the deadline itself: by the estimate it is
// too late already, and it is queued to measure that estimate.
func (l *Limiter) waiterDeadline(now time.Time, req Request, cost int64, maxWait time.Duration, v verdict) time.Time {
	d := now.Add(maxWait)
	if req.Deadline.IsZero() {
		return d
	}
	last := req.Deadline
	if l.margin > 0 && v != probing {
		last = last.Add(-time.Duration(l.margin * l.expectedService(req.Class, cost)))
	}
	if last.Before(d) {
		return last
	}
	return d
}
