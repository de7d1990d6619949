package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// FitMinRateLimited is the fewest 429 records (shed.ReasonRateLimited)
// of a class from which a fit infers the class's rate limit. A handful of
// 429s come from moments when a burst of arrivals emptied the bucket for
// an instant: the requests that passed around them say little about the
// rate the bucket refills at, and a limit inferred from them would refuse
// traffic the service accepts. Below it the fit sets no rate limit and
// says so.
const FitMinRateLimited = 20

// RateLimitFit is what a fit inferred about a class's rate limit: the
// token bucket in front of its admission that answered 429 (the
// middleware's shedhttp.Options.RateLimits), per replica, since the
// recording is one replica's.
//
// Where a bucket refuses requests it is empty, and what passes it is what
// it refills: the requests that passed (arrivals minus 429s) per second,
// in the intervals with a recorded 429, estimate its rate. Each interval
// weighs by its 429s: an interval where the bucket emptied only for a
// moment passed less than the rate, and has few of them. A bucket holds
// at most Burst tokens, so no span passes more than Burst + rate x span
// requests; just before a 429 that follows 5 s without any, the largest
// excess over the rate of the requests that passed in the preceding 5 s
// is the most the bucket held in them: its burst when it was full there,
// a lower bound otherwise. That needs every record of the span: when the
// records there were sampled or lost, or no such span exists, the burst
// is the default, DefaultBurst(rps).
type RateLimitFit struct {
	// Limit is the inferred bucket; nil when the class shows fewer than
	// FitMinRateLimited 429 records, or none in an interval the ticks
	// cover at least half of.
	Limit *RateLimit
	// Records counts the class's 429 records; RateLimited estimates its
	// 429s: the ticks count each interval's rejections exactly but not
	// their reasons, so they are split by the reasons of the interval's
	// sampled rejection records.
	Records     int
	RateLimited float64
	// Intervals is how many intervals with a recorded 429 the ticks
	// cover at least half of (the rate comes from them); Spread the
	// interquartile range of their passed rates relative to the rate.
	Intervals int
	Spread    float64
	// BurstObserved reports that Limit.Burst was measured, from Onsets
	// spans before a 429; else it is the default.
	BurstObserved bool
	Onsets        int
	// Confidence in the rate: "high", "medium" or "low" by how many
	// intervals it comes from, how far their rates spread and how many
	// 429 records there are (the rateHigh and rateMedium thresholds), or
	// "none" when Limit is nil.
	Confidence string
}

// The thresholds of a fitted rate limit's Confidence: a rate measured in
// several intervals that agree, from many 429s, is the bucket's; one
// from a single interval, or from intervals that disagree (a limit that
// changed, or a bucket so small it refuses traffic below its rate by
// chance), may not be.
const (
	rateHighIntervals, rateHighRecords = 5, 100
	rateHighSpread                     = 0.1
	rateMediumIntervals                = 2
	rateMediumSpread                   = 0.25
)

// rateRecord keeps what a record tells about rate limits: the cell of
// each sampled rejection and 429 (by decision time, when the ticks count
// it), and for the burst the arrival of each request, passed or refused.
func (f *Fitter) rateRecord(r *record.Record) {
	arrival, decided := r.Time.Add(-r.Wait), r.Time
	switch r.Kind {
	case record.KindRequest:
		arrival, decided = r.Time, r.Time.Add(r.Wait)
	case record.KindAdmitted, record.KindRejected, record.KindCancelled:
	default:
		return // a release: its arrival has a record of its own
	}
	c := r.Class
	refused := r.Kind == record.KindRejected || r.Kind == record.KindCancelled || (r.Kind == record.KindRequest && r.Decision != record.Admitted)
	limited := refused && r.Reason == shed.ReasonRateLimited && r.Kind != record.KindCancelled && r.Decision != record.Cancelled
	if refused {
		if i, ok := f.index(decided.UnixNano()); ok {
			f.addCount(&f.cells.shedRec[c], i, 1)
			if limited {
				f.addCount(&f.cells.rlRec[c], i, 1)
			}
		}
	}
	if limited {
		f.rlRecords[c]++
	}
	if f.bursts[c] == nil {
		f.bursts[c] = &burstRing{}
	}
	f.bursts[c].add(arrival.UnixNano(), limited)
}

// fitRateLimits infers each class's rate limit (see RateLimitFit).
func (f *Fitter) fitRateLimits(fit *Fit) {
	inferred := false
	for c := range fit.Classes {
		f.fitRateLimit(c, &fit.Classes[c], fit)
		inferred = inferred || fit.Classes[c].RateLimit.Limit != nil
	}
	if inferred {
		why := "the recording has no keys, so"
		for c := range fit.Classes {
			if fit.Classes[c].RateLimit.Limit != nil && f.hashings.keyed[c] > 0 {
				why = "per-key limits are not fitted yet:"
			}
		}
		fit.Notes = append(fit.Notes, "rate limits: "+why+" a class's limit is fitted to its whole traffic as one key; the middleware keeps a bucket per key, and a class spread over many keys needs each key's share")
		if fit.SampleEvery > 1 {
			fit.Notes = append(fit.Notes, "the 429 counts are estimates: ticks count a class's rejections exactly but not their reasons, so each interval's are split by the reasons of its sampled records")
		}
	}
}

// fitRateLimit infers class c's rate limit, or notes why it does not.
func (f *Fitter) fitRateLimit(c int, cf *ClassFit, fit *Fit) {
	rf := &cf.RateLimit
	rf.Records, rf.Confidence = f.rlRecords[c], "none"
	if rf.Records == 0 {
		return
	}
	rps, passed := f.passedRate(c, rf)
	if why := rf.omitted(rps); why != "" {
		fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: %s: the scenario sets no rate limit", cf.Name, why))
		return
	}
	rps = min(round4(rps), MaxRateLimitRPS)
	slices.Sort(passed)
	rf.Spread = (quantile(passed, 0.75) - quantile(passed, 0.25)) / rps
	if rf.Spread > rateMediumSpread {
		fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: the rate that passed the rate limit varied by %.0f%% between the intervals with 429s: the limit may have changed during the recording, or its bucket is small (a few requests) and refuses traffic below its rate by chance, and the estimate falls short of the rate",
			cf.Name, 100*rf.Spread))
	}
	switch {
	case rf.Intervals >= rateHighIntervals && rf.Spread <= rateHighSpread && rf.Records >= rateHighRecords:
		rf.Confidence = "high"
	case rf.Intervals >= rateMediumIntervals && rf.Spread <= rateMediumSpread:
		rf.Confidence = "medium"
	default:
		rf.Confidence = "low"
	}
	burst, onsets, why := f.fitBurst(c, rps)
	rf.Limit, rf.Onsets, rf.BurstObserved = &RateLimit{RPS: rps, Burst: burst}, onsets, why == ""
	if why != "" {
		fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: burst not observed (%s): the rate limit's burst is the default, %d (a tenth of a second of its rate, at least 1)", cf.Name, why, burst))
	}
}

// omitted says why a class with 429 records gets no rate limit at the
// estimated rate rps, "" when it gets one.
func (rf *RateLimitFit) omitted(rps float64) string {
	switch {
	case rf.Records < FitMinRateLimited:
		return fmt.Sprintf("only %d 429 records (rate limited), too few to infer its limit (at least %d needed)", rf.Records, FitMinRateLimited)
	case !(rps > 0):
		return fmt.Sprintf("%d 429 records, but none in a full interval where requests passed the rate limit", rf.Records)
	}
	return ""
}

// passedRate estimates class c's 429s per interval into rf and returns
// the rate of the requests that passed the rate limit in the full
// intervals with a recorded 429, weighted by their 429s, and each such
// interval's passed rate.
func (f *Fitter) passedRate(c int, rf *RateLimitFit) (float64, []float64) {
	n := len(f.cells.expo)
	arr, shedT := pad(f.cells.arr[c], n), pad(f.cells.shed[c], n)
	shedRec, rlRec := pad(f.cells.shedRec[c], n), pad(f.cells.rlRec[c], n)
	half := 0.5 * f.opt.Interval.Seconds()
	var w, wp float64
	var passed []float64
	for i := range n {
		if rlRec[i] == 0 {
			continue
		}
		// At least the recorded ones; the exact rejections x their share.
		rl := max(rlRec[i], shedT[i]*rlRec[i]/shedRec[i])
		rf.RateLimited += rl
		if f.cells.expo[i] < half {
			continue
		}
		p := max(arr[i]-rl, 0) / f.cells.expo[i]
		w, wp = w+rl, wp+rl*p
		passed = append(passed, p)
	}
	rf.Intervals = len(passed)
	if w == 0 {
		return 0, nil
	}
	return wp / w, passed
}

// fitBurst returns class c's burst at rate rps and the spans it was
// measured on, or the default burst and why it was not measured.
func (f *Fitter) fitBurst(c int, rps float64) (burst, onsets int, why string) {
	def := DefaultBurst(rps)
	b := f.bursts[c]
	if b == nil {
		return def, 0, "no request passed the rate limit in the records"
	}
	b.finish()
	if b.late > b.seen/100 {
		return def, 0, fmt.Sprintf("%d of %d records arrived more than %v out of order", b.late, b.seen, burstLag)
	}
	perBin := rps * float64(burstBin) / 1e9
	best := 0.0
	for _, o := range b.onsets {
		if f.partialSpan(o.bin-burstSpan, o.bin) {
			continue
		}
		onsets++
		best = max(best, o.excess(perBin))
	}
	switch {
	case len(b.onsets) == 0:
		return def, 0, fmt.Sprintf("no 429 followed %v without any", burstSpan*time.Duration(burstBin))
	case onsets == 0:
		return def, 0, "the records before each 429 that followed a spell without any are sampled, or some were lost"
	case best < 1:
		return def, 0, "no span before a 429 passed more than the rate"
	}
	return int(min(math.Round(best), math.MaxInt32)), onsets, ""
}

// partialSpan reports whether the records of the fine bins [from, to]
// are a sample or lost some: the sampling of a cell is the one of its
// own tick and of the previous cell's.
func (f *Fitter) partialSpan(from, to int64) bool {
	n := len(f.cells.partial)
	a := int(max(min((from*burstBin-f.start)/f.dt, int64(n)), 0))
	b := int(max(min((to*burstBin-f.start)/f.dt, int64(n-1)), -1))
	for i := max(a-1, 0); i <= b; i++ {
		if f.cells.partial[i] {
			return true
		}
	}
	return false
}

// The fine timing of a class's arrivals, for its burst: bins of 5 ms in a
// ring of 41 s, which records may reach up to burstLag (36 s) out of time
// order (the net/http middleware writes a request when it ends), and the
// span before a 429 that the burst is measured on, 5 s: enough to drain a
// burst of a second of the rate at 1.2 times the rate.
const (
	burstBin       = int64(5 * time.Millisecond)
	burstBins      = 8192
	burstSpan      = 1000
	burstLag       = time.Duration((burstBins - burstSpan - 1) * burstBin)
	burstMaxOnsets = 64
)

// burstRing counts the arrivals of a class, passed and refused by the
// rate limit, in fine bins, and keeps the first burstMaxOnsets onsets:
// the passes of the span before each 429 that follows burstSpan bins
// without any. A bin settles when the ring moves past the start of its
// span.
type burstRing struct {
	lo         int64 // absolute bin (Unix ns / burstBin) of the oldest bin held
	began      bool
	pass, lim  []uint32 // by bin mod burstBins
	onsets     []burstOnset
	seen, late int
}

type burstOnset struct {
	bin  int64    // the bin of the 429
	pass []uint32 // the passes of bins bin-burstSpan to bin
}

func ringSlot(k int64) int64 { return (k%burstBins + burstBins) % burstBins }

func (b *burstRing) add(t int64, limited bool) {
	k := t / burstBin
	if t < 0 && t%burstBin != 0 {
		k-- // the floor
	}
	if !b.began {
		b.began, b.lo = true, k-burstBins/2
		b.pass, b.lim = make([]uint32, burstBins), make([]uint32, burstBins)
	}
	b.seen++
	if k < b.lo {
		b.late++
		return
	}
	if k >= b.lo+burstBins {
		b.advance(k - burstBins + 1)
	}
	if s := ringSlot(k); limited {
		b.lim[s]++
	} else {
		b.pass[s]++
	}
}

// advance moves the ring's start to lo, settling the bins it drops.
func (b *burstRing) advance(lo int64) {
	end := min(lo, b.lo+burstBins) // past it the ring holds nothing
	for ; b.lo < end; b.lo++ {
		b.settle(b.lo)
		s := ringSlot(b.lo)
		b.pass[s], b.lim[s] = 0, 0
	}
	b.lo = lo
}

// settle keeps the span [m, m+burstSpan] when its last bin holds the
// first 429 in it.
func (b *burstRing) settle(m int64) {
	j := m + burstSpan
	if b.lim[ringSlot(j)] == 0 {
		return
	}
	for i := j - 1; i >= m; i-- {
		if b.lim[ringSlot(i)] > 0 {
			return
		}
	}
	if len(b.onsets) == burstMaxOnsets {
		return
	}
	o := burstOnset{bin: j, pass: make([]uint32, burstSpan+1)}
	for i := range o.pass {
		o.pass[i] = b.pass[ringSlot(m+int64(i))]
	}
	b.onsets = append(b.onsets, o)
}

// finish settles every bin the ring holds.
func (b *burstRing) finish() {
	if b.began {
		b.advance(b.lo + burstBins)
	}
}

// excess returns the most requests that passed in a span ending with the
// onset's bin beyond perBin a bin.
func (o *burstOnset) excess(perBin float64) float64 {
	best, sum := 0.0, 0.0
	for i := len(o.pass) - 1; i >= 0; i-- {
		sum += float64(o.pass[i])
		best = max(best, sum-perBin*float64(len(o.pass)-i))
	}
	return best
}
