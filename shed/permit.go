package shed

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Permit represents one admitted unit of work. Release it exactly once when
// the work ends, on every path (success, error, cancellation, panic):
//
//	p, err := l.TryAcquire(shed.Request{})
//	if err != nil { ... }
//	defer p.Release(shed.Success)
//
// Release is idempotent on the Permit variable it is called on: the first
// call frees the capacity and clears the permit, later calls (and calls on
// the zero Permit) do nothing. Keep one Permit variable per admission and
// pass *Permit around. Releasing two copies of one admission is a bug in
// the caller, which the limiter absorbs: its counts never go below zero,
// and the misuse is counted in ClassSnapshot.Misused and reported as an
// EventMisused. For timed permits (all of them with the explicit-time API,
// and up to Config.MaxSamplesPerSecond with the wall clock) the limiter
// tells the copies apart: the first release frees the capacity, and
// releasing or reconciling another copy afterwards changes nothing. An
// untimed copy released again is refused when nothing else is in flight;
// otherwise it frees another admission's capacity early, and that
// admission's release is refused later. Config.TrackLeaks tells every
// copy apart, and finds leaks.
//
// A Permit is a plain four-word value: admission allocates nothing, and
// the Go compiler keeps values of at most four words in registers.
type Permit struct {
	// ref is the *Limiter; the *tracker when metaTracked is set; else the
	// *tenantEntry of its tenant when metaTenant is set.
	ref   unsafe.Pointer
	start int64 // nanoseconds since the limiter's epoch, when timed
	// cw holds the cost, and the permit's guard tag when guarded (see
	// guard.go): the same word its guard slot holds.
	cw   uint64
	meta uint64
}

// Layout of Permit.meta.
const (
	metaInflightMask = 1<<countBits - 1 // in-flight count at admission
	metaClassShift   = countBits        // 4 bits: MaxClasses is 16
	metaTimed        = 1 << (countBits + 4)
	metaTracked      = 1 << (countBits + 5)
	metaShadowShift  = countBits + 6 // 3 bits: the dry-run Reason (shadowBits)
	metaTenant       = 1 << (countBits + 9)
	metaWaitShift    = countBits + 10 // queue wait in microseconds
	maxMetaWait      = 1<<(64-metaWaitShift) - 1
)

func (p *Permit) cost() int64     { return int64(p.cw & costValueMask) }
func (p *Permit) inflight() int32 { return int32(p.meta & metaInflightMask) }
func (p *Permit) class() Class    { return Class(p.meta>>metaClassShift) & (MaxClasses - 1) }
func (p *Permit) timed() bool     { return p.meta&metaTimed != 0 }
func (p *Permit) shadow() Reason  { return shadowReason(p.meta >> metaShadowShift & 7) }

// shadowBits and shadowReason encode a dry-run Reason in 3 bits: every
// Reason a Limiter produces is below 7 but ReasonTenantShare, which takes
// the place of ReasonRateLimited (never a Limiter's).
func shadowBits(r Reason) uint64 {
	if r == ReasonTenantShare {
		return 7
	}
	return uint64(r)
}

func shadowReason(b uint64) Reason {
	if b == 7 {
		return ReasonTenantShare
	}
	return Reason(b)
}

// limiter returns the limiter of a permit that has not been released.
func (p *Permit) limiter() *Limiter {
	switch {
	case p.meta&metaTracked != 0:
		return (*tracker)(p.ref).s.l
	case p.meta&metaTenant != 0:
		return (*tenantEntry)(p.ref).l
	}
	return (*Limiter)(p.ref)
}

// untracked returns the permit as it is without its tracker: a tracked
// permit's untracked form, with its reconciled cost, else p itself. Its
// ref is what release needs to give the capacity back.
func (p *Permit) untracked() Permit {
	if p.meta&metaTracked == 0 {
		return *p
	}
	s := (*tracker)(p.ref).s
	q := s.permit
	q.cw = q.cw&^costValueMask | uint64(s.cost.Load())
	return q
}
func (p *Permit) wait() time.Duration {
	return time.Duration(p.meta>>metaWaitShift) * time.Microsecond
}

// newPermit builds the permit of an admission that has already been added
// to the state word (and to its tenant's entry, h, if any); it counts the
// admission (c.admitted), which also decides whether the wall-clock API
// times it.
func (l *Limiter) newPermit(now time.Time, hasNow bool, c Class, cost int64, inflight int64, wait time.Duration, shadow Reason, h tenantHold) Permit {
	cc := l.hot(c)
	n := cc.admitted.Add(1)
	if l.classCost {
		cc.costIn.Add(cost)
	}
	meta := uint64(inflight)&metaInflightMask | uint64(c)<<metaClassShift | shadowBits(shadow)<<metaShadowShift
	if wait > 0 {
		meta |= min(uint64(wait/time.Microsecond), maxMetaWait) << metaWaitShift
	}
	if !hasNow && n&l.sampleMask.Load() == 0 {
		now, hasNow = l.admitClock(c, cost, h), true
	}
	var start int64
	cw := uint64(cost)
	if hasNow {
		meta |= metaTimed
		start = int64(now.Sub(l.epoch))
	}
	ref := unsafe.Pointer(l)
	switch {
	case h.e != nil:
		// Its ticket in the tenant's entry tells its copies apart.
		ref = unsafe.Pointer(h.e)
		meta |= metaTenant
		cw |= h.ticket << guardTagShift
	case hasNow && !l.trackLeaks:
		// Guard the permits that pay for a clock reading anyway (see
		// guard.go); the untimed ones keep the quick path.
		cw = l.guard(n, c, cost)
	}
	if l.trackLeaks {
		return l.trackedPermit(Permit{ref: ref, start: start, cw: cw, meta: meta}, now)
	}
	return Permit{ref: ref, start: start, cw: cw, meta: meta}
}

// admitClock reads the clock for an admission newPermit times. The
// admission is in the state word, the class's counters and its tenant's
// entry already: if Config.Clock panics, they are taken back as the panic
// unwinds (a defer without recover), since the caller gets no permit.
func (l *Limiter) admitClock(c Class, cost int64, h tenantHold) time.Time {
	done := false
	defer func() {
		if done {
			return
		}
		cc := l.hot(c)
		cc.admitted.Add(^uint64(0))
		if l.classCost {
			cc.costIn.Add(-cost)
		}
		if h.e != nil {
			p := Permit{ref: unsafe.Pointer(h.e), cw: h.ticket << guardTagShift, meta: metaTenant}
			l.unhold(&p)
		}
		l.takeBack(time.Time{}, false, c, cost)
	}()
	now := l.clock()
	done = true
	return now
}

// Valid reports whether p holds an admission that has not been released.
func (p Permit) Valid() bool { return p.ref != nil }

// Class returns the class of the admitted work.
func (p Permit) Class() Class { return p.class() }

// Cost returns the cost the work reserves (after any Reconcile).
func (p Permit) Cost() int64 { return p.cost() }

// Wait returns how long the work waited in the queue before admission.
func (p Permit) Wait() time.Duration { return p.wait() }

// DryRun returns the reason the limiter would have rejected the work, when
// dry-run mode admitted it anyway, or ReasonNone.
func (p Permit) DryRun() Reason { return p.shadow() }

// Release ends the work with the given outcome, using the wall clock. Only
// the first call on a Permit has an effect; see Permit.
func (p *Permit) Release(o Outcome) { p.release(time.Time{}, false, o) }

// ReleaseAt is Release at an explicit time now, for virtual time.
func (p *Permit) ReleaseAt(now time.Time, o Outcome) { p.release(now, true, o) }

func (p *Permit) release(now time.Time, hasNow bool, o Outcome) {
	if p.ref == nil {
		return
	}
	// The commonest release at high rates: an untimed, untracked success
	// with nobody observing and no tenant. It needs no clock, no sample,
	// no event, and no guard slot: only timed permits (and those of
	// tenants) are guarded.
	if p.meta&(metaTimed|metaTracked|metaTenant) == 0 && o == Success {
		if l := (*Limiter)(p.ref); l.quiet {
			p.ref = nil
			l.releaseQuick(p)
			return
		}
	}
	if p.meta&metaTracked != 0 {
		p.releaseTracked(now, hasNow, o)
		return
	}
	l := p.limiter()
	q := *p
	p.ref = nil
	// A guarded (or a tenant's) permit takes its claim back first: if a
	// copy took it already, this release would free the capacity twice.
	if !l.settle(&q) {
		l.misused(now, hasNow, q.class(), q.cost())
		return
	}
	p.cw = q.cw
	l.finish(now, hasNow, o, &q, false)
}

// releaseTracked releases a tracked permit: its tracker tells whether a
// copy released it already, and knows its cost after any Reconcile.
func (p *Permit) releaseTracked(now time.Time, hasNow bool, o Outcome) {
	t := (*tracker)(p.ref)
	l := t.s.l
	q := p.untracked()
	p.ref = nil
	if !t.done() {
		l.misused(now, hasNow, p.class(), p.cost())
		return
	}
	l.settle(&q) // a tenant's ticket: the tracker made this release the one
	p.cw = q.cw
	l.finish(now, hasNow, o, &q, false)
}

// finish returns the capacity of a released (or leaked) permit and feeds
// the limit source.
func (l *Limiter) finish(now time.Time, hasNow bool, o Outcome, p *Permit, leaked bool) {
	if o > Ignored {
		o = Ignored
	}
	wall := !hasNow
	timed := p.timed() && o != Ignored
	if !hasNow && (timed || (o == Dropped && l.source != nil)) {
		now, hasNow = l.releaseClock(o, p, leaked), true
	}
	var lat time.Duration
	if timed {
		since := now.Sub(l.epoch)
		lat = elapsed(time.Duration(p.start), since)
		if o == Success {
			l.recordLatency(lat)
		}
		if l.margin > 0 {
			l.recordService(p.class(), lat, p.cost(), p.start, int64(since))
		}
		if wall {
			l.adjustSampling(now)
		}
	}
	// Tell the source first, so that a limit raised by this sample is seen
	// by the waiters this release may admit.
	if l.source != nil && (timed || o == Dropped) {
		l.observeSource(now, hasNow, o, p, leaked, Sample{Now: now, Latency: lat, Timed: timed, InFlight: int(p.inflight()), Dropped: o == Dropped, Cost: max(p.cost(), 1)})
	}
	if !l.returnCapacity(now, hasNow, p, o, leaked) {
		return
	}
	if ob := l.observer; ob != nil {
		kind := EventReleased
		if leaked {
			kind = EventLeaked
		}
		var t time.Time
		if hasNow {
			t = now
		}
		ob.Observe(Event{Kind: kind, Time: t, Class: p.class(), Outcome: o, Cost: p.cost(), Latency: lat, Timed: timed, InFlight: l.InFlight()})
	}
}

// elapsed returns to-from, saturated to [0, the largest Duration]: both
// are offsets from the epoch, which time.Sub saturates for times ~292
// years away (the zero time, say), so their difference can overflow.
func elapsed(from, to time.Duration) time.Duration {
	if to <= from {
		return 0
	}
	if d := to - from; d > 0 {
		return d
	}
	return math.MaxInt64
}

// releaseClock reads the clock for finish. If Config.Clock panics, the
// permit's release is still counted and its capacity given back while the
// panic unwinds, as in observeSource. Handing that capacity to waiters
// reads the clock again; if that panics too, they get it at the next
// release.
func (l *Limiter) releaseClock(o Outcome, p *Permit, leaked bool) time.Time {
	done := false
	defer func() {
		if !done {
			l.returnCapacity(time.Time{}, false, p, o, leaked)
		}
	}()
	now := l.clock()
	done = true
	return now
}

// observeSource gives a released permit's sample to the source. If Observe
// panics, the permit's release is still counted and its capacity given
// back while the panic unwinds to the caller of Release, as when Limit or
// the Observer panics (see LimitSource): the caller's permit is already
// cleared, so nothing else would ever give the capacity back.
func (l *Limiter) observeSource(now time.Time, hasNow bool, o Outcome, p *Permit, leaked bool, s Sample) {
	observed := false
	defer func() {
		if !observed {
			l.returnCapacity(now, hasNow, p, o, leaked)
		}
	}()
	l.source.Observe(s)
	observed = true
}

// releaseQuick returns the capacity of an untimed success when no observer
// listens: one CAS on the state word, and with several classes the class's
// counters. The first attempt at the CAS is made here, saving two calls on
// the commonest release; with the slow flag up, giveBackCounted also hands
// the capacity to waiters.
func (l *Limiter) releaseQuick(p *Permit) {
	if l.multi {
		l.countRelease(p, Success, false)
	}
	c := p.cost()
	if s := l.state.Load(); s&slowFlag == 0 && fitsBack(s, c) && l.state.CompareAndSwap(s, s-delta(c)) {
		return
	}
	l.giveBackCounted(time.Time{}, false, p, Success, false)
}

// countRelease moves the release into the class counters.
func (l *Limiter) countRelease(p *Permit, o Outcome, leaked bool) {
	cc := l.hot(p.class())
	if l.classCost {
		cc.costOut.Add(p.cost())
	}
	switch {
	case leaked:
		cc.leaked.Add(1)
	case o != Success || l.multi:
		cc.released[o].Add(1)
		// With one class, successes are not counted: Snapshot derives them
		// from the admissions and the in-flight count, which saves the
		// commonest release an atomic add.
	}
}

// ErrReleased is returned by Reconcile on a permit that was released.
var ErrReleased = errors.New("shed: permit already released")

// Reconcile replaces the cost the work reserved at admission with its
// actual cost, once known (for example the tokens an LLM call really used).
// The in-flight cost moves by the difference; a smaller cost may admit
// waiters. Reconcile never rejects: work already admitted keeps running
// even if its actual cost exceeds the budget. It fails (wrapping
// ErrInvalidRequest) and changes nothing if actual is negative or above
// MaxTotalCost, or a raise would take the limiter's in-flight cost above
// MaxTotalCost; that check and the change are one atomic step, so
// concurrent reconciliations of different permits never overflow the
// limiter's cost.
func (p *Permit) Reconcile(actual int64) error { return p.reconcile(time.Time{}, false, actual) }

// ReconcileAt is Reconcile at an explicit time now, for virtual time.
func (p *Permit) ReconcileAt(now time.Time, actual int64) error {
	return p.reconcile(now, true, actual)
}

// errCostRange is returned by Reconcile when the limiter's in-flight cost
// would go below 0 or a raise would take it above MaxTotalCost.
var errCostRange = fmt.Errorf("%w: in-flight cost would leave [0, %d]", ErrInvalidRequest, int64(MaxTotalCost))

// errMisused: the permit (a copy of it) was released already.
var errMisused = errors.New("shed: permit released through a copy")

func (p *Permit) reconcile(now time.Time, hasNow bool, actual int64) error {
	if actual < 0 || actual > MaxTotalCost {
		return fmt.Errorf("%w: actual cost %d outside [0, %d]", ErrInvalidRequest, actual, int64(MaxTotalCost))
	}
	if p.ref == nil {
		return ErrReleased
	}
	var l *Limiter
	var d int64
	var err error
	switch {
	case p.meta&metaTracked != 0:
		l, d, err = p.reconcileTracked(actual)
		if q := p.untracked(); err == nil && q.meta&metaTenant != 0 {
			_, _ = l.reconcileHold((*tenantEntry)(q.ref), q.cw>>guardTagShift&guardTagMask, actual, true)
		}
	case p.meta&metaTenant != 0:
		l = p.limiter()
		if d, err = l.reconcileHold((*tenantEntry)(p.ref), p.cw>>guardTagShift&guardTagMask, actual, false); err == nil {
			p.cw = p.cw&^costValueMask | uint64(actual)
		}
	case p.cw&guarded != 0:
		l = p.limiter()
		d, err = l.reconcileGuarded(p, actual)
	default:
		// Unguarded: only the floor of the state word catches a copy.
		l = p.limiter()
		if d = actual - p.cost(); d != 0 {
			err = l.addCost(d)
		}
		if err == nil {
			p.cw = uint64(actual)
		}
	}
	switch {
	case err == errMisused:
		p.ref = nil
		l.misused(now, hasNow, p.class(), p.cost())
		return ErrReleased
	case err != nil || d == 0:
		return err
	}
	if l.classCost {
		l.hot(p.class()).costIn.Add(d)
	}
	if d < 0 && l.state.Load()&slowFlag != 0 {
		l.kick(now, hasNow) // the cost given back may admit waiters
	}
	return nil
}

// reconcileTracked sets the cost of a tracked permit, in its tracker (which
// every copy shares) and in the state word, and returns the difference.
func (p *Permit) reconcileTracked(actual int64) (*Limiter, int64, error) {
	s := (*tracker)(p.ref).s
	for {
		old := s.cost.Load()
		if s.released.Load() {
			return s.l, 0, errMisused
		}
		d := actual - old
		if d != 0 {
			if err := s.l.addCost(d); err != nil {
				return s.l, 0, err
			}
		}
		if s.cost.CompareAndSwap(old, actual) {
			p.cw = uint64(actual)
			return s.l, d, nil
		}
		// A copy reconciled meanwhile: undo, and start from its cost.
		_ = s.l.addCost(-d)
	}
}

// addCost moves the in-flight cost by d for a permit in flight, unless that
// would take the cost below 0 or raise it above MaxTotalCost (errCostRange)
// or nothing is in flight (errMisused: the permit was released through a
// copy). The check and the change are one compare-and-swap: checked and
// added in two steps, two concurrent reconciliations could both pass the
// check and together wrap the cost field into the bits above it. A cost
// lowered is never refused for being above MaxTotalCost, which an
// admission added under the lock after a raise may have left it (see
// MaxTotalCost).
func (l *Limiter) addCost(d int64) error {
	for {
		s := l.state.Load()
		if inFlightOf(s) == 0 {
			return errMisused
		}
		if c := costOf(s) + d; c < 0 || d > 0 && c > MaxTotalCost {
			return errCostRange
		}
		// Two's complement: adding a negative d shifted left subtracts.
		if l.state.CompareAndSwap(s, s+uint64(d)<<costShift) {
			return nil
		}
	}
}

// adjustSampling re-estimates the admission rate at most every 100 ms and
// sets which admissions the wall-clock API times: every one up to
// MaxSamplesPerSecond, else every 2^k-th of each class, with 2^k the
// smallest power of two that brings the timed rate under the cap. Taking
// every n-th admission costs nothing on the hot path (the admission counter
// is incremented anyway); admissions from many callers interleave, so it is
// not tied to any one caller's rhythm.
func (l *Limiter) adjustSampling(now time.Time) {
	if l.maxSamples < 0 {
		return
	}
	t := int64(now.Sub(l.epoch))
	last := l.lastRateCheck.Load()
	if t < last {
		// The clock went back: restart the rate's window now rather than
		// keep the sampling as it is until the clock catches up.
		if l.lastRateCheck.CompareAndSwap(last, t) {
			l.lastRateCount.Store(l.admittedTotal())
		}
		return
	}
	if t-last < int64(100*time.Millisecond) || !l.lastRateCheck.CompareAndSwap(last, t) {
		return
	}
	count := l.admittedTotal()
	prev := l.lastRateCount.Swap(count)
	rate := float64(count-prev) / (float64(t-last) / 1e9)
	if rate <= l.maxSamples {
		l.sampleMask.Store(0)
		return
	}
	every := uint64(rate/l.maxSamples) + 1
	l.sampleMask.Store(1<<bits.Len64(every-1) - 1)
}

// admittedTotal returns the admissions of every class so far.
func (l *Limiter) admittedTotal() uint64 {
	var n uint64
	for i := range l.counts {
		n += l.hot(Class(i)).admitted.Load()
	}
	return n
}

// Leak describes a permit that was garbage collected without Release.
type Leak struct {
	Class     Class
	ClassName string
	Cost      int64
	// Acquired is the admission time.
	Acquired time.Time
	// Stack is where the permit was acquired.
	Stack []runtime.Frame
}

// tracker follows one permit when Config.TrackLeaks is set. The permit
// (and its copies) point to it; a cleanup attached to it finds a permit
// that became unreachable without Release and reclaims its capacity. The
// state lives in a separate object so that the cleanup can read it after
// the tracker is gone.
type tracker struct{ s *trackState }

type trackState struct {
	released atomic.Bool
	cost     atomic.Int64
	l        *Limiter
	permit   Permit // untracked, referring to l
	acquired time.Time
	stack    []uintptr
}

// done marks the permit released and reports whether this call did it.
func (t *tracker) done() bool { return t.s.released.CompareAndSwap(false, true) }

// trackedPermit attaches a tracker to p.
func (l *Limiter) trackedPermit(p Permit, now time.Time) Permit {
	s := &trackState{l: l, permit: p, acquired: now}
	s.cost.Store(p.cost())
	var pcs [32]uintptr
	s.stack = append([]uintptr(nil), pcs[:runtime.Callers(4, pcs[:])]...)
	t := &tracker{s: s}
	runtime.AddCleanup(t, (*trackState).reclaim, s)
	p.ref = unsafe.Pointer(t)
	p.meta |= metaTracked
	return p
}

// reclaim runs when a tracked permit became unreachable.
func (s *trackState) reclaim() {
	if !s.released.CompareAndSwap(false, true) {
		return
	}
	l := s.l
	p := s.permit
	p.cw = p.cw&^costValueMask | uint64(s.cost.Load())
	l.settle(&p) // a tenant's ticket
	leak := Leak{Class: p.class(), ClassName: l.names[p.class()], Cost: p.cost(), Acquired: s.acquired}
	frames := runtime.CallersFrames(s.stack)
	for {
		f, more := frames.Next()
		leak.Stack = append(leak.Stack, f)
		if !more {
			break
		}
	}
	l.finish(time.Time{}, false, Ignored, &p, true)
	if l.onLeak != nil {
		l.onLeak(leak)
	}
}
