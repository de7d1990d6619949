package retrybudget

import (
	"sync/atomic"
	"time"
)

// window is a lock-free sliding window of two event counters (a and b),
// made of a ring of time buckets. Each bucket word packs an epoch tag
// (the bucket's index in time) in its high 40 bits and a saturating count
// in its low 24 bits, so a single compare-and-swap both rotates a stale
// bucket and counts into it: no locks, no allocation.
//
// The window at time t covers the buckets whose epoch e satisfies
// cur-n < e <= cur, where cur is t's epoch: a count made at epoch e stops
// counting once the clock reaches epoch e+n. With bucket width w = ttl/n
// an event therefore counts for between ttl-w and ttl.
//
// Epochs are measured from an origin fixed by the first call, so any
// time.Time works, the zero time of a simulator included. When both the
// origin and now carry a monotonic clock reading (time.Now), the distance
// between them is measured on the monotonic clock, so a step of the wall
// clock (an NTP correction) moves nothing.
//
// Time never goes backwards inside a window: cur is the latest epoch a
// counting call has seen (last), and a time before it counts as that
// epoch (reads clamp the same way but do not raise last). A
// caller whose clock lags, a clock stepped back, or a time before the
// origin all land in the current bucket, where the next checks see them.
// Without this clamp a step back of more than the TTL would count new
// events into buckets tagged with the old, later epochs, which the
// shifted window no longer covers: withdrawals would be unbounded until
// the clock caught up. The clamp keeps the bound (within any n epochs of
// the window's own time, b <= ratio x a + reserve); its cost is that
// after a step back of s the window stops sliding for s, and behaves
// like a cumulative counter until the clock passes the last time seen.
// Resetting the window on a large step instead would hand out a fresh
// floor at each step, without bound when steps repeat.
type window struct {
	width   int64 // bucket width in nanoseconds, >= 1ms
	n       int64 // number of buckets
	buckets []bucket
	origin  atomic.Pointer[origin]
	// last is the latest epoch seen (0: the origin's). It changes at most
	// once per bucket width in steady traffic, so the cache line it
	// shares is read-mostly.
	last atomic.Int64
}

// origin is the time epochs are measured from.
type origin struct {
	t    time.Time
	mono bool  // t has a monotonic clock reading
	sec  int64 // t as Unix seconds and nanoseconds: subtracting
	nsec int64 // these is cheaper than Time.Sub's overflow checks
}

type bucket struct {
	a atomic.Uint64
	b atomic.Uint64
}

const (
	countBits = 24
	countMask = 1<<countBits - 1
	epochBits = 64 - countBits
	epochMask = 1<<epochBits - 1
)

func newWindow(ttl time.Duration, n int) *window {
	return &window{
		width:   int64(ttl) / int64(n),
		n:       int64(n),
		buckets: make([]bucket, n),
	}
}

// epoch returns the bucket epoch of now, clamped so that it never goes
// below the latest epoch seen, as a 40-bit tag and an index in the ring.
// Counting calls (advance) raise last to now's epoch; reads leave it.
func (w *window) epoch(now time.Time, advance bool) (tag uint64, idx int) {
	o := w.origin.Load()
	if o == nil {
		// Round(0) strips the monotonic reading, and only that.
		w.origin.CompareAndSwap(nil, &origin{t: now, mono: now != now.Round(0), sec: now.Unix(), nsec: int64(now.Nanosecond())})
		o = w.origin.Load()
	}
	var d int64
	if o.mono {
		// Measured on the monotonic clock when now has a reading too
		// (time.Now), immune to wall-clock steps; saturates at about 292
		// years.
		d = int64(now.Sub(o.t))
	} else {
		switch ds := now.Unix() - o.sec; {
		case ds > maxSpanSec:
			d = maxSpanSec * 1e9
		case ds < -maxSpanSec:
			d = -maxSpanSec * 1e9
		default:
			d = ds*1e9 + int64(now.Nanosecond()) - o.nsec
		}
	}
	e := d / w.width
	if d < 0 && d%w.width != 0 {
		e-- // floor division for times before the origin
	}
	// Monotonic clamp: use last when e is behind it, else raise it to e.
	for l := w.last.Load(); e != l; l = w.last.Load() {
		if e < l {
			e = l
			break
		}
		if !advance || w.last.CompareAndSwap(l, e) {
			break
		}
	}
	i := e % w.n
	if i < 0 {
		i += w.n
	}
	return uint64(e) & epochMask, int(i)
}

// maxSpanSec bounds the distance from the origin that epoch computes
// exactly (about 290 years); farther times saturate.
const maxSpanSec = 9e9

// age returns cur-tag as a signed distance in epochs (40-bit wrap-around).
func age(cur, tag uint64) int64 {
	return int64((cur-tag)&epochMask<<countBits) >> countBits
}

// countIn returns the count stored in word v if v's epoch lies in the
// window ending at epoch cur. Buckets tagged slightly ahead of cur still
// count: a concurrent caller raised last after this one read it, and they
// hold recent events.
func (w *window) countIn(v, cur uint64) uint64 {
	// cur-tag, shifted by n-1 modulo 2^40, is in [0, 2n-1) for the last n
	// epochs and the n-1 epochs ahead.
	if (cur-v>>countBits+uint64(w.n)-1)&epochMask < uint64(2*w.n-1) {
		return v & countMask
	}
	return 0
}

// next returns the word that results from counting one event at epoch tag
// into word old, and false when the count is saturated.
func next(old, tag uint64) (uint64, bool) {
	if old>>countBits != tag && age(tag, old>>countBits) > 0 {
		// The bucket holds an older epoch: rotate it.
		return tag<<countBits | 1, true
	}
	// Same epoch, or a newer epoch written by a concurrent caller that
	// raised last after this one read it: count into it.
	if old&countMask == countMask {
		return old, false
	}
	return old + 1, true
}

func add(w *atomic.Uint64, tag uint64) {
	for {
		old := w.Load()
		nw, ok := next(old, tag)
		if !ok || w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// addA counts one event of kind a at now.
func (w *window) addA(now time.Time) {
	tag, i := w.epoch(now, true)
	add(&w.buckets[i].a, tag)
}

// addB counts one event of kind b at now.
func (w *window) addB(now time.Time) {
	tag, i := w.epoch(now, true)
	add(&w.buckets[i].b, tag)
}

// sums returns the counts of a and b in the window ending at now, or at
// the latest time seen if now is before it. It is a read: it does not
// move the window's time forward.
func (w *window) sums(now time.Time) (a, b uint64) {
	tag, _ := w.epoch(now, false)
	return w.sumsAt(tag)
}

func (w *window) sumsAt(tag uint64) (a, b uint64) {
	for i := range w.buckets {
		a += w.countIn(w.buckets[i].a.Load(), tag)
		b += w.countIn(w.buckets[i].b.Load(), tag)
	}
	return a, b
}

// tryAddB counts one b event at now if, with the b events already in the
// window, b+1 <= a*ratio + reserve. The check and the count are one
// compare-and-swap on the current bucket, so callers that share a bucket
// can never overshoot the limit together. A saturated bucket denies.
func (w *window) tryAddB(now time.Time, ratio, reserve float64) bool {
	tag, i := w.epoch(now, true)
	cur := &w.buckets[i].b
	for {
		var others uint64
		for j := range w.buckets {
			if j != i {
				others += w.countIn(w.buckets[j].b.Load(), tag)
			}
		}
		old := cur.Load()
		need := float64(int64(others+w.countIn(old, tag))) + 1
		// The floor alone often covers the retry: then the deposits
		// need not be summed.
		if need > reserve+1e-9 {
			var a uint64
			for j := range w.buckets {
				a += w.countIn(w.buckets[j].a.Load(), tag)
			}
			// The epsilon absorbs float rounding (0.29*100 is 28.999...).
			if need > float64(int64(a))*ratio+reserve+1e-9 {
				return false
			}
		}
		nw, ok := next(old, tag)
		if !ok {
			return false
		}
		if cur.CompareAndSwap(old, nw) {
			return true
		}
	}
}

// idle reports whether the window is empty at now, which makes it
// indistinguishable from a fresh one.
func (w *window) idle(now time.Time) bool {
	a, b := w.sums(now)
	return a == 0 && b == 0
}
