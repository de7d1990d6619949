package sim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Stress variants of a scenario, as [StressVariants] derives them.
const (
	// TuneSlowdown multiplies the upstream's service time in the
	// "slowdown" variant.
	TuneSlowdown = 5.0
	// TuneSpike multiplies every open-loop class's arrival rate in the
	// "spike" variant.
	TuneSpike = 3.0
	// TuneStormAttempts is the least number of attempts per logical
	// request the clients make in the "retry-storm" variant.
	TuneStormAttempts = 3
	// TuneFlood multiplies the heaviest tenant's traffic (KeySurge) of
	// the busiest open-loop class spread over keys in the "flood"
	// variant: a tenant whose client loops or whose batch job starts at
	// once, well past what a per-key quota with room (up to 4x its
	// ordinary rate, see tuneKeyRateFactors) lets through.
	TuneFlood = 8.0
)

// StressVariants returns the scenario itself ("healthy", first) and three
// stressed copies of it (four when a class is spread over keys), each
// named after the scenario with a suffix:
//
//   - "slowdown": every job the upstream starts during the stress window
//     takes TuneSlowdown times longer (an UpstreamEvent added to the
//     scenario's own);
//   - "spike": every open-loop class sends TuneSpike times its scheduled
//     rate during the stress window (closed-loop classes are unchanged);
//   - "retry-storm": the clients make at least TuneStormAttempts attempts
//     of a third of their deadline each, retry rejections regardless of
//     "do not retry", and a TuneSlowdown slowdown lasting half the window
//     makes attempts time out, as in the built-in retry-storm scenario;
//   - "flood", only when an open-loop class has Keys of two or more: the
//     heaviest key of one such class, the one with the most requests
//     scheduled in the stress window (the first on a tie), sends
//     TuneFlood times its share during the window (a KeySurge, replacing
//     the class's own), its other keys and the other classes as before.
//     One tenant of one class flooding is the incident a per-key rate
//     limit is for; floods of several classes at once would mix their
//     quotas in one figure. What the other tenants get during the flood
//     is what [Tune] ranks on.
//
// The stress window is placed relative to the scenario's own duration, so
// that a fitted scenario of any length gets one: it starts at a third of
// the duration (after the warm-up and one interval), lasts a third of it
// (at most half of what is left, to leave time to recover) and is aligned
// to the interval. It is each variant's Trigger, so that the summary's
// trigger figures and recovery are measured on it. An error says that the
// scenario is invalid or too short to hold a window.
func StressVariants(sc *Scenario) ([]*Scenario, error) {
	n, err := sc.normalize()
	if err != nil {
		return nil, err
	}
	win, err := stressWindow(n)
	if err != nil {
		return nil, err
	}
	slow := cloneScenario(sc, "slowdown", win)
	slow.Upstream.Events = append(slow.Upstream.Events, UpstreamEvent{At: win.At, For: win.For, Slowdown: TuneSlowdown})

	spike := cloneScenario(sc, "spike", win)
	for i := range spike.Classes {
		cl := &spike.Classes[i]
		if cl.Users > 0 {
			continue
		}
		if cl.Rate, cl.Schedule, err = scaleSchedule(cl.Rate, cl.Schedule, win, TuneSpike); err != nil {
			return nil, fmt.Errorf("spike of class %s: %w", cl.Name, err)
		}
	}

	storm := cloneScenario(sc, "retry-storm", win)
	short := Span{At: win.At, For: max(n.Interval, win.For/2/n.Interval*n.Interval)}
	storm.Trigger = &short
	storm.Upstream.Events = append(storm.Upstream.Events, UpstreamEvent{At: short.At, For: short.For, Slowdown: TuneSlowdown})
	for i := range storm.Classes {
		stormRetry(&storm.Classes[i], &n.Classes[i])
	}
	out := []*Scenario{cloneScenario(sc, "", Span{}), slow, spike, storm}
	if flood := floodVariant(sc, win); flood != nil {
		out = append(out, flood)
	}
	for _, v := range out {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("variant %s: %w", v.Name, err)
		}
	}
	return out, nil
}

// floodVariant returns the "flood" variant of sc (see StressVariants), or
// nil when no open-loop class of sc is spread over keys.
func floodVariant(sc *Scenario, win Span) *Scenario {
	i := busiestKeyed(sc, win)
	if i < 0 {
		return nil
	}
	flood := cloneScenario(sc, "flood", win)
	flood.Classes[i].Keys.Surge = &KeySurge{At: win.At, For: win.For, Factor: TuneFlood}
	return flood
}

// busiestKeyed returns the open-loop class of two keys or more with the
// most requests scheduled in win (the first on a tie), or -1 for none.
func busiestKeyed(sc *Scenario, win Span) int {
	best, most := -1, 0.0
	for i := range sc.Classes {
		cl := &sc.Classes[i]
		if cl.Users > 0 || cl.Keys == nil || cl.Keys.Count < 2 {
			continue
		}
		f, err := buildRate(cl.Rate, cl.Schedule, "")
		if err != nil {
			continue // the scenario was validated: not reached
		}
		if n := f.integral(win.At.Seconds(), win.End().Seconds()); best < 0 || n > most {
			best, most = i, n
		}
	}
	return best
}

// floodedClass returns the class whose heaviest key surges exactly
// during sc's trigger, as in the flood variant (the first if several
// do), or -1 for none: its other tenants are measured in that window.
func floodedClass(sc *Scenario) int {
	if sc.Trigger == nil {
		return -1
	}
	for i, cl := range sc.Classes {
		if cl.Keys != nil && cl.Keys.Surge != nil && cl.Keys.Surge.span() == *sc.Trigger {
			return i
		}
	}
	return -1
}

// stressWindow places the stress window in the normalized scenario n.
func stressWindow(n *Scenario) (Span, error) {
	iv, d := n.Interval, n.Duration
	at := max(d/3, n.Warmup+iv)
	at = (at + iv - 1) / iv * iv
	length := min(d/3, (d-at)/2) / iv * iv
	if length < iv || at+length > d {
		return Span{}, fmt.Errorf("%w: scenario %s is too short for a stress window after its warm-up (%v of %v)", ErrInvalidScenario, n.Name, n.Warmup, d)
	}
	return Span{At: at, For: length}, nil
}

// cloneScenario copies sc deeply enough to change its classes, schedules,
// events and retry policies, names it after sc with suffix, and sets its
// Trigger to win (none for a zero win: the scenario's own). Expectations
// and the list of policies are dropped: they belong to the original.
func cloneScenario(sc *Scenario, suffix string, win Span) *Scenario {
	c := *sc
	if suffix != "" {
		c.Name += "-" + suffix
	}
	if win.For > 0 {
		c.Trigger = &win
	}
	c.Expect, c.Policies = nil, nil
	c.Classes = append([]Class(nil), sc.Classes...)
	for i := range c.Classes {
		c.Classes[i].Schedule = append([]RateChange(nil), c.Classes[i].Schedule...)
		c.Classes[i].Retry = cloneRetry(c.Classes[i].Retry)
		c.Classes[i].RateLimit = c.Classes[i].RateLimit.clone()
		c.Classes[i].Keys = c.Classes[i].Keys.clone()
		c.Classes[i].KeyConcurrency = c.Classes[i].KeyConcurrency.clone()
	}
	c.Service.StoreOutages = slices.Clone(sc.Service.StoreOutages)
	c.Service.Store = sc.Service.Store.clone()
	c.Service.Retry = cloneRetry(c.Service.Retry)
	if sc.Gateway != nil {
		g := *sc.Gateway
		g.Retry = cloneRetry(g.Retry)
		c.Gateway = &g
	}
	c.Upstream.Events = append([]UpstreamEvent(nil), sc.Upstream.Events...)
	return &c
}

func cloneRetry(r Retry) Retry {
	if r.Budget != nil {
		b := *r.Budget
		r.Budget = &b
	}
	if r.Throttle != nil {
		t := *r.Throttle
		r.Throttle = &t
	}
	return r
}

// stormRetry makes the class cl retry naively; norm is the same class
// normalized (its defaults filled in).
func stormRetry(cl, norm *Class) {
	if norm.Retry.MaxAttempts >= TuneStormAttempts {
		cl.Retry.HonorNoRetry = false
		return
	}
	cl.Timeout = norm.Timeout
	cl.AttemptTimeout = max(norm.Timeout/TuneStormAttempts, time.Millisecond)
	cl.Retry.MaxAttempts = TuneStormAttempts
	cl.Retry.HonorNoRetry = false
	if cl.Retry.Backoff == 0 {
		cl.Retry.Backoff, cl.Retry.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	}
}

// scaleSchedule returns a class's base rate and schedule with the rate
// multiplied by factor during win, exactly: the piecewise-linear rate is
// cut at the window's ends and written back as steps and ramps, so that a
// fitted staircase of any length keeps its shape around the spike.
func scaleSchedule(rate float64, changes []RateChange, win Span, factor float64) (float64, []RateChange, error) {
	f, err := buildRate(rate, changes, "")
	if err != nil {
		return 0, nil, err
	}
	return segsToSchedule(f.scaled(win, factor).segs)
}

// scaled returns f with the rate multiplied by factor during win, cut at
// the window's ends; f is left as it was.
func (f rateFunc) scaled(win Span, factor float64) rateFunc {
	a, b := win.At.Seconds(), win.End().Seconds()
	segs := splitSegs(splitSegs(slices.Clone(f.segs), a, &f), b, &f)
	for i := range segs {
		if segs[i].start >= a && segs[i].start < b {
			segs[i].rate0 *= factor
			segs[i].slope *= factor
		}
	}
	return rateFunc{segs: segs}
}

// splitSegs returns segs with a segment starting at t (continuing the one
// that holds t), unless one already does.
func splitSegs(segs []rateSeg, t float64, f *rateFunc) []rateSeg {
	k := (&rateFunc{segs: segs}).seg(t, 0)
	if segs[k].start == t {
		return segs
	}
	s := rateSeg{start: t, rate0: f.at(t), slope: segs[k].slope}
	return append(segs[:k+1:k+1], append([]rateSeg{s}, segs[k+1:]...)...)
}

// segsToSchedule writes a piecewise-linear rate as a base rate and
// changes: a step to each segment's starting rate, then a ramp to its end
// when it has a slope (buildRate accepts a ramp at the time of a step).
func segsToSchedule(segs []rateSeg) (float64, []RateChange, error) {
	var out []RateChange
	base := segs[0].rate0
	for i, s := range segs {
		at := time.Duration(math.Round(s.start * 1e9))
		if i > 0 {
			out = append(out, RateChange{At: at, Rate: s.rate0})
		}
		if s.slope != 0 {
			if i+1 == len(segs) {
				return 0, nil, fmt.Errorf("a ramp without an end at %v", at)
			}
			ramp := time.Duration(math.Round(segs[i+1].start*1e9)) - at
			out = append(out, RateChange{At: at, Rate: endRate(segs, i), Ramp: ramp})
		}
	}
	return base, out, nil
}

// endRate is the rate segment i reaches at the start of the next one.
func endRate(segs []rateSeg, i int) float64 {
	return segs[i].rate0 + segs[i].slope*(segs[i+1].start-segs[i].start)
}
