package limits

import "math"

// gradientState is what a Gradient has learned.
type gradientState struct {
	limit              float64
	det                detector
	slowStart          bool
	ep                 episode
	reason             Reason
	decisions          decisions
	windows, relearned uint64
	unused             unusedRun
	cliff              dropCliff
}

// decision is what a window does to the limit, and why.
type decision struct {
	limit  float64
	reason Reason
	ep     episode // the episode after this window
	// On re-learning: the new baseline latency, and the drops and work
	// that make the new background.
	relearnLat             float64
	relearnDrops, relearnN int
}

// decide is the whole of Gradient's policy: from a window's signals and
// what was learned, the next limit and the reason. It changes nothing.
func (g *Gradient) decide(s *signals) decision {
	st, c := &g.st, &g.cfg
	lim := st.limit
	ep := st.ep
	// An episode begins with congestion and lasts while the limit binds:
	// its cuts are an experiment on the dependency.
	if !s.congested() && !(ep.active && s.binding && s.hasLat) {
		return g.grow(s)
	}
	if st.det.draining(s, lim) {
		return decision{limit: lim, reason: ReasonDrain, ep: ep}
	}
	if s.dead {
		return deadDecision(s, &st.det, ep, lim, float64(c.MinLimit), c.Backoff)
	}
	prev := ep // before this window: what the cuts are measured against
	atFloor := lim <= float64(c.MinLimit)
	if !s.ceilCong && ep.observe(s, atFloor, epRules{blind: true, noQueueCut: true}) == epHold {
		if ep.held > c.RelearnWindows {
			return decision{limit: max(lim, ep.knee), reason: ReasonRelearn,
				relearnLat: ep.heldLat(s), relearnDrops: ep.holdDrops, relearnN: ep.holdN}
		}
		return decision{limit: lim, reason: ReasonHold, ep: ep}
	}
	if !s.congested() {
		if d, ok := ep.afterCut(s, prev, lim, c.Backoff, queueCutKeep, atFloor); ok {
			return d
		}
		return g.grow(s) // the episode ends
	}
	next, reason := lim, ReasonNone
	if s.latCong {
		// The gradient: admitting thresh/ratio of the work would bring
		// the latency back to the threshold, were it all queueing. Only
		// Smoothing of that cut applies per window, and never more than
		// half.
		grad := max(0.5, s.thresh/s.ratio)
		next, reason = lim*(1-c.Smoothing*(1-grad)), ReasonCutLatency
	}
	if f := st.det.dropCut(s, c.Backoff); s.dropCong && lim*f < next {
		next, reason = lim*f, s.dropReason()
	}
	if s.ceilCong && lim*c.Backoff < next {
		next, reason = lim*c.Backoff, ReasonCutCeiling
	}
	return decision{limit: next, reason: reason, ep: ep}
}

// grow returns the decision after a window without congestion: the
// limit grows while the work in flight uses it and shows no queue.
func (g *Gradient) grow(s *signals) decision {
	st, c := &g.st, &g.cfg
	lim := st.limit
	switch {
	case !s.hasLat:
		return decision{limit: lim, reason: ReasonIdle}
	case !s.used:
		if capAt, ok := st.unused.decayed(s, c.BaselineWindows, c.MinUtilization); ok {
			return decision{limit: min(lim, capAt), reason: ReasonUnused}
		}
		return decision{limit: lim, reason: ReasonUnused}
	case s.queueForming(st.det.censored):
		return decision{limit: lim, reason: ReasonQueue}
	}
	a := g.allowance(lim)
	next, reason := lim+a, ReasonGrow
	switch {
	case st.slowStart:
		next, reason = lim*c.Growth, ReasonSlowStart
	case s.inFlight >= regrowShare*math.Floor(lim) && s.ratio <= 1+1e-9 && st.det.unraised():
		// No queue at all while the work in flight fills the limit (on
		// average, not in a burst): the dependency has room (it got back
		// servers it had lost). Not on a baseline that re-learning
		// raised: that one is the knee of a slower dependency, where the
		// limit already is.
		next, reason = lim*regrowth, ReasonRegrow
	default:
		if capped, near := st.cliff.cap(lim, next, a); near {
			next, reason = capped, ReasonCreep
		}
	}
	// Not past the point where the work in flight would no longer use
	// the limit: that is headroom nobody asked for. A limit the work in
	// flight filled may always grow by one.
	if capAt := demandCap(s.peak, c.MinUtilization); next > capAt {
		next = max(lim, capAt)
		if next == lim {
			reason = ReasonUnused
		}
	}
	return decision{limit: next, reason: reason}
}

func (g *Gradient) allowance(lim float64) float64 {
	q := g.cfg.QueueAllowance(lim)
	if !(q > 0) || math.IsInf(q, 0) {
		return 0 // NaN, negative or infinite: grow by nothing
	}
	return q
}

// apply makes decision d the state, and learns from the window what it
// teaches: the baseline and the background from windows without
// congestion, both anew on re-learning.
func (g *Gradient) apply(s *signals, d *decision) {
	st, c := &g.st, &g.cfg
	// A queue read against a censored seed holds the limit but leaves
	// slow start on: the seed is too fast by the slow part of the work,
	// so the reading says as much about the seed as about a queue.
	// Learning below may replace the seed, hence read first.
	queueSeen := d.reason == ReasonQueue && !st.det.censored
	st.windows++
	st.reason = d.reason
	st.decisions[d.reason]++
	st.ep = d.ep
	st.unused.note(d.reason == ReasonUnused, s, c.BaselineWindows)
	st.cliff.note(d.reason, st.limit, c.BaselineWindows)
	if d.reason == ReasonRelearn {
		st.det.relearn(s, d.relearnLat, d.relearnDrops, d.relearnN)
		st.relearned++
	} else {
		st.det.learn(s)
	}
	if s.congested() || queueSeen {
		st.slowStart = false
	}
	st.limit = min(max(d.limit, float64(c.MinLimit)), float64(c.MaxLimit))
}

// dropCliff remembers the limit at which drops last cut Gradient. Past a
// dependency's knee, work that waits misses its deadline while the
// latency of the successes barely moves, so only drops mark the knee, and
// from above: growth by the allowance that comes back within an allowance
// of that limit creeps by one unit per window (as CUBIC's plateau around
// its last maximum), since a whole allowance would overshoot the knee
// again at once and lose most of a window's work. Regrowth is left alone:
// it follows a dependency that got faster, which moved the knee. The
// cliff is forgotten after a span of windows that no congestion cut.
type dropCliff struct {
	at  float64 // the limit the last drop cut was made at; 0: none
	age int     // windows since
}

// note takes the reason of one window's decision at limit lim.
func (c *dropCliff) note(r Reason, lim float64, span int) {
	switch r {
	case ReasonCutDrops, ReasonCutCrowd:
		*c = dropCliff{at: lim}
	case ReasonCutLatency, ReasonCutCeiling:
		// Congestion that the drops did not mark: the cliff stands, and
		// does not age while it lasts.
	default:
		if c.age++; c.age >= span {
			*c = dropCliff{}
		}
	}
}

// cap returns the limit lim grows to instead of next, where a is its
// queue allowance, and whether the cliff slowed it: growth enters the band
// within a of the cliff by one unit per window.
func (c *dropCliff) cap(lim, next, a float64) (float64, bool) {
	if c.at == 0 || lim >= c.at+a {
		return next, false
	}
	capped := min(next, max(lim+1, c.at-a))
	return capped, capped < next
}
