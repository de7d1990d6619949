package shed

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Misuse of a permit, such as releasing two copies of one Permit value,
// must never corrupt the limiter: the in-flight count and cost never go
// below zero (where the packed state word would wrap to 16,777,215 in
// flight and reject everything until restart), and every misuse that is
// detected is counted (ClassSnapshot.Misused) and reported (EventMisused).
// Two mechanisms share the work.
//
// # The floor
//
// Every give-back is a compare-and-swap that refuses to take the count or
// the cost below zero (giveBack). It is what keeps every permit safe, and
// the only check on unguarded ones: a copy released again is refused and
// reported if nothing else is in flight; otherwise it takes the place of
// another admission's release, the limiter counts one unit too few for a
// while, and the release that finds the state at zero is refused and
// reported instead. So nothing wraps, an undercount heals whenever the
// work in flight drains, and the misuse is reported, perhaps late.
//
// # Guard slots
//
// Copies of a Permit value are indistinguishable, so telling a copy's
// release from the original's needs state that the copies share, without
// allocating per admission. A timed permit (see Config.MaxSamplesPerSecond)
// therefore takes a guard slot: one word in a fixed table of the limiter,
// chosen from the class's admission sequence number n (which admission
// counts anyway), so that finding it costs nothing. The slot holds the
// permit's guard tag (n's low 24 bits) and its cost, the same word as
// Permit.cw. Release takes the slot back with one compare-and-swap, which
// exactly one copy wins; Reconcile changes the cost in the slot, so a copy
// released later gives back the reconciled cost.
//
// Only timed permits are guarded because the slot costs two more atomic
// operations (one per side), which made the untimed hot path about 60%
// slower when measured, but is little next to a clock reading (~100 ns). The explicit-time API times,
// hence guards, every permit; the wall-clock API every permit up to
// Config.MaxSamplesPerSecond and a sample of them above it. A caller that
// copies permits is thus caught at once at low rates and within moments
// at high ones, while the floor bounds what the unguarded copies do.
//
// A timed permit whose slot is still held by an older one (held for longer
// than the table's size in admissions of its class) goes unguarded. A
// stale copy whose slot was reused by an admission with the same tag,
// 2^24 admissions of its class later, is mistaken for that admission: it
// frees its capacity early, and that admission's own release is then
// refused and reported, as with the floor. Copies used concurrently from
// several goroutines (a release racing a Reconcile of another copy) are
// kept within the floor, not exact. Config.TrackLeaks tells every copy
// apart, at the price of allocations.

// Layout of Permit.cw and of a guard slot.
const (
	costValueMask = 1<<costBits - 1
	guardTagShift = costBits
	guardTagBits  = 63 - costBits
	guardTagMask  = 1<<guardTagBits - 1
	// guarded marks a permit that holds its guard slot, and a slot that
	// is held; a free slot is zero.
	guarded = 1 << 63
)

// Guard table sizes: at least four slots per unit of a static limit, so
// that few permits outlive their slot's next turn; at most 4,096 slots
// (32 KiB) per limiter. An adaptive or dry-run limiter, whose work in
// flight has no static bound, gets the largest.
const (
	minGuardSlots = 64
	maxGuardSlots = 4096
)

// guardSlots returns the size of the guard table for cfg (a validated
// config), or 0 when every permit is tracked and needs none.
func guardSlots(cfg Config) int {
	switch {
	case cfg.TrackLeaks:
		return 0
	case cfg.Source != nil || cfg.DryRun || cfg.Limit > maxGuardSlots/4:
		return maxGuardSlots
	}
	return max(minGuardSlots, 1<<bits.Len(uint(4*cfg.Limit-1)))
}

// initGuards allocates a table of n slots (a power of two, or 0).
func (l *Limiter) initGuards(n int) {
	if n == 0 {
		return
	}
	l.guards = make([]atomic.Uint64, n)
	l.guardMask = uint64(n - 1)
	l.guardLines = uint8(bits.Len(uint(n/8)) - 1)
}

// guardSlot returns the slot of the admission of class c with tag t.
// Classes start at different offsets of the table, so that their
// admissions with equal tags never share a slot. The index is then spread
// so that consecutive admissions lie on different cache lines (8 slots per
// line): line i mod lines, word i / lines.
func (l *Limiter) guardSlot(t uint64, c Class) *atomic.Uint64 {
	i := (t + uint64(c)*(l.guardMask+1)/MaxClasses) & l.guardMask
	lines := uint64(1)<<l.guardLines - 1
	return &l.guards[(i&lines)<<3|i>>l.guardLines]
}

// guard returns the cost word of a new untracked permit of class c with
// admission sequence number n: guarded if its slot was free.
func (l *Limiter) guard(n uint64, c Class, cost int64) uint64 {
	w := uint64(cost) | (n&guardTagMask)<<guardTagShift
	if l.guards != nil && l.guardSlot(n&guardTagMask, c).CompareAndSwap(0, w|guarded) {
		w |= guarded
	}
	return w
}

// unguard frees p's guard slot and reports whether p still held it; false
// means a copy of p was released already. p's cost is updated from the
// slot, where a copy may have reconciled it.
func (l *Limiter) unguard(p *Permit) bool {
	g := l.guardSlot(p.cw>>guardTagShift&guardTagMask, p.class())
	if g.CompareAndSwap(p.cw, 0) {
		return true
	}
	for {
		v := g.Load()
		if !sameGuard(v, p.cw) {
			return false
		}
		if g.CompareAndSwap(v, 0) {
			p.cw = v
			return true
		}
	}
}

// sameGuard reports whether slot value v is held by the permit whose cost
// word is w.
func sameGuard(v, w uint64) bool { return v&^costValueMask == w&^costValueMask }

// reconcileGuarded sets the cost of p, in its guard slot (which every copy
// shares) and in the state word, and returns the difference.
func (l *Limiter) reconcileGuarded(p *Permit, actual int64) (int64, error) {
	g := l.guardSlot(p.cw>>guardTagShift&guardTagMask, p.class())
	for {
		v := g.Load()
		if !sameGuard(v, p.cw) {
			return 0, errMisused
		}
		d := actual - int64(v&costValueMask)
		if d != 0 {
			if err := l.addCost(d); err != nil {
				return 0, err
			}
		}
		if w := v&^costValueMask | uint64(actual); g.CompareAndSwap(v, w) {
			p.cw = w
			return d, nil
		}
		// A copy reconciled or released meanwhile: undo, and look again.
		_ = l.addCost(-d)
	}
}

// giveBackResult says how a give-back went.
type giveBackResult uint8

const (
	// gaveBack: the capacity was given back.
	gaveBack giveBackResult = iota
	// gaveBackOdd: the capacity was given back, but the state did not hold
	// it as it should: a misuse happened (see giveBackOdd).
	gaveBackOdd
	// refusedBack: nothing was in flight; nothing changed but a cost left
	// in flight without work, which was cleared.
	refusedBack
)

// giveBack returns the capacity of one admission to the state word (a
// release, or an admission undone). It never takes the count
// or the cost below zero (see giveBackOdd), which is how a copy of a Permit
// released after the original is caught when nothing else tells them
// apart. If the slow flag is up, waiters may have queued on the capacity
// just returned: hand it to them.
//
// The check and the change are one compare-and-swap, so concurrent
// give-backs cannot both pass the check and wrap the word together.
func (l *Limiter) giveBack(now time.Time, hasNow bool, cost int64) giveBackResult {
	for {
		s := l.state.Load()
		if !fitsBack(s, cost) {
			return l.giveBackOdd(now, hasNow, cost)
		}
		if l.state.CompareAndSwap(s, s-delta(cost)) {
			if s&slowFlag != 0 {
				l.kick(now, hasNow)
			}
			return gaveBack
		}
	}
}

// fitsBack reports whether state s holds one admission of the given cost to
// give back: at least one unit and that cost in flight, and when this is
// the last unit, exactly that cost.
func fitsBack(s uint64, cost int64) bool {
	n, c := inFlightOf(s), costOf(s)
	return n > 1 && c >= cost || n == 1 && c == cost
}

// giveBackOdd handles a give-back that does not fit the state word, which
// only misuse brings about (a copy released after the original, or a copy
// reconciled after the original was released):
//   - nothing in flight: the give-back is refused, and a cost left in
//     flight with no work (a reconciled copy) is cleared;
//   - this is the last unit in flight, but its cost is not what is left:
//     the give-back is accepted and the state goes to zero;
//   - less cost in flight than this unit's: the unit is given back and
//     the cost goes to zero.
//
// The caller reports the misuse.
func (l *Limiter) giveBackOdd(now time.Time, hasNow bool, cost int64) giveBackResult {
	for {
		s := l.state.Load()
		if fitsBack(s, cost) {
			// Concurrent work changed the state meanwhile: it fits now.
			return l.giveBack(now, hasNow, cost)
		}
		n := inFlightOf(s)
		next := s & slowFlag
		if n > 1 {
			next |= uint64(n - 1)
		}
		if l.state.CompareAndSwap(s, next) {
			if s&slowFlag != 0 && next != s {
				l.kick(now, hasNow)
			}
			if n == 0 {
				return refusedBack
			}
			return gaveBackOdd
		}
	}
}

// returnCapacity counts a release and gives its capacity back, and reports
// whether the give-back was accepted. The release is counted first, so that
// the class's counters never show less work in flight than the state word
// while the capacity is handed to waiters: protected shares err on the
// safe side. A refused give-back is not counted as a release.
func (l *Limiter) returnCapacity(now time.Time, hasNow bool, p *Permit, o Outcome, leaked bool) bool {
	l.countRelease(p, o, leaked)
	return l.giveBackCounted(now, hasNow, p, o, leaked)
}

// giveBackCounted is returnCapacity once the release is counted.
func (l *Limiter) giveBackCounted(now time.Time, hasNow bool, p *Permit, o Outcome, leaked bool) bool {
	switch l.giveBack(now, hasNow, p.cost()) {
	case gaveBack:
		return true
	case gaveBackOdd:
		l.misused(now, hasNow, p.class(), p.cost())
		return true
	}
	l.uncountRelease(p, o, leaked)
	l.misused(now, hasNow, p.class(), p.cost())
	return false
}

// uncountRelease takes back the count of a release (see countRelease).
func (l *Limiter) uncountRelease(p *Permit, o Outcome, leaked bool) {
	cc := l.hot(p.class())
	if l.classCost {
		cc.costOut.Add(-p.cost())
	}
	switch {
	case leaked:
		cc.leaked.Add(^uint64(0))
	case o != Success || l.multi:
		cc.released[o].Add(^uint64(0))
	}
}

// misused counts and reports a misuse of a permit of class c.
func (l *Limiter) misused(now time.Time, hasNow bool, c Class, cost int64) {
	l.counts[c].misused.Add(1)
	if o := l.observer; o != nil {
		var t time.Time
		if hasNow {
			t = now
		}
		o.Observe(Event{Kind: EventMisused, Time: t, Class: c, Cost: cost, InFlight: l.InFlight()})
	}
}
