package limits

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of WindowConfig.
const (
	// DefaultMinWindow is the shortest a window lasts: 1 s, the minimum
	// window time of Netflix's WindowedLimit and of go-concurrency-limits'
	// DefaultLimiter. Shorter windows react faster but carry fewer
	// samples, so their statistic is noisier.
	DefaultMinWindow = time.Second
	// DefaultMaxWindow closes a window that has not gathered MinSamples
	// after 10 s, so that a quiet service still acts on its drops instead
	// of waiting for traffic that may never come.
	DefaultMaxWindow = 10 * time.Second
	// DefaultMinSamples is the number of samples (timed successes plus
	// drops) a window needs before it closes at its minimum duration: 10,
	// as Netflix's WindowedLimit. A window with fewer than half as many
	// timed successes never moves a latency decision. The noise of so
	// few latencies is the detector's business: a window's median must
	// exceed the baseline by Significance of its own standard errors.
	DefaultMinSamples = 10
)

// WindowConfig configures a [Window]. Zero fields take the defaults.
type WindowConfig struct {
	// MinDuration is the shortest a window lasts, measured on Sample.Now.
	// A window also lasts at least twice the fastest latency it saw
	// (Netflix does the same) and twice the median latency of the
	// previous window, so that it is not closed before slow work has had
	// a chance to finish: a window shorter than its latencies holds the
	// fast completions of recent admissions and the slow ones of earlier
	// ones, and its statistic swings with the admission history rather
	// than with the dependency. Default DefaultMinWindow.
	MinDuration time.Duration
	// MaxDuration closes a window that has not gathered MinSamples
	// samples. Default DefaultMaxWindow (or MinDuration if larger).
	MaxDuration time.Duration
	// MinSamples is how many samples (timed successes and drops) a window
	// needs to close at MinDuration. Default DefaultMinSamples.
	MinSamples int
	// Quantile selects the latency statistic of a window: 0 for the mean,
	// or a quantile in (0, 1], for example 0.9 for the 90th percentile.
	// Quantiles come from a log-bucketed histogram (error under 3.2%).
	Quantile float64
	// IgnoreCost keeps raw latencies in the statistic. By default each
	// timed success counts as its latency per unit of Sample.Cost: when
	// requests reserve different costs (LLM tokens) and their work grows
	// with it, the latency of a window otherwise swings with its few large
	// requests and reads as congestion. With every cost 1 (the default
	// cost) both are the same.
	IgnoreCost bool
}

func (c WindowConfig) withDefaults(prefix string) (WindowConfig, error) {
	if c.MinDuration < 0 {
		return c, configError(prefix+"MinDuration", "must be >= 0, got %v", c.MinDuration)
	}
	if c.MinDuration == 0 {
		c.MinDuration = DefaultMinWindow
	}
	if c.MaxDuration < 0 {
		return c, configError(prefix+"MaxDuration", "must be >= 0, got %v", c.MaxDuration)
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = max(DefaultMaxWindow, c.MinDuration)
	}
	if c.MaxDuration < c.MinDuration {
		return c, configError(prefix+"MaxDuration", "must be >= MinDuration (%v), got %v", c.MinDuration, c.MaxDuration)
	}
	if c.MinSamples < 0 {
		return c, configError(prefix+"MinSamples", "must be >= 0, got %d", c.MinSamples)
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if math.IsNaN(c.Quantile) || c.Quantile < 0 || c.Quantile > 1 {
		return c, configError(prefix+"Quantile", "must be 0 (mean) or in (0, 1], got %v", c.Quantile)
	}
	return c, nil
}

// WindowSummary describes one closed window.
type WindowSummary struct {
	// Start is when the window opened (the close of the previous window,
	// or the first sample); End is the Now of the sample that closed it.
	Start, End time.Time
	// Samples is the number of timed successes: the population of the
	// latency statistics. Drops and untimed samples are not in it.
	Samples int
	// Drops is the number of dropped samples, timed or not.
	Drops int
	// Latency is the configured statistic (mean or quantile) of the
	// timed successes and Mean their mean, both per unit of cost unless
	// WindowConfig.IgnoreCost; Min is the fastest raw latency. All three
	// are zero when Samples is zero.
	Latency, Mean, Min time.Duration
	// MaxInFlight is the largest Sample.InFlight seen in the window,
	// untimed samples included.
	MaxInFlight int
	// MeanInFlight is the mean Sample.InFlight of the timed successes and
	// drops: an estimate of the concurrency during the window (arrivals
	// that follow no rhythm see the time average), which with Latency
	// gives the throughput by Little's law.
	MeanInFlight float64
	// RelErr is the standard error of Mean relative to Mean: how precisely
	// the window measured its mean latency. Zero when unknown: fewer than
	// two timed successes, or latencies under about 10 us (squares are
	// summed in units of 1,024 ns); a tiny positive value when the
	// latencies did not spread at all.
	RelErr float64
	// Median is the median of the same latencies (per unit of cost unless
	// IgnoreCost), from the histogram (within 3.2%). Unlike the mean, a
	// few very slow requests barely move it, while a queue in front of
	// the dependency moves it as much as the mean: the statistic for
	// telling queueing from the noise of a heavy tail.
	Median time.Duration
	// MedianErr estimates the standard error of log(Median): 1.25 times
	// the spread of the log-latencies (their interquartile range / 1.35)
	// over the square root of Samples, as for a normal sample. Zero
	// without samples or spread.
	MedianErr float64
	// DropMean is the mean latency of the timed drops, per unit of cost
	// as Mean: work that failed fast (an error) or at a deadline (a
	// timeout). Zero when no drop was timed.
	DropMean time.Duration
	// TimedDrops is the number of timed drops, and FastDrops the number
	// of them that took no longer (per unit of cost, as Mean; to the
	// histogram's resolution) than the previous window's Median. A
	// timeout lasts until its deadline, which every success beat, so it
	// is never among them: fast drops are errors.
	TimedDrops, FastDrops int
	// Fresh is the number of timed successes and timed drops admitted
	// since the window opened (their Now less their latency), errors
	// (FastDrops) left out, and FreshDrops the drops among them. Crowded
	// and CrowdedDrops count the part of that work admitted with the
	// limit nearly full (three quarters of it, or more, in flight, the
	// work itself included). Gradient and AIMD set that level from the
	// limit each window decides; a Window used on its own counts no
	// crowded work.
	Fresh, FreshDrops     int
	Crowded, CrowdedDrops int
}

var quartiles = [3]float64{0.25, 0.5, 0.75}

// medianErr is the standard error of the log of the median of n values
// whose quartiles are q1 and q3, were their logs normal.
func medianErr(n int, q1, q3 time.Duration) float64 {
	if n == 0 || q1 <= 0 || q3 <= q1 {
		return 0
	}
	return 1.2533 * math.Log(float64(q3)/float64(q1)) / 1.349 / math.Sqrt(float64(n))
}

// exactRelErr is the RelErr of a window whose latencies did not spread.
const exactRelErr = 1e-9

// sqShift scales latencies to units of 1,024 ns before squaring: a square
// fits in 64 bits up to 73 minutes, and a window's sum of squares holds a
// thousand latencies of 2 minutes or a million of 4 s (beyond, RelErr is
// wrong, which only changes Gradient's threshold within its bounds).
const sqShift = 10

// relErr is the relative standard error of a mean latency of n samples
// whose squares (in units of 2^sqShift ns) sum to sumSq.
func relErr(n int, mean, sumSq float64) float64 {
	if n < 2 || mean <= 0 {
		return 0
	}
	m := mean / (1 << sqShift)
	if m < 10 {
		return 0 // too coarse to tell
	}
	// Truncating to whole units lowers each value by half a unit on
	// average: compare squares with the mean of the truncated values.
	mq := m - 0.5
	v := (sumSq - float64(n)*mq*mq) / float64(n-1)
	if !(v > 0) {
		return exactRelErr // no spread: as precise as it gets
	}
	return math.Sqrt(v/float64(n)) / mean * (1 << sqShift)
}

const notStarted = math.MinInt64

// A Window aggregates samples into windows bounded by duration and sample
// count. Record is safe for concurrent use, lock-free and allocation-free;
// the sample that closes a window takes a mutex once to summarize it.
//
// Windows roll on Sample.Now, never on the wall clock, so a Window runs in
// virtual time. A sample with a zero Now (an untimed success of shed's
// wall-clock API, which does not read the clock for it) contributes its
// in-flight count (a drop, its count too) but neither opens nor closes a
// window. Timed successes of any latency count, zero included.
type Window struct {
	_ [64]byte // keep the hot counters off the lines of the previous allocation
	// Written by every timed sample.
	timed    atomic.Uint64 // cumulative timed successes
	sum      atomic.Uint64 // cumulative latency of timed successes, ns (per unit of cost)
	sumSq    atomic.Uint64 // cumulative squares of the same latencies in units of 1,024 ns
	inflight atomic.Uint64 // cumulative Sample.InFlight of timed successes and drops
	fresh    atomic.Uint64 // cumulative fresh work (see countFresh)
	freshOut atomic.Uint64 // cumulative drops among it
	crowded  atomic.Uint64 // cumulative fresh work admitted at crowdAt or more
	crowdOut atomic.Uint64 // cumulative drops among it
	_        [8]byte
	// Written by drops and by the closer; read by every sample.
	drops       atomic.Uint64 // cumulative drops
	dropTimed   atomic.Uint64 // cumulative timed drops
	dropSum     atomic.Uint64 // cumulative latency of timed drops, ns (per unit of cost)
	dropFast    atomic.Uint64 // cumulative timed drops no slower than lastMedian
	minLat      atomic.Int64  // this window's fastest timed success, ns
	lastMedian  atomic.Int64  // the previous window's median, ns
	maxInFlight atomic.Int64  // this window's largest in-flight
	_           [40]byte
	// Read by every sample, written once per window.
	start     atomic.Int64  // window start, Unix ns; notStarted before the first sample
	crowdAt   atomic.Int64  // in-flight count from which work is crowded; 0: none (see setCrowd)
	prevTimed atomic.Uint64 // timed at the last close
	prevDrops atomic.Uint64 // drops at the last close
	minNs     int64
	maxNs     int64
	minSample uint64
	quantile  float64
	perCost   bool
	hist      *histogram

	mu           sync.Mutex // held by the closer only
	prevSum      uint64
	prevSumSq    uint64
	prevInFlight uint64
	prevDropN    uint64
	prevDropSum  uint64
	prevDropFast uint64
	prevFresh    uint64
	prevFreshOut uint64
	prevCrowded  uint64
	prevCrowdOut uint64
	prevHist     *[histBuckets]uint64
}

// NewWindow returns a Window configured by cfg.
func NewWindow(cfg WindowConfig) (*Window, error) {
	cfg, err := cfg.withDefaults("WindowConfig.")
	if err != nil {
		return nil, err
	}
	return newWindow(cfg), nil
}

func newWindow(cfg WindowConfig) *Window {
	w := &Window{
		minNs:     int64(cfg.MinDuration),
		maxNs:     int64(cfg.MaxDuration),
		minSample: uint64(cfg.MinSamples),
		quantile:  cfg.Quantile,
		perCost:   !cfg.IgnoreCost,
	}
	w.hist = new(histogram)
	w.prevHist = new([histBuckets]uint64)
	w.start.Store(notStarted)
	w.minLat.Store(math.MaxInt64)
	return w
}

// Record adds s to the current window. If s closes the window, Record
// returns the closed window's summary and true; s itself belongs to the
// closed window. A zero Window (not made by NewWindow) records nothing.
func (w *Window) Record(s shed.Sample) (WindowSummary, bool) {
	var sum WindowSummary
	if w.hist == nil {
		return sum, false // a zero Window, not made by NewWindow
	}
	ok := w.observe(s, &sum)
	return sum, ok
}

// observe is Record writing the summary into *sum, which spares the limits
// of this package a summary copy per sample. It reports whether the window
// closed.
func (w *Window) observe(s shed.Sample, sum *WindowSummary) bool {
	if !s.Timed && !s.Dropped && s.Now.IsZero() {
		// An untimed success of the wall-clock API: most releases at
		// high traffic. Only its in-flight count is news.
		w.noteInFlight(s.InFlight)
		return false
	}
	now, start, check := w.record(s)
	return check && w.maybeClose(now, start, sum)
}

func (w *Window) noteInFlight(n int) {
	if int64(n) > w.maxInFlight.Load() {
		w.raiseInFlight(int64(n))
	}
}

func (w *Window) raiseInFlight(n int64) {
	for m := w.maxInFlight.Load(); n > m && !w.maxInFlight.CompareAndSwap(m, n); m = w.maxInFlight.Load() {
	}
}

// record counts s and reports whether the window may be due to close at
// now (in Unix ns), and when it started.
func (w *Window) record(s shed.Sample) (now, start int64, check bool) {
	fast := false
	switch {
	case s.Dropped:
		w.drops.Add(1)
		if s.Timed {
			stat := w.stat(max(int64(s.Latency), 0), s.Cost)
			w.dropSum.Add(uint64(stat))
			w.dropTimed.Add(1)
			if m := w.lastMedian.Load(); m > 0 && histIndex(uint64(stat)) <= histIndex(uint64(m)) {
				// No slower than the median, to the histogram's
				// resolution: an error as long as a constant service.
				w.dropFast.Add(1)
				fast = true
			}
		}
	case s.Timed:
		lat := max(int64(s.Latency), 0)
		stat := w.stat(lat, s.Cost)
		w.sum.Add(uint64(stat))
		q := uint64(stat) >> sqShift
		w.sumSq.Add(q * q)
		w.hist.add(uint64(stat))
		w.timed.Add(1)
		if lat < w.minLat.Load() {
			w.lowerMinLat(lat)
		}
	}
	if s.Dropped || s.Timed {
		w.inflight.Add(uint64(max(s.InFlight, 0)))
	}
	w.noteInFlight(s.InFlight)
	if s.Now.IsZero() {
		return 0, 0, false
	}
	now = s.Now.UnixNano()
	start = w.start.Load()
	if s.Timed && !fast && start != notStarted {
		w.countFresh(s, now, start)
	}
	if start == notStarted {
		w.start.CompareAndSwap(notStarted, now)
		return 0, 0, false
	}
	// Too early to close? A small negative elapsed time is normal:
	// concurrent releases finish out of order.
	el := now - start
	return now, start, el >= w.minNs || el <= -w.maxNs
}

// stat is a latency of lat ns for work of cost as the window's statistics
// count it: per unit of cost unless IgnoreCost.
func (w *Window) stat(lat, cost int64) int64 {
	if w.perCost && cost > 1 {
		return lat / cost
	}
	return lat
}

func (w *Window) lowerMinLat(lat int64) {
	for m := w.minLat.Load(); lat < m && !w.minLat.CompareAndSwap(m, lat); m = w.minLat.Load() {
	}
}

// longEnough reports whether a window of el ns lasted twice its fastest
// timed success (always, for a window that holds only drops) and twice the
// previous window's median.
func (w *Window) longEnough(el int64) bool {
	m := w.minLat.Load()
	return (m == math.MaxInt64 || el/2 >= m) && el/2 >= w.lastMedian.Load()
}

// maybeClose closes the window started at start if it is ready.
//
//go:noinline
func (w *Window) maybeClose(now, start int64, sw *WindowSummary) bool {
	el := now - start
	n := w.timed.Load() - w.prevTimed.Load() + w.drops.Load() - w.prevDrops.Load()
	switch {
	case el <= -w.maxNs:
		// The clock went back by more than a window: restart the window
		// rather than wait for the clock to catch up.
	case n == 0 && el >= w.maxNs:
		// An idle gap: restart so that the next window is not stretched.
	case el >= w.maxNs:
	case n >= w.minSample && el >= w.minNs && w.longEnough(el):
	default:
		return false
	}
	if !w.mu.TryLock() {
		return false // another sample is closing it
	}
	defer w.mu.Unlock()
	if w.start.Load() != start {
		return false // closed meanwhile
	}
	w.start.Store(now)
	if el <= -w.maxNs || n == 0 {
		return false
	}
	// Fast drops, then timed ones, then all: the reverse of record's
	// writes, so that under concurrent samples no count exceeds the one
	// it is part of (FastDrops <= TimedDrops <= Drops).
	df := w.dropFast.Load()
	dn, ds := w.dropTimed.Load(), w.dropSum.Load()
	timed, drops, sum, inflight := w.timed.Load(), w.drops.Load(), w.sum.Load(), w.inflight.Load()
	sumSq := w.sumSq.Load()
	*sw = WindowSummary{
		Start:       time.Unix(0, start),
		End:         time.Unix(0, now),
		Samples:     int(timed - w.prevTimed.Load()),
		Drops:       int(drops - w.prevDrops.Load()),
		MaxInFlight: int(w.maxInFlight.Swap(0)),
	}
	minLat := w.minLat.Swap(math.MaxInt64)
	if k := sw.Samples + sw.Drops; k > 0 {
		sw.MeanInFlight = float64(inflight-w.prevInFlight) / float64(k)
	}
	w.closeDrops(sw, df, dn, ds)
	if sw.Samples > 0 {
		sw.Mean = time.Duration((sum - w.prevSum) / uint64(sw.Samples))
		sw.RelErr = relErr(sw.Samples, float64(sw.Mean), float64(sumSq-w.prevSumSq))
		sw.Min = time.Duration(minLat)
		sw.Latency = sw.Mean
	}
	// Advance the histogram's snapshot even for an empty window.
	if d, hn := w.hist.delta(w.prevHist); sw.Samples > 0 && hn > 0 {
		var q [3]time.Duration
		quantiles(&d, hn, quartiles[:], q[:])
		sw.Median, sw.MedianErr = q[1], medianErr(sw.Samples, q[0], q[2])
		w.lastMedian.Store(int64(sw.Median))
		if w.quantile > 0 {
			quantiles(&d, hn, []float64{w.quantile}, q[:1])
			sw.Latency = q[0]
		}
	}
	if !w.perCost && sw.Min > sw.Mean {
		// A sample recorded between the loads of sum and minLat.
		sw.Min = sw.Mean
	}
	w.prevTimed.Store(timed)
	w.prevDrops.Store(drops)
	w.prevSum = sum
	w.prevSumSq = sumSq
	w.prevInFlight = inflight
	return true
}

// closeDrops writes the drop counts of the closing window into sw: df
// fast drops and dn timed ones of total latency ds so far.
func (w *Window) closeDrops(sw *WindowSummary, df, dn, ds uint64) {
	if n := dn - w.prevDropN; n > 0 {
		sw.DropMean = time.Duration((ds - w.prevDropSum) / n)
		sw.TimedDrops, sw.FastDrops = int(n), int(df-w.prevDropFast)
		// A drop recorded while the last window closed may have counted
		// there among the drops and here among the timed ones.
		sw.TimedDrops = min(sw.TimedDrops, sw.Drops)
		sw.FastDrops = min(sw.FastDrops, sw.TimedDrops)
	}
	w.prevDropN, w.prevDropSum, w.prevDropFast = dn, ds, df
	// Drops before their work, crowded before fresh: the reverse of
	// countFresh, so that no count exceeds the one it is part of.
	co, fo := w.crowdOut.Load(), w.freshOut.Load()
	cn, fn := w.crowded.Load(), w.fresh.Load()
	sw.Crowded, sw.CrowdedDrops = int(cn-w.prevCrowded), int(co-w.prevCrowdOut)
	sw.Fresh, sw.FreshDrops = int(fn-w.prevFresh), int(fo-w.prevFreshOut)
	w.prevCrowded, w.prevCrowdOut, w.prevFresh, w.prevFreshOut = cn, co, fn, fo
}

// countFresh counts timed work s, a success or a timeout, if it was
// admitted (its Now less its latency) since the window opened, and as
// crowded if it was admitted at crowdAt or more in flight. A timeout is
// recorded a deadline after its admission, a success its latency after:
// work admitted in a burst near the end of one window would show its
// successes in that window and its timeouts in the next, as if the
// burst's work had all failed.
// now is s.Now and start the window's start, both in Unix ns.
func (w *Window) countFresh(s shed.Sample, now, start int64) {
	if now-int64(s.Latency) < start {
		return
	}
	c := w.crowdAt.Load()
	crowded := c > 0 && int64(s.InFlight) >= c
	w.fresh.Add(1)
	if crowded {
		w.crowded.Add(1)
	}
	if s.Dropped {
		w.freshOut.Add(1)
		if crowded {
			w.crowdOut.Add(1)
		}
	}
}

// setCrowd makes work admitted with crowdLevel of limit or more in flight
// (the limit rounded down, as enforced) count as crowded from now on. A
// limit under 2 has no crowd: all its work is admitted alone.
func (w *Window) setCrowd(limit float64) {
	var at int64
	if e := math.Floor(limit); e >= 2 {
		at = int64(math.Ceil(crowdLevel * e))
	}
	w.crowdAt.Store(at)
}
