package limits

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// model is a small deterministic closed-form model of a service behind a
// limit, in virtual time. Requests arrive at a constant rate; the work in
// flight follows Little's law, capped by the limit: inflight = min(limit,
// rate x latency(inflight)). Each model window feeds perWindow samples
// spread evenly over one window duration, each reading the limit in force
// when it is produced, so the loop is closed sample by sample.
type model struct {
	rate      float64       // arrivals per second
	perWindow int           // samples fed per window (the timed subset)
	window    time.Duration // virtual duration of a window
	now       time.Time
	// latency returns the latency at n in flight.
	latency func(n int) time.Duration
	// jitter, when set, multiplies each latency by a uniform factor in
	// [1-jitterFrac, 1+jitterFrac].
	jitter     *rand.Rand
	jitterFrac float64
	// drop marks every sample as dropped (every request times out);
	// untimed drops carry no latency, as from an untimed permit.
	drop    bool
	untimed bool
	// dropRand, when set, drops each sample with probability dropProb
	// (a background of failures that admitting less does not change).
	dropRand *rand.Rand
	dropProb float64
	// dropSlow, when above zero, multiplies the latency of those drops
	// and of drop's: timeouts, slower than the successes (at 0 they are
	// as fast, as errors are).
	dropSlow float64
	// deadline, when set, drops every sample slower than it.
	deadline time.Duration

	primed bool
}

func newModel(rate float64, lat time.Duration) *model {
	return &model{
		rate:      rate,
		perWindow: 100,
		window:    time.Second,
		now:       time.Unix(1_700_000_000, 0),
		latency:   flat(lat),
	}
}

func flat(d time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return d }
}

// knee is latency flat at base up to capacity in flight, then growing in
// proportion to the work in flight (the excess queues).
func knee(base time.Duration, capacity int) func(int) time.Duration {
	return func(n int) time.Duration {
		if n <= capacity {
			return base
		}
		return time.Duration(float64(base) * float64(n) / float64(capacity))
	}
}

// inFlight solves inflight = min(limit, rate x latency(inflight)).
func (m *model) inFlight(limit int) int {
	demand := func(n int) float64 { return m.rate * m.latency(n).Seconds() }
	if demand(limit) >= float64(limit) {
		return limit
	}
	// demand(n) < n at n = limit: find the smallest n with demand(n) <= n.
	lo, hi := 0, limit
	for lo < hi {
		mid := (lo + hi) / 2
		if demand(mid) <= float64(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return max(lo, 1)
}

// runWindow feeds one window of samples to src and returns its limit after.
// The last sample of each model window closes the limit's window: the
// first call primes the window with an empty sample at the start time.
func (m *model) runWindow(src shed.LimitSource) int {
	if !m.primed {
		src.Observe(shed.Sample{Now: m.now})
		m.primed = true
	}
	step := m.window / time.Duration(m.perWindow)
	for range m.perWindow {
		m.now = m.now.Add(step)
		n := m.inFlight(src.Limit())
		lat := m.latency(n)
		if m.jitter != nil {
			f := 1 + m.jitterFrac*(2*m.jitter.Float64()-1)
			lat = time.Duration(math.Round(float64(lat) * f))
		}
		timed := !(m.drop && m.untimed)
		if !timed {
			lat = 0
		}
		random := m.dropRand != nil && m.dropRand.Float64() < m.dropProb
		if (random || m.drop) && m.dropSlow > 0 {
			lat = time.Duration(float64(lat) * m.dropSlow)
		}
		drop := m.drop || random || (m.deadline > 0 && lat > m.deadline)
		src.Observe(shed.Sample{Now: m.now, Latency: lat, Timed: timed, InFlight: n, Dropped: drop})
	}
	return src.Limit()
}

// run feeds windows and returns the limit after each.
func (m *model) run(src shed.LimitSource, windows int) []int {
	out := make([]int, windows)
	for i := range out {
		out[i] = m.runWindow(src)
	}
	return out
}

// settle runs until the limit has stayed within 2% (or one) for a
// baseline span of windows (an unused limit shrinks after one; at most
// max windows) and returns the steady limit.
func (m *model) settle(t *testing.T, src shed.LimitSource, maxWindows int) int {
	t.Helper()
	last, same := src.Limit(), 0
	for range maxWindows {
		l := m.runWindow(src)
		if d := l - last; max(d, -d) <= max(1, last/50) { // an unused limit steps by one
			same++
			if same > DefaultBaselineWindows {
				return l
			}
		} else {
			last, same = l, 0
		}
	}
	t.Fatalf("limit did not settle within %d windows (last %d)", maxWindows, last)
	return 0
}
