package record

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// entry is a record on its way to the writer: a flat value, so that
// handing it over copies a few words and allocates nothing.
type entry struct {
	t, cost, actual, wait, lat int64 // t: Unix ns
	key                        uint64
	inflight                   int32
	status                     int16
	kind                       Kind
	class                      uint8
	reason                     uint8
	outcome                    uint8
	decision                   uint8
	flags                      uint8
	op, res                    uint8 // KindStore
}

const (
	flagQueued = 1 << iota
	flagTimed
)

// tickEntry is a tick on its way to the writer.
type tickEntry struct {
	t                    int64
	limit, inflight      int
	arr, shed, done, ref [shed.MaxClasses]uint64
	lost, sampleEach     uint64
}

// maxPendingTicks bounds the ticks waiting for the writer: at one a second
// it is minutes of a stalled writer.
const maxPendingTicks = 1024

type classCount struct{ arr, shed, done, ref atomic.Uint64 }

// watched is the limiter whose limit and in-flight work the ticks sample.
type watched struct {
	lim   *shed.Limiter
	names []string
}

// Recorder records a bounded, sampled stream of requests and limiter
// decisions and the limit over time (see the package documentation). Its
// methods never block and never read the clock: every time comes from the
// events and records it is given. It is safe for concurrent use.
type Recorder struct {
	cfg  Config
	ch   chan entry
	mask atomic.Uint64 // record the n-th when n&mask == 0
	seq  atomic.Uint64 // numbers limiter events, for sampling
	// storeSeq numbers the calls to a shared store, for sampling.
	storeSeq atomic.Uint64
	// lastT is the time the recorder is at (Unix ns): it stamps the
	// events the wall-clock API leaves untimed and the final tick. It
	// follows the records' times, but one far from it (a skewed caller,
	// a bad explicit time) only once the next confirms it (see
	// followFar), so that a single bad time dates nothing else.
	lastT atomic.Int64
	// suspects reports whether a time far from lastT is held as a
	// suspect (see followFar): ahead and behind, under tickMu.
	suspects atomic.Bool
	nextTick atomic.Int64
	lost     atomic.Uint64
	untimed  atomic.Uint64
	ended    atomic.Bool // Stop was called: push drops and counts
	counts   [shed.MaxClasses]classCount
	watch    atomic.Pointer[watched]
	keys     *KeyHasher // nil: unsalted

	srcMu  sync.Mutex // keySrc: set by drivers, read for each header
	keySrc keySource

	tickMu   sync.Mutex
	ticks    []tickEntry
	ahead    int64     // the suspect ahead of lastT, 0 for none
	behind   int64     // the suspect behind lastT, 0 for none
	heldTick tickEntry // the tick the suspect ahead owes, when held
	held     bool
	// behindTick is the tick the suspect behind owes: a clock stepped
	// back restarts the ticks at the first record after the step.
	behindTick tickEntry
	// after holds the untimed records that came after a suspect until it
	// is judged (see holdAfterSuspect); its capacity is fixed by New.
	after   []entry
	prevArr uint64
	prevT   int64
	taken   int // ticks taken; the first starts the counts
	// lastTaken is the last tick taken, its counts as written.
	lastTaken tickEntry

	wmu sync.Mutex // the writer's state below
	out sink

	runMu   sync.Mutex
	running bool
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// New returns a Recorder for cfg, or an error naming the invalid field
// (wrapping ErrInvalidConfig). Nothing is written until records come and
// the writer runs (Start) or Flush is called.
func New(cfg Config) (*Recorder, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	r := &Recorder{cfg: cfg, ch: make(chan entry, cfg.Buffer), after: make([]entry, 0, min(cfg.Buffer, maxHeldAfter))}
	if cfg.KeySalt != nil {
		if r.keys, err = NewKeyHasher(cfg.KeySalt); err != nil {
			return nil, err
		}
		r.cfg.KeySalt = nil // the hasher holds its own copy
	}
	if err := r.out.init(&r.cfg); err != nil {
		return nil, err
	}
	return r, nil
}

// KeyHash returns what the recording stores for the tenant key key: the
// salted hash when Config.KeySalt is set (see KeyHasher), else
// KeyHash(key). Use it for the keys given to Add and ObserveKeyed, so
// that every driver of one recorder hashes a tenant the same. It
// allocates nothing.
func (r *Recorder) KeyHash(key string) uint64 { return r.keys.Hash(key) }

// Watch makes the ticks sample l's limit and in-flight work, and names
// the classes after l's, unless CheckClassName refuses one of them (one
// longer than MaxClassNameBytes, which shed accepts): then the header names
// none, rather than one the Reader refuses. Call it once, right after
// shed.New, when the Recorder is l's Observer; the middleware calls it
// itself.
func (r *Recorder) Watch(l *shed.Limiter) {
	if l == nil {
		return
	}
	w := &watched{lim: l}
	for i := 0; i < shed.MaxClasses; i++ {
		n := l.ClassName(shed.Class(i))
		if n == "" {
			break
		}
		if CheckClassName(n) != nil {
			// A header the Reader would refuse: the classes go
			// unnamed (the Reader calls them class0, class1, ...).
			w.names = nil
			break
		}
		w.names = append(w.names, n)
	}
	r.watch.Store(w)
}

// Observe records one decision of a limiter: r is a shed.Observer. Pass r
// as shed.Config.Observer (then call Watch), or call it from an Observer
// of your own. Arrivals, rejections and releases are counted exactly; the
// records themselves are sampled (Config.MaxRecordsPerSecond). An event
// without a time (the wall-clock API times only a sample of permits)
// takes the recorder's time: the latest time of the records it follows
// (see the package documentation), never one lone record's far off; one
// that comes while a far time waits for confirmation takes it once
// judged (the far time if confirmed). An
// event the format cannot hold (negative cost or durations, an unknown
// reason or outcome) is counted, not recorded.
func (r *Recorder) Observe(ev shed.Event) { r.ObserveKeyed(ev, 0) }

// ObserveKeyed is Observe for the event of a request whose tenant key has
// the hash key (r.KeyHash of it, 0 for none), for drivers that know which
// request an event is about (the simulator). The key is written on the
// records of arrivals (admissions, rejections, cancellations), not on
// releases.
func (r *Recorder) ObserveKeyed(ev shed.Event, key uint64) {
	if int(ev.Class) >= shed.MaxClasses {
		return
	}
	if !ev.Time.IsZero() && !inUnixNano(ev.Time) {
		r.count(&ev) // counted, but its time cannot be written
		return
	}
	k := r.count(&ev)
	t := r.stamp(ev.Time, ev.InFlight)
	if k == 0 {
		return
	}
	if t == 0 {
		r.untimed.Add(1)
		return
	}
	if ev.Cost < 0 || ev.Wait < 0 || (ev.Timed && ev.Latency < 0) || ev.InFlight < 0 || ev.InFlight > math.MaxInt32 ||
		int(ev.Reason) >= shed.NumReasons || ev.Outcome > shed.Ignored {
		return // counted, but the format cannot hold it (see fits)
	}
	if r.seq.Add(1)&r.mask.Load() != 0 {
		return
	}
	e := entry{kind: k, t: t, class: uint8(ev.Class), reason: uint8(ev.Reason), inflight: int32(ev.InFlight)}
	switch k {
	case KindReleased:
		e.actual, e.outcome = ev.Cost, uint8(ev.Outcome)
		if ev.Timed {
			e.lat, e.flags = int64(ev.Latency), flagTimed
		}
	default:
		e.cost, e.wait, e.key = ev.Cost, int64(ev.Wait), key
		if ev.Queued {
			e.flags = flagQueued
		}
	}
	if r.suspects.Load() && ev.Time.IsZero() {
		r.holdAfterSuspect(e)
		return
	}
	r.push(e)
}

// count updates the exact counters for ev and returns the kind of record
// it makes, 0 for none.
func (r *Recorder) count(ev *shed.Event) Kind {
	cc := &r.counts[ev.Class]
	switch ev.Kind {
	case shed.EventQueued:
		cc.arr.Add(1) // its admission or rejection comes later, Queued
	case shed.EventAdmitted:
		if !ev.Queued {
			cc.arr.Add(1)
		}
		return KindAdmitted
	case shed.EventRejected:
		if ev.DryRun {
			return 0 // the admission that follows carries the reason
		}
		if !ev.Queued {
			cc.arr.Add(1)
		}
		cc.shed.Add(1)
		return KindRejected
	case shed.EventCancelled:
		cc.shed.Add(1)
		return KindCancelled
	case shed.EventReleased, shed.EventLeaked:
		cc.done.Add(1)
		return KindReleased
	}
	return 0
}

// Arrive counts a request of class c that reached admission, for drivers
// that record whole requests (KindRequest), and reports whether to record
// it. When it does, the caller times the request and calls Add once it
// ends; either way it calls Shed or Done. It costs one atomic add.
func (r *Recorder) Arrive(c shed.Class) bool {
	if int(c) >= shed.MaxClasses {
		return false
	}
	return r.counts[c].arr.Add(1)&r.mask.Load() == 0
}

// Refuse counts a request of class c that the driver refused on sight,
// before admission (KindRefused: the middleware's 413 for a body over
// its maximum, shedredis.ConcurrencyMiddleware's 429 for a tenant at its
// cap), and reports whether to record it: then the caller Adds a
// KindRefused record. Such a request is not an arrival (Arrive): it
// never reached admission. A fit must not offer a 413 to a simulated
// service as work; a tenant's 429 it offers to the cap it infers, as it
// does a rate limit's (the reason tells them apart). It costs one atomic
// add.
func (r *Recorder) Refuse(c shed.Class) bool {
	if int(c) >= shed.MaxClasses {
		return false
	}
	return r.counts[c].ref.Add(1)&r.mask.Load() == 0
}

// Shed counts a request of class c that was rejected or cancelled.
func (r *Recorder) Shed(c shed.Class) {
	if int(c) < shed.MaxClasses {
		r.counts[c].shed.Add(1)
	}
}

// Done counts admitted work of class c that ended.
func (r *Recorder) Done(c shed.Class) {
	if int(c) < shed.MaxClasses {
		r.counts[c].done.Add(1)
	}
}

// Add records rec, a record its caller sampled (see Arrive, Refuse and
// StoreCall); it does not count it. Tick records, records of unknown kinds, records
// without a time or with one outside the years 1678-2261, and records
// the format cannot hold (negative costs or durations, a Status outside
// 0-999, an InFlight outside the int32 range, an unknown Decision,
// Reason or Outcome; a KindStore record without Timed, with a class, a
// key, or an unknown Op or Result) are ignored. For a KindRequest
// record, Time is the arrival and the request ended at Time + Wait +
// Latency, which advances the ticks; a KindStore record advances nothing.
func (r *Recorder) Add(rec Record) {
	if rec.Kind == 0 || rec.Kind == KindTick || int(rec.Kind) >= len(kindNames) || rec.Time.IsZero() ||
		int(rec.Class) >= shed.MaxClasses || !fits(&rec) {
		return
	}
	if rec.Kind == KindStore {
		if storeFits(&rec) {
			r.addStore(&rec)
		}
		return
	}
	end := rec.Time
	if rec.Kind == KindRequest {
		end = end.Add(rec.Wait + rec.Latency)
	}
	if !inUnixNano(rec.Time) || !inUnixNano(end) {
		return
	}
	t := rec.Time.UnixNano()
	r.stamp(end, rec.InFlight)
	e := entry{kind: rec.Kind, t: t, class: uint8(rec.Class), reason: uint8(rec.Reason), cost: rec.Cost, actual: rec.Actual,
		wait: int64(rec.Wait), outcome: uint8(rec.Outcome), decision: uint8(rec.Decision), inflight: int32(rec.InFlight), status: int16(rec.Status)}
	if rec.Kind != KindReleased {
		e.key = rec.Key // the records of arrivals carry it (see Record.Key)
	}
	if rec.Queued {
		e.flags |= flagQueued
	}
	if rec.Timed {
		e.lat = int64(rec.Latency)
		e.flags |= flagTimed
	}
	r.push(e)
}

// The times Unix nanoseconds can hold (1677 to 2262): beyond them
// UnixNano wraps around.
var minUnixNano, maxUnixNano = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

func inUnixNano(t time.Time) bool { return !t.Before(minUnixNano) && !t.After(maxUnixNano) }

// fits reports whether the file format can hold rec's fields, as the
// Reader accepts them: anything else would be written wrapped (Status,
// InFlight) or as a line that stops every reader of the recording.
func fits(rec *Record) bool {
	return rec.Cost >= 0 && rec.Actual >= 0 && rec.Wait >= 0 && (!rec.Timed || rec.Latency >= 0) &&
		rec.Status >= 0 && rec.Status <= 999 && rec.InFlight >= 0 && rec.InFlight <= math.MaxInt32 &&
		rec.Decision <= Cancelled && int(rec.Reason) < shed.NumReasons && rec.Outcome <= shed.Ignored
}

// push hands e to the writer, or drops it when the buffer is full.
func (r *Recorder) push(e entry) {
	if r.ended.Load() {
		r.lost.Add(1)
		return
	}
	r.handOver(e)
}

// handOver is push once Stop may have begun: for the records that came
// before it and were held (see holdAfterSuspect).
func (r *Recorder) handOver(e entry) {
	select {
	case r.ch <- e:
	default:
		r.lost.Add(1)
	}
}

// maxHeldAfter bounds the untimed records held after a suspect: beyond
// it they are handed over at once, with the recorder's time.
const maxHeldAfter = 256

// holdAfterSuspect holds e, an untimed record that came while a time far
// from the recorder's is held as a suspect, until the suspect is judged:
// e came after it, so once it is confirmed e is dated from it, not from
// the time before the jump (see releaseAfterLocked). A suspect is judged
// at the next record, at the latest at Stop.
func (r *Recorder) holdAfterSuspect(e entry) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	switch {
	case r.ended.Load():
		r.lost.Add(1)
	case !r.suspects.Load(): // judged meanwhile
		e.t = r.lastT.Load()
		r.handOver(e)
	case len(r.after) == cap(r.after):
		r.handOver(e)
	default:
		r.after = append(r.after, e)
	}
}

// releaseAfterLocked hands over the untimed records held after a suspect
// now judged, dated at: the suspect's time when it was confirmed. With at
// 0 (not confirmed) they keep the recorder's time from before it.
func (r *Recorder) releaseAfterLocked(at int64) {
	for _, e := range r.after {
		if at != 0 {
			e.t = at
		}
		r.handOver(e)
	}
	r.after = r.after[:0]
}

// stamp returns t in Unix ns (the recorder's time when t is zero) and
// takes a tick when t reaches the next one. A time the recorder does not
// follow (see follow) is returned as it is, but takes no tick (yet).
func (r *Recorder) stamp(t time.Time, inflight int) int64 {
	if t.IsZero() {
		return r.lastT.Load()
	}
	ns := t.UnixNano()
	if !r.follow(ns, inflight) {
		return ns
	}
	if next := r.nextTick.Load(); ns >= next || r.jumpedBack(ns, next) {
		r.tick(ns, inflight, false)
	}
	return ns
}

// follow moves the recorder's time (lastT) to ns, and reports whether it
// did. A time within maxBackTicks periods of it moves it forward only,
// since records come roughly in time order: the request path costs an
// atomic load or two. A time further away, either side, is held as a
// suspect (see followFar).
func (r *Recorder) follow(ns int64, inflight int) bool {
	cur, w := r.lastT.Load(), r.window()
	if cur == 0 || near(ns, cur, w) {
		if ns > cur {
			r.lastT.Store(ns)
		}
		if r.suspects.Load() {
			r.tickMu.Lock()
			r.clearSuspectsLocked(0) // times went on from the recorder's own
			r.tickMu.Unlock()
		}
		return true
	}
	return r.followFar(ns, inflight)
}

// clearSuspectsLocked forgets the suspects and the held tick, and hands
// over the untimed records held after them, dated confirmed: the time of
// the suspect confirmed, 0 for none.
func (r *Recorder) clearSuspectsLocked(confirmed int64) {
	r.ahead, r.behind, r.held = 0, 0, false
	r.suspects.Store(false)
	r.releaseAfterLocked(confirmed)
}

// followFar is follow for a time ns far from the recorder's. The rule:
// a far time is held as a suspect until the next far time on the same
// side (ahead or behind) judges it, confirming it when not dated before
// it by more than the window, since time goes on from a real jump (a
// quiet spell, a clock stepped) and records after a lone bad time are
// before it; the recorder has no clock (drivers run in virtual time too),
// so nothing earlier can tell the two apart. The tick a suspect owes is
// sampled when it comes (counts, work in flight) and held, then taken at
// the suspect's time once confirmed or dropped if not (its counts go to
// the next tick), so that a quiet service, every record of which is far
// from the one before, gets every record's tick at its own time, one
// record late, a clock stepped either side gets a tick at the first
// record after the step, and a lone far time dates nothing. Untimed
// records that come meanwhile wait for the judgement (holdAfterSuspect).
//
// A confirmed suspect, ahead or behind (a clock stepped back: the ticks
// restart there), moves the recorder's time to the suspect's, not to the
// confirming time, which is judged in turn from there.
func (r *Recorder) followFar(ns int64, inflight int) bool {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	w := r.window()
	for {
		cur := r.lastT.Load()
		switch {
		case cur == 0 || near(ns, cur, w): // another caller moved the time
			if ns > cur {
				r.lastT.Store(ns)
			}
			r.clearSuspectsLocked(0)
			return true
		case ns > cur && r.ahead != 0 && (ns >= r.ahead || near(ns, r.ahead, w)):
			// Time went on from the suspect ahead: follow it, with its
			// tick, then judge ns from there.
			s, te, held := r.ahead, r.heldTick, r.held
			r.clearSuspectsLocked(s)
			if s <= cur { // passed meanwhile by records near the time
				continue
			}
			if held && te.t >= r.nextTick.Load() {
				r.takeLocked(te)
			}
			r.lastT.Store(s)
		case ns > cur:
			r.releaseAfterLocked(0) // a suspect before, if any, was not confirmed
			r.ahead, r.behind, r.held = ns, 0, false
			if ns >= r.nextTick.Load() {
				r.heldTick, r.held = r.sampleLocked(ns, inflight), true
			}
			r.suspects.Store(true)
			return false
		case r.behind != 0 && (ns >= r.behind || near(ns, r.behind, w)):
			// Time went back, and on from there: the ticks restart at
			// the suspect behind, then ns is judged from there.
			s, te := r.behind, r.behindTick
			r.clearSuspectsLocked(s)
			if r.jumpedBack(s, r.nextTick.Load()) {
				r.takeLocked(te)
			}
			r.lastT.Store(s)
		default:
			r.releaseAfterLocked(0)
			r.behind, r.behindTick = ns, r.sampleLocked(ns, inflight)
			r.suspects.Store(true)
			return false
		}
	}
}

// window is how far (ns) from the recorder's time a record's time may be
// and still be followed at once: maxBackTicks periods.
func (r *Recorder) window() int64 {
	every := int64(r.cfg.TickEvery)
	if every > math.MaxInt64/maxBackTicks {
		return math.MaxInt64
	}
	return maxBackTicks * every
}

// near reports whether a and b are at most w apart, for any int64s.
func near(a, b, w int64) bool {
	if a < b {
		a, b = b, a
	}
	return uint64(a)-uint64(b) <= uint64(w)
}

// maxBackTicks is how many tick periods time may go back before the ticks
// restart from there: records are only roughly in time order, but a time
// far ahead (a skewed caller, a wall clock stepped back) must not stop the
// ticks, and with them the sampling, until time reaches it again.
const maxBackTicks = 10

// jumpedBack reports whether ns is so far before the next tick that time
// went back.
func (r *Recorder) jumpedBack(ns, next int64) bool {
	every := int64(r.cfg.TickEvery)
	if every > math.MaxInt64/(2*maxBackTicks) {
		return false // periods that long: no time is that far back
	}
	return ns < next-maxBackTicks*every
}

// tick samples the counters, the limit and the work in flight at ns, the
// first time seen at or after a multiple of TickEvery (or, final, the last
// time seen), and re-chooses the sampling from the arrival rate since the
// previous tick. The first tick writes zero counts (see startCounts).
func (r *Recorder) tick(ns int64, inflight int, final bool) {
	r.tickMu.Lock()
	defer r.tickMu.Unlock()
	if final {
		// Stop judges a suspect left unconfirmed: a lone far time dates
		// nothing, and its counts go to the final tick.
		r.clearSuspectsLocked(0)
	}
	if next := r.nextTick.Load(); (!final && ns < next && !r.jumpedBack(ns, next)) || (final && ns <= r.prevT && !r.countedSince(ns)) {
		return // another caller took this tick
	}
	// Time went on from the recorder's own (or, final, ends there): a
	// suspect's tick, sampled before this one, must not follow it.
	r.clearSuspectsLocked(0)
	r.takeLocked(r.sampleLocked(ns, inflight))
}

// sampleLocked returns the tick at ns: the counters, the limit and the
// work in flight now. It changes nothing.
func (r *Recorder) sampleLocked(ns int64, inflight int) tickEntry {
	te := tickEntry{t: ns, inflight: inflight, lost: r.lost.Load()}
	if w := r.watch.Load(); w != nil {
		te.limit, te.inflight = w.lim.Limit(), w.lim.InFlight()
	}
	for i := range r.counts {
		c := &r.counts[i]
		te.arr[i], te.shed[i], te.done[i], te.ref[i] = c.arr.Load(), c.shed.Load(), c.done.Load(), c.ref.Load()
	}
	return te
}

// takeLocked takes the tick te: the next is due at the period after it,
// and the sampling is re-chosen from the rate of arrivals (and store
// calls) since the previous.
func (r *Recorder) takeLocked(te tickEntry) {
	ns := te.t
	every := int64(r.cfg.TickEvery)
	r.nextTick.Store((ns/every + 1) * every)
	// What the sampling applies to: arrivals, refusals and store calls
	// (several per request with shedredis's Recorder).
	arr := r.storeSeq.Load()
	for i := range te.arr {
		arr += te.arr[i] + te.ref[i]
	}
	if limit := r.cfg.MaxRecordsPerSecond; limit > 0 && r.prevT != 0 && ns > r.prevT {
		rate := float64(arr-r.prevArr) / (float64(ns-r.prevT) / 1e9)
		var mask uint64
		if rate > limit {
			// The smallest power of two that brings the rate under the cap.
			every := uint64(rate/limit) + 1
			mask = 1<<bits.Len64(every-1) - 1
		}
		r.mask.Store(mask)
	}
	r.prevArr, r.prevT = arr, ns
	r.startCounts(&te)
	r.lastTaken = te
	te.sampleEach = r.mask.Load() + 1
	if len(r.ticks) >= maxPendingTicks {
		r.lost.Add(1)
		return
	}
	r.ticks = append(r.ticks, te)
}

// startCounts zeroes the counts of the recorder's first tick: the counts
// start there. Readers take counts only as differences between two ticks
// (a reader cannot tell a recorder's first tick from the first one left
// in a directory whose oldest files were deleted), so what the first
// tick counted was lost to every fit: the arrival that brought the first
// time (counted before its time is read) and, from the middleware, every
// request that arrived before the first one ended (counted on arrival,
// timed when added). The next tick counts them instead, a little later
// than they came.
func (r *Recorder) startCounts(te *tickEntry) {
	r.taken++
	if r.taken == 1 {
		te.arr, te.shed, te.done, te.ref = [shed.MaxClasses]uint64{}, [shed.MaxClasses]uint64{}, [shed.MaxClasses]uint64{}, [shed.MaxClasses]uint64{}
	}
}

// countedSince reports whether the last tick taken is at ns, and
// something was counted since: the final tick is then taken at the same
// time, so that the ticks count every request even when the last ones
// came at that instant (a stopped clock in a test) or at a time Stop
// leaves unconfirmed (the last record of a quiet service).
func (r *Recorder) countedSince(ns int64) bool {
	if r.taken == 0 || ns != r.prevT {
		return false
	}
	last := &r.lastTaken
	for i := range r.counts {
		c := &r.counts[i]
		if c.arr.Load() != last.arr[i] || c.shed.Load() != last.shed[i] || c.done.Load() != last.done[i] || c.ref.Load() != last.ref[i] {
			return true
		}
	}
	return false
}

// takeTicks returns the pending ticks and clears them.
func (r *Recorder) takeTicks(dst []tickEntry) []tickEntry {
	r.tickMu.Lock()
	dst = append(dst[:0], r.ticks...)
	r.ticks = r.ticks[:0]
	r.tickMu.Unlock()
	return dst
}

// classNames returns the class names for a header.
func (r *Recorder) classNames() []string {
	if w := r.watch.Load(); w != nil {
		return w.names
	}
	return r.cfg.Classes
}

// Pending returns how many records wait for the writer. A driver without
// the writer goroutine (a simulator) calls Flush when it passes a bound.
func (r *Recorder) Pending() int { return len(r.ch) }

// Capacity returns the size of the buffer (Config.Buffer).
func (r *Recorder) Capacity() int { return cap(r.ch) }

// Stats reports what the recorder did so far.
type Stats struct {
	// Written counts the records written (ticks included).
	Written uint64
	// Lost counts the records not written: dropped while the writer was
	// behind, over the size cap, or after a write error.
	Lost uint64
	// Untimed counts limiter events that came without a time before any
	// time was seen, and were not recorded.
	Untimed uint64
	// Files is the number of files started (Dir), Bytes what the current
	// file (or the stream) holds.
	Files int
	Bytes int64
	// Err is the first write error. With Config.Writer nothing more is
	// written after it; with Config.Dir the next flush (every
	// Config.FlushEvery, or Flush) starts a new file and writes again,
	// and the records in between are lost, and counted.
	Err error
}

// Stats returns the recorder's counters. It never waits for the writer.
func (r *Recorder) Stats() Stats {
	s := Stats{Written: r.out.written.Load(), Files: int(r.out.files.Load()), Bytes: r.out.bytes.Load()}
	if e := r.out.errp.Load(); e != nil {
		s.Err = *e
	}
	s.Lost = r.lost.Load()
	s.Untimed = r.untimed.Load()
	return s
}
