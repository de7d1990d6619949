package limits

import (
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// A limit at its floor still admits work back to back: a request that
// times out frees its slot at its deadline, and the next one takes it at
// once. When the caller stops waiting but the dependency goes on with the
// work (a handler that passes its request's context to a client whose
// server ignores the cancellation), each timeout leaves the dependency
// with work nobody waits for. If that arrives faster than an overloaded
// dependency completes it, its backlog never drains, and no limit of one
// or more gets it back. So a limit at its floor whose window served
// nothing in time closes (see signals.dead): shed admits no work but one
// probe per probe interval, and the first success reopens the limit at
// its floor.

// closable is what Gradient and AIMD share to close: the limit they
// enforce and the schedule of the probes.
type closable struct {
	// limit holds the limit enforced plus one: 1 while closed, and 0 in
	// a zero value, which reports -1, so that shed.New can tell a limit
	// that is closed from one that was never made.
	limit atomic.Int64
	gate  gate
}

// current is the limit enforced: 0 while closed, -1 if never made.
func (c *closable) current() int { return int(c.limit.Load()) - 1 }

// closed reports whether the limit is closed.
func (c *closable) closed() bool { return c.limit.Load() == 1 }

// set makes n the limit enforced.
func (c *closable) set(n int64) { c.limit.Store(n + 1) }

// probe is shed.Prober's Probe, with a probe every interval.
func (c *closable) probe(now time.Time, every time.Duration) bool {
	return c.closed() && c.gate.claim(now, every)
}

// enforce makes lim the limit after a window that ended at end, or closes
// it on ReasonClose, with the first probe due a whole interval later.
func (c *closable) enforce(lim float64, r Reason, end time.Time, every time.Duration) {
	if r == ReasonClose {
		c.gate.delay(end.Add(every))
		c.set(0)
		return
	}
	c.set(int64(lim))
}

// reopens takes a sample while the limit is closed: a drop delays the
// next probe, and a success reports that the limit reopens.
func (c *closable) reopens(s shed.Sample, every time.Duration) bool {
	if s.Dropped {
		c.gate.delay(s.Now.Add(every))
		return false
	}
	return true
}

// gate is the probe schedule of a closed limit: the time, in Unix ns,
// before which no probe may be admitted.
type gate struct {
	next atomic.Int64
}

// claim reports whether a probe may be admitted at now, and if so takes
// it: the next one is due every later. A probe due more than two
// intervals after now (one, give or take callers that read the clock out
// of order) was scheduled by a clock that has since gone back: that
// counts as no time passed, so the next one is due every after now.
func (g *gate) claim(now time.Time, every time.Duration) bool {
	t := now.UnixNano()
	for {
		n := g.next.Load()
		if n-t <= 2*int64(every) {
			return t >= n && g.next.CompareAndSwap(n, t+int64(every))
		}
		if g.next.CompareAndSwap(n, t+int64(every)) {
			return false
		}
	}
}

// delay makes the next probe due no sooner than at: a probe that was
// dropped delays the next one by a whole interval from its end, so that
// work the dependency still holds drains between probes.
func (g *gate) delay(at time.Time) {
	if at.IsZero() {
		return
	}
	u := at.UnixNano()
	for {
		n := g.next.Load()
		if u <= n || g.next.CompareAndSwap(n, u) {
			return
		}
	}
}

// deadDecision decides on a window that served nothing in time
// (signals.dead): at the floor the limit closes; above it, it falls below
// the work that was in flight, as far as for drops. Above the floor the
// congestion episode ep goes on unchanged: a window without a latency or
// a throughput teaches it nothing, and ending it would forget the knee
// its earlier windows found. Closing ends it: the limit reopens on a
// dependency it knows nothing of.
func deadDecision(s *signals, d *detector, ep episode, lim, floor, backoff float64) decision {
	if lim <= floor {
		return decision{limit: floor, reason: ReasonClose}
	}
	return decision{limit: min(lim, max(s.peak, 1)) * d.dropCut(s, backoff), reason: ReasonCutDrops, ep: ep}
}
