package shed

import (
	"errors"
	"fmt"
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
// pass *Permit around; releasing two copies of the same admission frees its
// capacity twice. Config.TrackLeaks makes copies safe too, and finds leaks.
//
// A Permit is a plain four-word value: admission allocates nothing, and
// the Go compiler keeps values of at most four words in registers.
type Permit struct {
	// ref is the *Limiter, or the *tracker when metaTracked is set.
	ref   unsafe.Pointer
	start int64 // nanoseconds since the limiter's epoch, when timed
	cost  int64
	meta  uint64
}

// Layout of Permit.meta.
const (
	metaInflightMask = 1<<countBits - 1 // in-flight count at admission
	metaClassShift   = countBits        // 4 bits: MaxClasses is 16
	metaTimed        = 1 << (countBits + 4)
	metaTracked      = 1 << (countBits + 5)
	metaShadowShift  = countBits + 6 // 3 bits: the dry-run Reason
	metaWaitShift    = countBits + 9 // queue wait in microseconds
	maxMetaWait      = 1<<(64-metaWaitShift) - 1
)

func (p *Permit) inflight() int32 { return int32(p.meta & metaInflightMask) }
func (p *Permit) class() Class    { return Class(p.meta>>metaClassShift) & (MaxClasses - 1) }
func (p *Permit) timed() bool     { return p.meta&metaTimed != 0 }
func (p *Permit) shadow() Reason  { return Reason(p.meta>>metaShadowShift) & 7 }
func (p *Permit) wait() time.Duration {
	return time.Duration(p.meta>>metaWaitShift) * time.Microsecond
}

// limiter returns the permit's limiter, nil once released.
func (p *Permit) limiter() *Limiter {
	if p.meta&metaTracked != 0 && p.ref != nil {
		return (*tracker)(p.ref).s.l
	}
	return (*Limiter)(p.ref)
}

// newPermit builds the permit of an admission that has already been added
// to the state word; it counts the admission (c.admitted), which also
// decides whether the wall-clock API times it.
func (l *Limiter) newPermit(now time.Time, hasNow bool, c Class, cost int64, inflight int64, wait time.Duration, shadow Reason) Permit {
	cc := l.hot(c)
	n := cc.admitted.Add(1)
	if l.classCost {
		cc.costIn.Add(cost)
	}
	meta := uint64(inflight)&metaInflightMask | uint64(c)<<metaClassShift | uint64(shadow)<<metaShadowShift
	if wait > 0 {
		meta |= min(uint64(wait/time.Microsecond), maxMetaWait) << metaWaitShift
	}
	if !hasNow && n&l.sampleMask.Load() == 0 {
		now, hasNow = l.clock(), true
	}
	var start int64
	if hasNow {
		meta |= metaTimed
		start = int64(now.Sub(l.epoch))
	}
	if l.trackLeaks {
		return l.trackedPermit(Permit{ref: unsafe.Pointer(l), start: start, cost: cost, meta: meta}, now)
	}
	return Permit{ref: unsafe.Pointer(l), start: start, cost: cost, meta: meta}
}

// Valid reports whether p holds an admission that has not been released.
func (p Permit) Valid() bool { return p.ref != nil }

// Class returns the class of the admitted work.
func (p Permit) Class() Class { return p.class() }

// Cost returns the cost the work reserves (after any Reconcile).
func (p Permit) Cost() int64 { return p.cost }

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
	// with nobody observing. It needs no clock, no sample and no event.
	if p.meta&(metaTimed|metaTracked) == 0 && o == Success {
		if l := (*Limiter)(p.ref); l.quiet {
			p.ref = nil
			l.releaseQuick(p)
			return
		}
	}
	l := p.limiter()
	if p.meta&metaTracked != 0 && !(*tracker)(p.ref).done() {
		p.ref = nil
		return // another copy released it
	}
	p.ref = nil
	l.finish(now, hasNow, o, p, false)
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
		now, hasNow = l.clock(), true
	}
	var lat time.Duration
	if timed {
		lat = max(now.Sub(l.epoch)-time.Duration(p.start), 0)
		if o == Success {
			l.recordLatency(lat)
		}
		if wall {
			l.adjustSampling(now)
		}
	}
	// Tell the source first, so that a limit raised by this sample is seen
	// by the waiters this release may admit.
	if l.source != nil && (timed || o == Dropped) {
		l.observeSource(now, hasNow, o, p, leaked, Sample{Now: now, Latency: lat, Timed: timed, InFlight: int(p.inflight()), Dropped: o == Dropped, Cost: max(p.cost, 1)})
	}
	l.countRelease(p, o, leaked)
	l.giveBack(now, hasNow, p.cost)
	if ob := l.observer; ob != nil {
		kind := EventReleased
		if leaked {
			kind = EventLeaked
		}
		var t time.Time
		if hasNow {
			t = now
		}
		ob.Observe(Event{Kind: kind, Time: t, Class: p.class(), Outcome: o, Cost: p.cost, Latency: lat, Timed: timed, InFlight: l.InFlight()})
	}
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
			l.countRelease(p, o, leaked)
			l.giveBack(now, hasNow, p.cost)
		}
	}()
	l.source.Observe(s)
	observed = true
}

// releaseQuick returns the capacity of an untimed success when no observer
// listens: one CAS on the state word, and with several classes the class's
// counters.
func (l *Limiter) releaseQuick(p *Permit) {
	if l.multi {
		l.countRelease(p, Success, false)
	}
	l.giveBack(time.Time{}, false, p.cost)
}

// countRelease moves the release into the class counters.
func (l *Limiter) countRelease(p *Permit, o Outcome, leaked bool) {
	cc := l.hot(p.class())
	if l.classCost {
		cc.costOut.Add(p.cost)
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
// ErrInvalidRequest) and changes nothing if actual is negative or the
// limiter's in-flight cost would leave [0, MaxTotalCost]; that check and
// the change are one atomic step, so concurrent reconciliations of
// different permits never overflow the limiter's cost.
func (p *Permit) Reconcile(actual int64) error { return p.reconcile(time.Time{}, false, actual) }

// ReconcileAt is Reconcile at an explicit time now, for virtual time.
func (p *Permit) ReconcileAt(now time.Time, actual int64) error {
	return p.reconcile(now, true, actual)
}

func (p *Permit) reconcile(now time.Time, hasNow bool, actual int64) error {
	if actual < 0 || actual > MaxTotalCost {
		return fmt.Errorf("%w: actual cost %d outside [0, %d]", ErrInvalidRequest, actual, int64(MaxTotalCost))
	}
	l := p.limiter()
	if l == nil {
		return ErrReleased
	}
	d := actual - p.cost
	if d == 0 {
		return nil
	}
	s, ok := l.addCost(d)
	if !ok {
		return fmt.Errorf("%w: in-flight cost would leave [0, %d]", ErrInvalidRequest, int64(MaxTotalCost))
	}
	p.cost = actual
	if p.meta&metaTracked != 0 {
		(*tracker)(p.ref).s.cost.Store(actual)
	}
	if l.classCost {
		l.hot(p.class()).costIn.Add(d)
	}
	if d < 0 && s&slowFlag != 0 {
		l.kick(now, hasNow) // the cost given back may admit waiters
	}
	return nil
}

// addCost moves the in-flight cost by d and returns the new state, unless
// that would take the cost out of [0, MaxTotalCost]. The check and the
// change are one compare-and-swap: checked and added in two steps, two
// concurrent reconciliations could both pass the check and together wrap
// the cost field into the bits above it.
func (l *Limiter) addCost(d int64) (uint64, bool) {
	for {
		s := l.state.Load()
		if c := costOf(s) + d; c < 0 || c > MaxTotalCost {
			return s, false
		}
		// Two's complement: adding a negative d shifted left subtracts.
		if n := s + uint64(d)<<costShift; l.state.CompareAndSwap(s, n) {
			return n, true
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
	if t-last < int64(100*time.Millisecond) || !l.lastRateCheck.CompareAndSwap(last, t) {
		return
	}
	var count uint64
	for i := range l.counts {
		count += l.hot(Class(i)).admitted.Load()
	}
	prev := l.lastRateCount.Swap(count)
	rate := float64(count-prev) / (float64(t-last) / 1e9)
	if rate <= l.maxSamples {
		l.sampleMask.Store(0)
		return
	}
	every := uint64(rate/l.maxSamples) + 1
	l.sampleMask.Store(1<<bits.Len64(every-1) - 1)
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
	s.cost.Store(p.cost)
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
	p.cost = s.cost.Load()
	leak := Leak{Class: p.class(), ClassName: l.names[p.class()], Cost: p.cost, Acquired: s.acquired}
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
