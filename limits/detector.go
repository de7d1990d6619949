package limits

import (
	"math"
	"time"
)

// detector reads windows against what it has learned of the dependency
// without congestion (its latency, and the share of work it drops
// anyway) and says whether a window shows congestion. Gradient and AIMD
// share it; they differ in how they move the limit.
type detector struct {
	// Configuration.
	tolerance    float64       // least latency ratio that is congestion
	significance float64       // standard deviations of noise to exceed
	dropTol      float64       // drop share that is never congestion
	ceiling      time.Duration // absolute latency ceiling, 0: none
	minSamples   int           // timed successes for a latency
	quantile     bool          // compare Latency (a quantile), not Median
	minUtil      float64       // MinUtilization
	latency      bool          // latency signals at all (AIMD may turn them off)
	anyDrop      bool          // any drop is congestion (AIMD's Netflix mode)
	// queueTeaches: a window in which the limit binds with a latency
	// that shows a queue may still teach the baseline (Gradient's choice;
	// see learn).
	queueTeaches bool

	base         baseline       // latency without congestion
	bg           dropBackground // drops without congestion
	prevInFlight float64        // mean work in flight of the last window
	seen         int            // windows with a latency, up to the span
	// raised: the baseline in force was re-learned above the one before
	// (lowered, the baseline of a faster dependency), and has not come
	// back near it.
	raised  bool
	lowered float64
	seeded  bool // the baseline is only the seed of an unsteady window
	// censored: that window was too short for its latencies, and the
	// seed says no latency is congestion.
	censored bool
}

// unraised reports whether the baseline is learned and is not one that
// re-learning raised: a latency at or below it then shows no queue at
// all. At or below a raised baseline, the limit already sits at the knee
// of a slower dependency.
func (d *detector) unraised() bool { return d.base.learned() && !d.raised }

func newDetector(tolerance, significance, dropTol float64, ceiling time.Duration, minUtil float64, span int, w WindowConfig) detector {
	return detector{
		tolerance: tolerance, significance: significance, dropTol: dropTol, ceiling: ceiling,
		minSamples: w.MinSamples, quantile: w.Quantile > 0, minUtil: minUtil, latency: true,
		base: baseline{span: span}, bg: dropBackground{span: span},
	}
}

// signals is what one window says, set against what was learned.
type signals struct {
	hasLat   bool    // enough timed successes for a latency
	dur      float64 // the window's length, ns
	lat      float64 // the compared statistic, ns (at least 1)
	mean     float64 // mean latency, ns (Little's law)
	ratio    float64 // lat / baseline; 1 until a baseline is learned
	thresh   float64 // ratio above which latency is congestion
	inFlight float64 // mean work in flight
	peak     float64 // largest work in flight
	n, drops int     // timed successes and drops
	binding  bool    // the work in flight reached the limit
	used     bool    // ... or at least MinUtilization of it
	// steady: the work in flight changed by less than a quarter since the
	// last window. A window in which it grew holds the fast part of the
	// new work and not yet its slow part; one in which it fell, the slow
	// rest of earlier work: their latency is the admission history's, not
	// the dependency's.
	steady bool
	// excused: while the background is learned, the drops exceed the
	// tolerance without clearly exceeding it: too few units of work to
	// tell, so neither congestion nor the background.
	excused bool

	latCong, dropCong, ceilCong bool
	// crowdCong: the drops are congestion only because they crowd at
	// the top of the limit (see crowded); dropCong is set with it.
	crowdCong bool
	// dead: the window closed on its samples and every one was a drop:
	// the dependency served nothing in time, so admitting less loses
	// nothing, whatever the work in flight used of the limit (released
	// at their deadlines, the drops may be work it still holds).
	dead bool
}

func (s *signals) congested() bool { return s.latCong || s.dropCong || s.ceilCong }

// queueForming reports a latency above the baseline by more than the
// square root of the threshold, its noise, but not clearly congested (too
// little, or in a window whose work in flight moved): a queue may be
// forming, and growing into it overshoots. A censored seed is too fast by
// the slow part of the work, so against it only a latency past the
// threshold shows a queue.
func (s *signals) queueForming(censored bool) bool {
	return s.ratio > math.Sqrt(s.thresh) && !(censored && s.ratio <= s.thresh)
}

// dropReason names a cut on drops: beyond the background, or crowded.
func (s *signals) dropReason() Reason {
	if s.crowdCong {
		return ReasonCutCrowd
	}
	return ReasonCutDrops
}

func (s *signals) dropRate() float64 {
	if s.n+s.drops == 0 {
		return 0
	}
	return float64(s.drops) / float64(s.n+s.drops)
}

// throughput is the window's completions per ns, by Little's law.
func (s *signals) throughput() float64 { return s.inFlight / s.mean }

// read reads window w of a limit at limit.
func (d *detector) read(w *WindowSummary, limit float64) signals {
	s := signals{
		hasLat: w.Samples >= max(d.minSamples/2, 1),
		mean:   max(float64(w.Mean), 1), inFlight: w.MeanInFlight, peak: float64(w.MaxInFlight),
		dur: float64(w.End.Sub(w.Start)),
		n:   w.Samples, drops: w.Drops, ratio: 1, thresh: d.tolerance,
	}
	s.lat = max(float64(w.Median), 1)
	if d.quantile {
		s.lat = max(float64(w.Latency), 1)
	}
	s.steady = math.Abs(s.inFlight-d.prevInFlight) <= steadyShare*max(d.prevInFlight, 1)
	enforced := max(math.Floor(limit), 1)
	s.binding = s.peak >= enforced
	s.used = s.peak >= d.minUtil*enforced
	if s.hasLat && d.base.learned() {
		s.ratio = s.lat / d.base.value()
		// The noise of this window's median, from its own spread: a
		// heavy tail or a small window moves it by chance alone.
		s.thresh = max(d.tolerance, math.Exp(d.significance*w.MedianErr))
		// An unsteady window must show twice the excess.
		s.latCong = d.latency && s.ratio > s.thresh && (s.steady || s.ratio > s.thresh*s.thresh) && !d.censored
	}
	if d.learning() {
		// The background is still being learned: before it is known,
		// drops are congestion only when clearly above the tolerance (or
		// learningDrops when none is set), by the test they face later.
		// At the floor of a slow dependency a window holds a handful of
		// units of work, and two slow ones in five are no evidence: cut
		// on them, the limit stayed at its floor, its windows too small
		// to ever learn the background.
		tol := d.dropTol
		if tol <= 0 {
			tol = learningDrops
		}
		s.dropCong = clearlyAbove(s.drops, s.n+s.drops, tol, d.significance, tol)
		s.excused = !s.dropCong && s.dropRate() > tol
	} else {
		s.dropCong = d.bg.excess(s.drops, s.n+s.drops, d.significance, d.dropTol)
	}
	// Drops are a congestion the limit admitted if the work in flight
	// reached the limit, or if they are timeouts and the work in flight
	// queued or used the limit. Errors below the limit are the
	// dependency's failures: a cut would only turn away work it serves
	// (a latency that rose with them cuts on its own).
	s.dropCong = s.dropCong && (s.binding || (!errorDrops(w) && (s.latCong || s.used)))
	s.dropCong = s.dropCong || (d.anyDrop && s.drops > 0)
	s.crowdCong = !s.dropCong && crowded(w)
	s.dropCong = s.dropCong || s.crowdCong
	s.ceilCong = s.hasLat && d.ceiling > 0 && s.lat > float64(d.ceiling)
	s.dead = w.Samples == 0 && w.Drops >= max(d.minSamples, 1)
	s.dropCong = s.dropCong || s.dead
	return s
}

// errorDrops reports whether the drops of window w are mostly errors
// rather than timeouts: errorShare of its timed drops, or more, failed
// no slower than the median success (WindowSummary.FastDrops). A window
// without a success has no latency to tell them by, and its drops count
// as timeouts.
func errorDrops(w *WindowSummary) bool {
	return w.Samples > 0 && w.TimedDrops > 0 && float64(w.FastDrops) >= errorShare*float64(w.TimedDrops)
}

// crowded reports whether the work window w admitted with the limit
// nearly full succeeded less than crowdShare as often as the rest of the
// work it admitted (WindowSummary.Fresh: errors left out): a queue in
// front of the dependency that made work miss its deadline, however
// steady that drop rate was and whatever the latency of the successes
// (which beat their deadlines) showed. Timeouts that come from the work
// itself, such as a heavy tail past its deadline, fall on crowded and
// other work alike. The test takes the timed work for a fair sample of
// both groups. It is not quite one above shed's MaxSamplesPerSecond when
// a class queues: shed times every admission from its queue, which takes
// a slot at the limit, and only a share of the others, so the crowded
// group leans toward work that waited.
func crowded(w *WindowSummary) bool {
	others, otherDrops := w.Fresh-w.Crowded, w.FreshDrops-w.CrowdedDrops
	if w.Crowded < crowdMinWork || w.CrowdedDrops < crowdMinDrops || others < crowdMinWork {
		return false
	}
	served := 1 - float64(w.CrowdedDrops)/float64(w.Crowded)
	return served < crowdShare*(1-float64(otherDrops)/float64(others))
}

// dropCut is the factor by which drops beyond the background cut a limit:
// in proportion to their excess share, since the dependency served the
// rest in time; by backoff at least and, beyond it, by half at most.
func (d *detector) dropCut(s *signals, backoff float64) float64 {
	return min(backoff, max(0.5, 1-(s.dropRate()-d.bg.rate())))
}

// draining reports whether a window's drops are of work admitted under an
// earlier limit: the work in flight is still above limit, so nothing new
// was admitted, and the cut that lowered the limit already answered them.
// With a heavy tail the drain takes many windows, and a cut on each would
// take the limit far below the knee. Latency still cuts: old work measures
// the dependency's speed as well as new. While the background is still
// being learned, the drops may be its own.
func (d *detector) draining(s *signals, limit float64) bool {
	return s.dropCong && !s.latCong && s.inFlight > max(math.Floor(limit), 1) && !d.learning()
}

// learn takes what a window without congestion teaches: the background
// drop rate and the baseline latency (drops that admitting less does not
// reduce are learned by the episode instead). While the limit binds, part of
// the latency may be a queue the limit admitted, so the baseline then
// only learns downwards: it must never learn the queue it is there to
// detect.
func (d *detector) learn(s *signals) {
	defer func() { d.prevInFlight = s.inFlight }()
	if s.hasLat && d.seen < d.base.span {
		d.seen++
	}
	if !s.hasLat {
		return
	}
	if !s.steady && !d.base.learned() {
		// Something to compare the next windows with, until the first
		// steady one, even from a congested window: a first limit above
		// the capacity of a dependency that thrashes queues every later
		// window, and only the work that started before the queue
		// formed shows its service time.
		d.seed(s)
	}
	if s.congested() {
		return
	}
	if !s.steady {
		if s.binding && s.inFlight < d.prevInFlight && s.ratio < 1/s.thresh {
			// The limit binds and the work in flight fell, so the window
			// holds the slow rest of earlier work, and it is still clearly
			// faster than the baseline: the baseline holds a queue that
			// the limit admitted.
			d.base.follow(math.Log(s.lat), 0.5)
		}
		return
	}
	if !d.queueTeaches && s.binding && s.ratio > math.Sqrt(s.thresh) && !d.censored {
		// AIMD: the limit binds and the latency shows a queue, which the
		// limit admitted; learning it would let the next queue grow
		// longer. Gradient's growth stops at that latency: a baseline
		// that could not learn it would stop its growth for good.
		return
	}
	if d.seeded {
		// The seed came from a window whose work in flight grew from
		// nothing: only the fast part of its work had completed, and
		// with latencies near the window's length it is far too fast
		// to average in.
		d.base = baseline{span: d.base.span}
		d.seeded, d.censored = false, false
	}
	if !s.excused {
		// Learned, the excused drops of an overload's small windows
		// became its background, and the overload went on uncut.
		d.bg.add(s.drops, s.n+s.drops)
	}
	x := math.Log(s.lat)
	switch {
	case d.raised && s.lat*s.lat <= d.lowered*d.base.value():
		// A dependency re-learned as slower is back nearer its faster
		// latency than the slow one: take the faster baseline back at
		// once, while learning too. Whatever is left above it is a queue
		// the limit admits (cut as usual) or a new normal (re-learned as
		// usual); stepping the baseline down instead would stop on that
		// queue, since the latency falls only as far as the limit lets it.
		d.base.reset(math.Log(d.lowered))
		d.raised = false
	case d.base.n < d.base.span:
		// Learning: a plain mean of the first windows, whatever they show,
		// so that a few fast ones at the start do not set it low for good.
		d.base.add(x)
	case s.ratio < 1/s.thresh:
		// Clearly faster than the baseline: the dependency sped up.
		d.base.follow(x, 0.5)
		if d.raised && d.base.value() <= raisedShare*d.lowered {
			d.raised = false // back near the baseline before the raise
		}
	case !s.binding || s.ratio <= 1:
		d.base.add(x)
	}
}

// seed takes the latency of window s, whose work in flight grew from
// nothing, as the baseline until the first steady window without
// congestion replaces it. Work that arrived at t shows in such a window
// only if its latency is below the window's length minus t: in a window
// shorter than ten times its median, much of the latency was still to
// come, and the seed judges nothing (censored).
func (d *detector) seed(s *signals) {
	d.base.add(math.Log(s.lat))
	d.seeded, d.censored = true, s.dur < censoredSpan*s.lat
}

// learning reports whether the detector is still learning what the
// dependency looks like without congestion: its first span windows with a
// latency, congested or not (counting only the windows it learned from
// would keep it learning for as long as its own rules see congestion).
func (d *detector) learning() bool { return d.seen < d.base.span }

// relearn takes lat as the baseline and drops in n units of work as the
// background: the dependency's new normal. Above a settled baseline it is
// a raise, which learn takes back when the dependency returns; above a
// young one it corrects the start-up's first guess.
func (d *detector) relearn(s *signals, lat float64, drops, n int) {
	d.prevInFlight = s.inFlight // what the next window's steadiness is measured against
	before, settled := d.base.value(), d.settled()
	d.base.reset(math.Log(lat))
	d.bg.reset(drops, n)
	if lat > before && !d.raised && settled {
		d.raised, d.lowered = true, before
	}
}

// settled reports whether the baseline is the dependency's rather than
// the start-up's guess: a quarter of its span of steady windows agreed on
// it (not a seed). Dependencies slow down in a service's first minute too;
// read as a correction, such a slowdown left the slow baseline in force
// for the rest of the span after it ended, so that a second one went
// uncut, and let the limit grow by half at its end.
func (d *detector) settled() bool {
	return !d.learning() || (!d.seeded && 4*d.base.n >= d.base.span)
}

// episode follows one congestion: from a congested window for as long as
// windows are congested or the limit binds. By Little's law a window's
// throughput is its work in flight over its mean latency. Above the
// dependency's knee, admitting less keeps the throughput and shortens the
// queue, so the latency falls: the congestion is ours and the cuts are
// right. Below the knee, admitting less only loses throughput: the
// latency there, high or low, is the dependency's.
type episode struct {
	active   bool
	inFlight float64 // the most work in flight in a window of the episode
	xBest    float64 // best throughput seen
	knee     float64 // least work in flight with a throughput near the best
	kneeLat  float64 // the latency at the knee
	held     int     // windows held; 0: cutting
	// queueCuts counts the cuts made because cutting cost no throughput.
	queueCuts int
	holdLat   float64 // latency when the hold began
	// Drops and work of the held windows: the background on re-learning.
	holdDrops, holdN int
	// The latency (0: none) and work in flight of the last window.
	lastLat, lastInFlight float64
}

type epVerdict uint8

// epRules are the choices a limit makes in its episodes.
type epRules struct {
	// blind: a window with too few successes for a latency served next
	// to nothing, and its throughput counts as none, so errors that the
	// cuts did not reduce still end in a hold, not at the floor
	// (Gradient), once a later window than the episode's first measured
	// a throughput to compare with. Without it (AIMD), such a window
	// teaches nothing.
	blind bool
	// noQueueCut: a cut that lowered the work in flight while the latency
	// stayed congested and no lower than its noise allows removed no
	// queue, and may end the cutting at once (Gradient). AIMD does
	// without it: on the scenario families it cost AIMD more than it
	// gained.
	noQueueCut bool
}

const (
	epCut epVerdict = iota
	epHold
)

// observe takes one window of the episode and says whether to go on
// cutting or to hold, by rules r.
func (e *episode) observe(s *signals, atFloor bool, r epRules) epVerdict {
	if !s.hasLat && (!r.blind || !e.active) {
		return epCut
	}
	x, lat := 0.0, e.kneeLat
	if s.hasLat {
		x, lat = s.throughput(), s.lat
	}
	if !e.active {
		// The first window mixes fast completions of earlier work with
		// slow ones of new work, and Little's law does not hold across
		// such a change: its throughput is no reference.
		*e = episode{active: true, inFlight: s.inFlight, knee: s.inFlight, kneeLat: s.lat,
			lastLat: s.lat, lastInFlight: s.inFlight}
		return epCut
	}
	e.inFlight = max(e.inFlight, s.inFlight)
	switch {
	case x > 1.1*e.xBest:
		e.xBest, e.knee, e.kneeLat = x, s.inFlight, s.lat
	case x >= kneeShare*e.xBest:
		e.xBest = max(e.xBest, x)
		if s.inFlight < e.knee {
			e.knee, e.kneeLat = s.inFlight, s.lat
		}
	}
	if e.held > 0 {
		if s.hasLat && s.lat > s.thresh*e.holdLat {
			// Worse again: new congestion on top of the old.
			*e = episode{active: true, inFlight: s.inFlight, xBest: x, knee: s.inFlight, kneeLat: s.lat,
				lastLat: s.lat, lastInFlight: s.inFlight}
			return epCut
		}
		e.held++
		e.holdDrops += s.drops
		e.holdN += s.n + s.drops
		return epHold
	}
	// A limit at its floor cannot be cut: drops that go on there with the
	// latency back within its threshold are the dependency's (or a retry
	// storm's late attempts), so it holds however high the throughput.
	dropsAtFloor := atFloor && s.hasLat && !s.latCong
	noQueueCut := r.noQueueCut && s.latCong && e.lastLat > 0 &&
		s.inFlight < e.lastInFlight && s.lat*math.Sqrt(s.thresh) >= e.lastLat
	e.lastLat, e.lastInFlight = 0, s.inFlight
	if s.hasLat {
		e.lastLat = s.lat
	}
	cutDeep := s.inFlight <= (1-relearnCut)*e.inFlight || atFloor || noQueueCut
	if dropsAtFloor || (cutDeep && x < holdThroughput*e.xBest) {
		e.held, e.holdLat, e.holdDrops, e.holdN = 1, lat, s.drops, s.n+s.drops
		return epHold
	}
	return epCut
}

// heldLat is the latency a hold re-learns as the baseline: the window's,
// or, when it had too few successes for one, the latency the hold began
// with.
func (e *episode) heldLat(s *signals) float64 {
	if s.hasLat {
		return s.lat
	}
	return e.holdLat
}

// afterCut decides a window without congestion in an episode at limit lim,
// from the episode before (prev) and after it (e); ok is false when the
// episode ends. By Little's law, work in flight that cutting removes
// without losing throughput (keeping keep of the best) was queue: while
// that holds the limit goes on shrinking by backoff (the baseline may hold
// the very queue being cut, so the ratio to it says nothing; a small step
// overshoots the knee by little). A cut that raised the throughput removed
// a queue that was costing the dependency work, and cutting goes on too.
// Once a cut costs throughput, the knee was passed: its latency becomes
// the baseline and the limit returns to it. A limit at its floor (atFloor)
// ends the episode: a cut there removes nothing, and a throughput above
// the episode's best is then the dependency's recovery, which only growth
// can use.
func (e episode) afterCut(s *signals, prev episode, lim, backoff, keep float64, atFloor bool) (d decision, ok bool) {
	x := s.throughput()
	switch {
	case prev.xBest == 0, atFloor:
	case s.inFlight < prev.inFlight && x >= keep*prev.xBest:
		e.queueCuts++
		return decision{limit: lim * backoff, reason: ReasonCutQueue, ep: e}, true
	case e.queueCuts > 0 && x < keep*prev.xBest:
		return decision{limit: max(lim, e.knee), reason: ReasonRelearn,
			relearnLat: e.kneeLat, relearnDrops: s.drops, relearnN: s.n + s.drops}, true
	}
	return decision{}, false
}

// demandCap is the most a limit grows to on windows whose largest work in
// flight was peak: the limit that this work uses to MinUtilization (and
// always one more than it).
func demandCap(peak, minUtil float64) float64 { return max(peak/minUtil, peak+1) }

// unusedRun follows the windows in a row whose work in flight did not use
// the limit. After span of them the limit falls to the demand cap of
// their largest work in flight, as TCP's congestion window validation
// (RFC 7661) shrinks a window the sender did not use: headroom no window
// tested protects nothing, and when the dependency slows, all of it
// fills with a queue at once.
type unusedRun struct {
	windows int
	peak    float64
}

// decayed returns the limit after one more unused window s, and whether
// it ends the run.
func (r *unusedRun) decayed(s *signals, span int, minUtil float64) (float64, bool) {
	if r.windows+1 < span {
		return 0, false
	}
	return demandCap(max(r.peak, s.peak), minUtil), true
}

// note counts window s in the run when it left the limit unused, and
// ends the run otherwise or when it reached span.
func (r *unusedRun) note(unused bool, s *signals, span int) {
	if !unused || r.windows+1 >= span {
		*r = unusedRun{}
		return
	}
	r.windows++
	r.peak = max(r.peak, s.peak)
}
