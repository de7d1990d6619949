package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/record"
)

// A record's time may be wrong: a caller's clock ahead, a bad timestamp.
// Counts come from differences between ticks, spread over the time
// between them, so one tick dated far ahead would stretch the fit's
// timeline to it (the intervals between empty, their exposure counted
// again once time comes back), and any record far ahead grows it. The
// recorder ticks in time order but for such a record: after one it ticks
// at the far date, then back where time really is (record's package
// doc). So the fit holds aside what is far from its timeline until the
// recording shows which of the two it was; see Fitter.

// fitMaxHeld bounds the records held aside: more than that beyond a jump
// is traffic, and the jump real.
const fitMaxHeld = 1024

// fitHold is the records held aside, in the order they came.
type fitHold struct {
	recs     []record.Record
	ticks    int   // how many of recs are ticks
	lastTick int64 // the latest of their times, Unix ns
}

// fitTimeline is what the hold is judged against: the times of the
// records the fit took.
type fitTimeline struct {
	seen     bool
	last     int64 // the last tick's time taken, or a later record's, Unix ns
	lastRec  int64 // the latest time of a record other than a tick taken, its end for a request
	tick     int64 // the time of the last tick taken
	ticked   bool
	aside    int // records set aside, ticks apart
	asideTks int // ticks set aside
}

// reach returns how far from the timeline a record may be dated before
// it is held: ten intervals, at least a minute (ticks come only with
// records, so a quiet minute is common; and a jump that short stretches
// a fit little).
func (f *Fitter) reach() uint64 {
	if f.dt > math.MaxInt64/10 {
		return math.MaxInt64
	}
	return uint64(max(10*f.dt, int64(time.Minute)))
}

// ahead reports whether t is more than the reach after ref. It compares
// in uint64, as index does: a damaged recording's times may lie further
// apart than int64 holds.
func (f *Fitter) ahead(t, ref int64) bool { return t > ref && uint64(t)-uint64(ref) > f.reach() }

// outlying reports whether record r, dated t, is far from the timeline:
// any record more than the reach after the latest time taken, and a tick
// also when it goes back before the last tick taken, its counts going on
// from that tick's (a recorder ticks in time order but after a time far
// out of order, or a clock set back; a recorder started anew counts from
// zero, wherever its clock is).
func (f *Fitter) outlying(r *record.Record, t int64) bool {
	tl := &f.timeline
	switch {
	case !tl.seen:
		return false
	case r.Kind != record.KindTick || !tl.ticked:
		return f.ahead(t, tl.last)
	}
	back := t < tl.tick && f.prev != nil && !f.prev.restartedBy(r.Tick)
	return back || f.ahead(t, max(tl.tick, tl.last))
}

// restartedBy reports whether tk's counts fell from p's: another
// recorder, or the same one restarted.
func (p *fitTick) restartedBy(tk *record.Tick) bool {
	return fell(p.arr, tk.Arrivals) || fell(p.shed, tk.Shed) || fell(p.done, tk.Done) || fell(p.ref, tk.Refused)
}

// admit takes r into the fit, or holds it aside (see Fitter). A tick
// close to the timeline sets the held records aside; a second tick
// beyond it and later than the first, or a full hold, takes them.
func (f *Fitter) admit(r record.Record) {
	if !f.timeline.seen && !f.probe.done {
		f.probe.recs = append(f.probe.recs, r)
		if len(f.probe.recs) >= fitProbe {
			f.endProbe()
		}
		return
	}
	t := r.Time.UnixNano()
	if !f.outlying(&r, t) {
		if r.Kind == record.KindTick && len(f.hold.recs) > 0 {
			f.setAside()
		}
		f.take(r, t)
		return
	}
	h := &f.hold
	moved := false
	if r.Kind == record.KindTick {
		moved = h.ticks > 0 && t > h.lastTick
		if h.ticks == 0 || t > h.lastTick {
			h.lastTick = t
		}
		h.ticks++
	}
	h.recs = append(h.recs, r)
	if moved || len(h.recs) >= fitMaxHeld {
		f.release()
	}
}

// fitProbe is how many records open the fit's timeline. The hold judges
// a record against the times taken before it, and the first record has
// none: taken as it came, one dated an hour off would start the timeline
// there, and the whole recording would lie outside it. So the first
// records are collected, and the timeline starts at their median time,
// which a minority of bad times does not move (records come roughly in
// time order, so the good ones lie within the reach of one another);
// those beyond the reach of the median, either side, are set aside as
// later ones are.
const fitProbe = 16

// fitProbeState is the records collected before the timeline starts.
type fitProbeState struct {
	recs []record.Record
	done bool
}

// endProbe starts the timeline from the collected records (see
// fitProbe): it sets aside those far from their median time and takes
// the others, in the order they came. Source calls it when a file ends
// (its records count under its key hashing), Fit for a recording shorter
// than fitProbe records.
func (f *Fitter) endProbe() {
	recs := f.probe.recs
	if len(recs) == 0 {
		return // nothing yet: the probe goes on
	}
	f.probe = fitProbeState{done: true}
	times := make([]int64, len(recs))
	for i := range recs {
		times[i] = recs[i].Time.UnixNano()
	}
	slices.Sort(times)
	mid := times[len(times)/2]
	for _, r := range recs {
		if t := r.Time.UnixNano(); f.ahead(t, mid) || f.ahead(mid, t) {
			if r.Kind == record.KindTick {
				f.timeline.asideTks++
			} else {
				f.timeline.aside++
			}
			continue
		}
		f.admit(r)
	}
}

// release takes the held records: time did go on from there.
func (f *Fitter) release() {
	recs := f.hold.recs
	f.hold = fitHold{recs: recs[:0]}
	for _, r := range recs {
		f.take(r, r.Time.UnixNano())
	}
	clear(recs) // the ticks' counts, for the collector
}

// setAside drops the held records: time came back without them.
func (f *Fitter) setAside() {
	f.timeline.aside += len(f.hold.recs) - f.hold.ticks
	f.timeline.asideTks += f.hold.ticks
	clear(f.hold.recs)
	f.hold = fitHold{recs: f.hold.recs[:0]}
}

// take adds r, dated t, to the fit and to its timeline.
func (f *Fitter) take(r record.Record, t int64) {
	tl := &f.timeline
	if r.Kind == record.KindTick {
		tl.tick, tl.ticked = t, true
		f.tick(t, r.Tick)
	} else {
		f.add(&r)
		if end := recordEnd(&r, t, f.reach()); !tl.seen || end > tl.lastRec {
			tl.lastRec = end
		}
	}
	// A tick taken is where time is, even before records taken (a clock
	// set back for good: the timeline follows it).
	if !tl.seen || t > tl.last || r.Kind == record.KindTick {
		tl.last = t
	}
	tl.seen = true
}

// settle ends the hold at the end of the recording: what it holds is set
// aside, but the counts of its latest tick are taken at the latest time
// a record the fit took shows. A recorder's last tick comes at the
// latest time it saw, a far one included, with the counts since its
// previous tick, which no later tick will bring.
func (f *Fitter) settle() {
	var last *record.Tick
	var at int64
	for i := range f.hold.recs {
		if r := &f.hold.recs[i]; r.Kind == record.KindTick && (last == nil || r.Time.UnixNano() >= at) {
			last, at = r.Tick, r.Time.UnixNano()
		}
	}
	f.setAside()
	if tl := &f.timeline; last != nil && tl.ticked && tl.lastRec > tl.tick {
		f.tick(tl.lastRec, last)
		tl.tick, tl.last = tl.lastRec, tl.lastRec
	}
}

// recordEnd returns when the request of r, dated t, ended, as far as the
// recorder's clock went with it: a request record is dated at its
// arrival, and recorded at its end. It is at most reach after t: a
// damaged latency must not date the last tick (see settle) far ahead.
func recordEnd(r *record.Record, t int64, reach uint64) int64 {
	if r.Kind != record.KindRequest || !r.Timed {
		return t
	}
	d := uint64(max(r.Wait, 0)) + uint64(max(r.Latency, 0))
	if d > reach || t > math.MaxInt64-int64(d) {
		return t
	}
	return t + int64(d)
}

// asideNote says what was set aside.
func (f *Fitter) asideNote() (string, bool) {
	recs, ticks := f.timeline.aside, f.timeline.asideTks
	if recs+ticks == 0 {
		return "", false
	}
	return fmt.Sprintf("set aside %s and %s dated far from the rest of the recording (more than %v after it, or a tick dated back "+
		"before the previous one: a clock off, a bad timestamp?): they would have stretched its timeline; the counts of a tick set aside "+
		"reach the fit through the next tick taken (the last one's, at the latest time of a record taken)",
		plural(recs, "record", "records"), plural(ticks, "tick", "ticks"), time.Duration(f.reach())), true
}

// plural returns "n word", word in the plural unless n is 1.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
