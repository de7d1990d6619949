package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/record"
)

// breakerTrack follows one shedredis client's breaker (a Store's, for
// the rate decisions; a Concurrency's, for its leases) through the
// records of its calls, in the order they were recorded (shedredis
// records a call once it has ended, the simulator when it is made).
type breakerTrack struct {
	run    int     // failed calls since the last one answered
	ends   []int64 // when they ended (ns), the first maxRunEnds
	last   int64   // when the last of them to start started
	closed bool    // a call answered before the run: it began with the breaker closed
	open   bool    // within a spell of calls the open breaker skipped
	known  bool    // opened is known: a failure ended before the spell
	opened int64   // the last end of a failure before the spell: when it opened, at the latest
	// failEnd is the latest end of a failed call; clean an answered call
	// started after it, which closed the breaker at cleanEnd: a single
	// breaker skips a call made after that only once calls fail again.
	failEnd, cleanEnd int64
	clean             bool
}

// maxRunEnds bounds the ends of a run of failures a breakerTrack keeps.
const maxRunEnds = 1024

// reset starts a new run of failures.
func (t *breakerTrack) reset() {
	t.run, t.ends = 0, t.ends[:0]
}

// failed notes a failed call of start and duration lat.
func (t *breakerTrack) failed(start int64, lat time.Duration) {
	if t.run == 0 || start > t.last {
		t.last = start
	}
	t.run++
	end := start + min(int64(lat), math.MaxInt64-max(start, 0))
	if len(t.ends) < maxRunEnds {
		t.ends = append(t.ends, end)
	}
	t.failEnd, t.clean = max(t.failEnd, end), false
}

// answered notes an answered call of start and duration lat.
func (t *breakerTrack) answered(start int64, lat time.Duration) {
	t.closed = true
	t.reset()
	if start > t.failEnd {
		t.clean, t.cleanEnd = true, start+min(int64(lat), math.MaxInt64-max(start, 0))
	}
}

// twoBreakers reports whether a call skipped at start, with no failure
// since the last one answered, shows a breaker other than the one that
// answered it.
func (t *breakerTrack) twoBreakers(start int64) bool {
	return t.run == 0 && t.clean && start > t.cleanEnd
}

// opening starts a spell of skipped calls at start, and returns the
// bounds of how many failures the breaker counted: it opened at the end
// of one of them, after the last of them started (every call made after
// it opened was skipped), and by start.
func (t *breakerTrack) opening(start int64) (lo, hi int) {
	t.open, t.known, t.opened = true, false, math.MinInt64
	if t.run == 0 || len(t.ends) < t.run {
		return 0, 0 // no failure, or too many to tell
	}
	for _, e := range t.ends {
		if e < t.last {
			lo++
		}
		if e <= start {
			hi++
			t.known, t.opened = true, max(t.opened, e)
		}
	}
	return min(lo+1, hi), hi
}

// fitBreakers collects what the breakers' openings show.
type fitBreakers struct {
	tracks [2]breakerTrack
	lo, hi []int     // the bounds of the failures that opened a closed breaker
	opens  []float64 // from an opening to the probe after it, ns
	// skippedFor is the longest time from an opening to a call it
	// skipped, ns: breaker_open is longer.
	skippedFor int64
	// conflicts counts the calls skipped that no single breaker would
	// have skipped (see breakerTrack.twoBreakers).
	conflicts int
}

// BreakerFit is what the calls the open breaker skipped tell, when every
// call was recorded.
type BreakerFit struct {
	// FromClosed counts the spells of calls skipped by the open breaker
	// that opened a closed one (not after a failed probe), Probes the
	// spells a probe ended.
	FromClosed, Probes int
	// Failures is breaker_failures, from the failed calls in a row
	// before a closed breaker opened: at least the most, over the
	// openings, that had ended before the last call it let through
	// started (plus the one that opened it), and at most FailuresMax, the
	// fewest that had ended by the first call it skipped (others were in
	// flight when it opened). 0 when no opening showed.
	Failures, FailuresMax int
	// Open is the median time from an opening to the probe after it:
	// breaker_open, and the wait for the next call; 0 when none showed.
	Open time.Duration
	// OpenAtLeast is the longest time from an opening to a call it
	// skipped: breaker_open is longer, probed or not.
	OpenAtLeast time.Duration
	// Conflicts counts the calls skipped after one answered with no
	// failure between: more than one breaker recorded together (several
	// replicas or Concurrencies in one file), whose runs and spells the
	// fit cannot tell apart.
	Conflicts int
}

// source notes that the records added next come from another file: a
// replica's, maybe, whose breakers are not those of the records so far.
func (b *fitBreakers) source() {
	b.tracks = [2]breakerTrack{}
}

// add notes r, a record of a store call.
func (b *fitBreakers) add(r *record.Record) {
	t := &b.tracks[0]
	if r.Op != record.StoreAllow {
		t = &b.tracks[1]
	}
	switch r.Result {
	case record.StoreBreakerOpen:
		start := r.Time.UnixNano()
		if !t.open && t.twoBreakers(start) {
			b.conflicts++
		}
		if t.open && t.known && start > t.opened {
			b.skippedFor = max(b.skippedFor, int64(min(float64(start)-float64(t.opened), math.MaxInt64/2)))
		}
		if !t.open {
			if lo, hi := t.opening(start); t.closed && hi > 0 && len(b.hi) < fitStoreSamples {
				b.lo, b.hi = append(b.lo, lo), append(b.hi, hi)
			}
		}
		return
	case record.StoreCanceled:
		return // gobreaker counts it neither way
	}
	start := r.Time.UnixNano()
	if t.open {
		if t.known && start <= t.opened {
			return // made before the breaker opened: its answer does not count
		}
		t.open, t.closed = false, false
		t.reset()
		if t.known && len(b.opens) < fitStoreSamples {
			b.opens = append(b.opens, float64(start)-float64(t.opened))
		}
	}
	if r.Result == record.StoreOK {
		t.answered(start, r.Latency)
		return
	}
	t.failed(start, r.Latency)
}

// result returns what the openings show.
func (b *fitBreakers) result() BreakerFit {
	out := BreakerFit{FromClosed: len(b.hi), Probes: len(b.opens), Conflicts: b.conflicts,
		OpenAtLeast: time.Duration(b.skippedFor).Truncate(time.Millisecond)}
	if len(b.hi) > 0 {
		out.FailuresMax = slices.Min(b.hi)
		out.Failures = min(slices.Max(b.lo), out.FailuresMax)
	}
	if len(b.opens) > 0 {
		xs := slices.Clone(b.opens)
		slices.Sort(xs)
		out.Open = time.Duration(min(quantile(xs, 0.5), float64(math.MaxInt64/2))).Round(time.Millisecond)
	}
	return out
}

// apply writes into m the breaker settings bf shows, when every call was
// recorded (sampled is false), and says where they came from.
func (bf *BreakerFit) apply(m *StoreModel, sampled bool) string {
	if sampled {
		return "breaker_failures and breaker_open are shedredis's defaults: the recording is a sample, and its runs of failed calls are not whole"
	}
	if bf.Conflicts > 0 {
		return fmt.Sprintf("breaker_failures and breaker_open are shedredis's defaults: the calls show more than one breaker (%d skipped after one answered with no failure between: several replicas or Concurrencies recording into one file), whose openings cannot be told apart", bf.Conflicts)
	}
	var notes []string
	if bf.Failures > 0 && bf.Failures <= math.MaxInt32 {
		m.BreakerFailures = bf.Failures
		notes = append(notes, fmt.Sprintf("breaker_failures (%d) is the most failed calls in a row that had surely ended when the breaker opened, over %d openings (at most %d: the fewest that had ended when it first skipped a call)",
			bf.Failures, bf.FromClosed, bf.FailuresMax))
	}
	switch {
	case bf.Open > 0:
		m.BreakerOpen = bf.Open
		notes = append(notes, fmt.Sprintf("breaker_open (%v) is the median time from an opening to the probe after it, over %d openings", bf.Open, bf.Probes))
	case bf.OpenAtLeast > DefaultStoreBreakerOpen:
		m.BreakerOpen = bf.OpenAtLeast
		notes = append(notes, fmt.Sprintf("breaker_open (%v) is at least the longest time the open breaker skipped calls, with no probe recorded after it: over shedredis's default (%v)", bf.OpenAtLeast, DefaultStoreBreakerOpen))
	}
	switch len(notes) {
	case 0:
		return "breaker_failures and breaker_open are shedredis's defaults, which the recording does not show (no call met the open breaker after a failure)"
	case 1:
		if m.BreakerFailures == 0 {
			return notes[0] + "; breaker_failures is shedredis's default, which the recording does not show"
		}
		return notes[0] + "; breaker_open is shedredis's default, which the recording does not show"
	}
	return notes[0] + "; " + notes[1]
}
