package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/record"
)

// The renewals of a shedredis.Concurrency and the cleanups after them
// run off the request path: a renewal is a pipeline (the script loaded,
// then one script per key), two round trips or more, and both have a
// budget of their own, max(Timeout, LeaseTTL/10). Fitted with the
// requests' calls they would fatten the round trip's tail and put the
// renewal's budget among the timeouts of the calls a request waits for;
// the fit keeps them apart, and takes lease_ttl from them.

// minRenewalGaps is the fewest gaps of one period between recorded
// renewals from which the fit reads the renewer's period.
const minRenewalGaps = 5

// renewalGapTolerance is how far, as a share of the period, a gap
// between recorded renewals may be from a whole number of periods: the
// renewer's ticker keeps to its grid, but a call starts a little after
// its tick.
const renewalGapTolerance = 0.05

// RenewalFit is what the records of the renewals of leases, and of the
// cleanups after them, tell.
type RenewalFit struct {
	// Renewals and Cleanups count their records.
	Renewals, Cleanups int
	// Median is the median duration of the renewals answered (ok): a
	// whole pipeline.
	Median time.Duration
	// Timeout is the median duration of the renewals and cleanups that
	// timed out: their budget, max(timeout, lease_ttl/10); 0 when none
	// did. TimedOut counts them.
	Timeout  time.Duration
	TimedOut int
	// Period is the renewer's period (lease_ttl/3), from the spacing of
	// the recorded renewals; 0 when it does not show one (see
	// renewalPeriod), or when Behind shows the renewer behind its ticks.
	Period time.Duration
	// Behind counts the renewals that started as a renewal or cleanup
	// before them ended (within the gap tolerance): the renewer running
	// back to back, its gaps its calls' durations, not its period.
	Behind int
}

// fitRenewals collects the records of renewals and cleanups.
type fitRenewals struct {
	fit                RenewalFit
	answered, timeouts []float64
	starts, ends       []int64
	bounds             []int // where in starts each file after the first begins
}

// source notes that the records added next come from another file: a
// replica's, maybe, whose renewer keeps a grid of its own.
func (f *fitRenewals) source() {
	if n := len(f.starts); n > 0 && (len(f.bounds) == 0 || f.bounds[len(f.bounds)-1] < n) {
		f.bounds = append(f.bounds, n)
	}
}

// add notes r, a record of a renewal or a cleanup.
func (f *fitRenewals) add(r *record.Record) {
	if len(f.ends) < fitStoreSamples {
		f.ends = append(f.ends, r.Time.UnixNano()+int64(min(max(r.Latency, 0), maxFitStoreTimeout)))
	}
	if r.Op == record.StoreCleanup {
		f.fit.Cleanups++
	} else {
		f.fit.Renewals++
		if len(f.starts) < fitStoreSamples {
			f.starts = append(f.starts, r.Time.UnixNano())
		}
	}
	switch {
	case r.Result == record.StoreTimeout:
		f.fit.TimedOut++
		if len(f.timeouts) < fitStoreSamples {
			f.timeouts = append(f.timeouts, float64(r.Latency))
		}
	case r.Result == record.StoreOK && r.Op == record.StoreRenew && len(f.answered) < fitStoreSamples:
		f.answered = append(f.answered, float64(r.Latency))
	}
}

// result returns what the renewals tell.
func (f *fitRenewals) result() RenewalFit {
	out := f.fit
	median := func(xs []float64) time.Duration {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return time.Duration(min(quantile(xs, 0.5), float64(maxFitStoreTimeout))).Round(10 * time.Microsecond)
	}
	if len(f.answered) > 0 {
		out.Median = median(f.answered)
	}
	if len(f.timeouts) > 0 {
		out.Timeout = median(f.timeouts)
	}
	out.Period = renewalPeriod(f.starts, f.bounds...)
	if out.Period > 0 {
		out.Behind = behindTicks(f.starts, f.ends, out.Period)
		if out.Behind*10 > len(f.starts) {
			out.Period = 0
		}
	}
	return out
}

// behindTicks counts the starts that came just after a call of ends
// ended, within the gap tolerance of period p: a renewal made as soon as
// the renewer was free, not on its tick. (A call of no duration ends as
// it starts, and is no call before it.)
func behindTicks(starts, ends []int64, p time.Duration) int {
	ends = slices.Clone(ends)
	slices.Sort(ends)
	window := int64(renewalGapTolerance * float64(p))
	n := 0
	for _, s := range starts {
		if i, _ := slices.BinarySearch(ends, s-window); i < len(ends) && ends[i] < s {
			n++
		}
	}
	return n
}

// renewalPeriod returns the renewer's period from the starts of its
// recorded renewals: shedredis renews on a ticker, every LeaseTTL/3, so
// the gaps between the recorded ones are whole numbers of periods (more
// than one where a tick found nothing to renew, or the sampling skipped
// a renewal). It returns 0 when they show no single period: fewer than
// minRenewalGaps gaps of one, or more than a tenth of the gaps off its
// multiples (two Concurrencies recording to one Recorder, files of
// several replicas read together, or a renewer slower than its ticks).
// bounds split starts by file: each file's renewals keep their own grid
// (the files of several replicas read together), and the gaps are taken
// within each.
func renewalPeriod(starts []int64, bounds ...int) time.Duration {
	var gaps []float64
	from := 0
	for _, to := range bounds {
		gaps = appendGaps(gaps, starts[from:to])
		from = to
	}
	gaps = appendGaps(gaps, starts[from:])
	if len(gaps) < minRenewalGaps {
		return 0
	}
	slices.Sort(gaps)
	ones := 0
	for ones < len(gaps) && gaps[ones] <= gaps[0]*(1+renewalGapTolerance) {
		ones++
	}
	if ones < minRenewalGaps {
		return 0
	}
	p := quantile(gaps[:ones], 0.5)
	off := 0
	for _, g := range gaps {
		if n := math.Round(g / p); math.Abs(g-n*p) > renewalGapTolerance*p {
			off++
		}
	}
	if off*10 > len(gaps) || p > float64(math.MaxInt64)/3 {
		return 0
	}
	return time.Duration(p)
}

// appendGaps appends to gaps those between starts, in time order.
func appendGaps(gaps []float64, starts []int64) []float64 {
	starts = slices.Clone(starts)
	slices.Sort(starts) // records are roughly in time order, not strictly
	for i := 1; i < len(starts); i++ {
		if g := float64(starts[i]) - float64(starts[i-1]); g > 0 {
			gaps = append(gaps, g)
		}
	}
	return gaps
}

// leaseTTL returns the lease_ttl the renewals show for a store whose
// requests' calls have the budget timeout, and where it comes from:
// three renewal periods, else ten times their budget when it is over the
// requests' (max(timeout, lease_ttl/10)), else (not shown) shedredis's
// default. A value shedredis would refuse (under 4 x timeout) is not
// taken. The budget tells nothing when timeout is not known (no request's
// call timed out): it may be the timeout itself.
func (r *RenewalFit) leaseTTL(timeout time.Duration, timeoutKnown bool) (ttl time.Duration, source string, shown bool) {
	valid := func(d time.Duration) bool { return d >= time.Millisecond && d >= 4*timeout }
	if ttl = (3 * r.Period).Round(time.Millisecond); r.Period > 0 && valid(ttl) {
		return ttl, fmt.Sprintf("lease_ttl (%v) is 3 times the renewals' period (%v)", ttl, r.Period.Round(time.Microsecond)), true
	}
	if !timeoutKnown && r.TimedOut > 0 {
		ttl = max(DefaultStoreLeaseTTL, 4*timeout)
		return ttl, fmt.Sprintf("lease_ttl (%v) is shedredis's default: the renewals' budget (%v) may be the requests' timeout, unknown (none of their calls timed out), rather than lease_ttl/10", ttl, r.Timeout), false
	}
	if r.Timeout > timeout+timeout/10 && r.Timeout <= maxFitStoreTimeout/10 {
		if ttl = (10 * r.Timeout).Round(10 * time.Millisecond); valid(ttl) {
			return ttl, fmt.Sprintf("lease_ttl (%v) is 10 times the renewals' budget (%v, the median duration of the %d that timed out)",
				ttl, r.Timeout, r.TimedOut), true
		}
	}
	ttl = max(DefaultStoreLeaseTTL, 4*timeout)
	return ttl, fmt.Sprintf("lease_ttl (%v) is shedredis's default, which the recording does not show (no renewal period, nor a renewal budget over the timeout)", ttl), false
}

// renewalString says what the fit made of the renewals, for the report.
func renewalString(r *RenewalFit) string {
	if r.Renewals == 0 && r.Cleanups == 0 {
		return ""
	}
	line := fmt.Sprintf("; renewals: %d recorded, and %d cleanups after them, fitted apart (off the request path, with their own budget)", r.Renewals, r.Cleanups)
	if r.Median > 0 {
		line += fmt.Sprintf(", pipeline median %v", r.Median)
	}
	if r.TimedOut > 0 {
		line += fmt.Sprintf(", %d timed out at their budget %v", r.TimedOut, r.Timeout)
	}
	if r.Period > 0 {
		line += fmt.Sprintf(", every %v", r.Period.Round(time.Microsecond))
	}
	if r.Behind > 0 {
		line += fmt.Sprintf(", %d started as the call before them ended (the renewer behind its ticks)", r.Behind)
	}
	return line
}
