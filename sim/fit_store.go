package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/record"
)

// shedredis with Config.Recorder records a sample of its calls to Redis
// (record.KindStore): start, duration, operation, result. The fit infers
// the scenario's service.store from them: the round trip (fitted to the
// durations of the calls Redis answered), the time budget (the median
// duration of the calls that timed out), and the shares of calls that
// timed out, failed or were skipped by the open breaker, which it
// reports. Renewals and the cleanups after them (off the request path,
// with a budget of their own) are fitted apart, and give lease_ttl (see
// RenewalFit); the calls the open breaker skipped give breaker_failures
// and breaker_open when every call was recorded (see BreakerFit).

// FitMinStoreCalls is the fewest answered calls from which a fit writes
// service.store.
const FitMinStoreCalls = 100

// fitStoreSamples bounds the durations the fit keeps.
const fitStoreSamples = 50_000

// maxFitStoreTimeout bounds the timeout a fit writes, so that the
// lease_ttl it derives (4 x timeout) stays a time.Duration: a recording
// may say anything up to 292 years.
const maxFitStoreTimeout = time.Duration(math.MaxInt64 / 4)

// StoreFit is what the records of store calls tell.
type StoreFit struct {
	// Calls counts the records of store calls (a sample, as the
	// requests' records are); Results counts them by record.StoreResult.
	Calls   int
	Results [5]int
	// Allows and Acquires count the calls of rate decisions and of lease
	// acquisitions: which shared limits the service has; Releases those
	// of the leases' releases.
	Allows, Acquires, Releases int
	// Latency is fitted to the durations of the calls answered (ok):
	// rate decisions, acquisitions and releases (its N counts them all;
	// its Median and P99 are those of a sample of at most 50,000). Its
	// Dist is the round trip of every call that reached the store, the
	// timed-out ones counted as slower than any answered (see censored),
	// which Median and P99 are the quantiles of, in ns; P99 is +Inf when
	// the timed-out calls are more than the slowest hundredth.
	Latency     DistFit
	Median, P99 float64
	// Timeout is the median duration of the calls that timed out: the
	// client's time budget; 0 when none did.
	Timeout time.Duration
	// TimedOut counts the calls that timed out, renewals and cleanups
	// aside (they have a budget of their own).
	TimedOut int
	// Renewal is what the renewals and the cleanups after them tell.
	Renewal RenewalFit
	// Breaker is what the calls the open breaker skipped tell.
	Breaker BreakerFit
	// fitted: Median and P99 tell the round trip (fewer than half the
	// calls that reached the store timed out).
	fitted bool
	// Model is the store written into the scenario: nil below
	// FitMinStoreCalls answered calls, or when the scenario has no
	// limit for the store to share (see the notes).
	Model *StoreModel
}

// Share returns the share of the calls that ended with res.
func (s *StoreFit) Share(res record.StoreResult) float64 {
	if s.Calls == 0 || int(res) >= len(s.Results) {
		return 0
	}
	return float64(s.Results[res]) / float64(s.Calls)
}

// fitStoreCalls collects the records of store calls.
type fitStoreCalls struct {
	fit      StoreFit
	answered reservoir
	timeouts []float64
	renewals fitRenewals
	breakers fitBreakers
}

// storeRecord notes r, a record of a store call.
func (f *Fitter) storeRecord(r *record.Record) {
	s := &f.store
	if int(r.Result) >= len(s.fit.Results) {
		return
	}
	s.fit.Calls++
	s.fit.Results[r.Result]++
	s.breakers.add(r)
	switch r.Op {
	case record.StoreAllow:
		s.fit.Allows++
	case record.StoreAcquire:
		s.fit.Acquires++
	case record.StoreRelease:
		s.fit.Releases++
	case record.StoreRenew, record.StoreCleanup:
		s.renewals.add(r)
		return
	}
	switch r.Result {
	case record.StoreOK:
		if s.answered.cap == 0 {
			s.answered.init(fitStoreSamples)
		}
		s.answered.add(f.rng, 0, float64(r.Latency))
	case record.StoreTimeout:
		s.fit.TimedOut++
		if len(s.timeouts) < fitStoreSamples {
			s.timeouts = append(s.timeouts, float64(r.Latency))
		}
	}
}

// source notes that the records added next come from another file.
func (s *fitStoreCalls) source() {
	s.renewals.source()
	s.breakers.source()
}

// fitStore infers the store's model, after the rate limits and key
// concurrency: the limits it is written for are theirs.
func (f *Fitter) fitStore(fit *Fit) {
	s := &f.store.fit
	if s.Calls == 0 {
		return
	}
	s.Renewal = f.store.renewals.result()
	s.Breaker = f.store.breakers.result()
	xs := f.store.answered.values(func(int) bool { return true })
	s.Latency = fitDist(xs, []DistKind{Constant, Exponential, LogNormal})
	// The counts, not the samples: past fitStoreSamples they are fewer
	// than the calls, and the timeouts' and the answered calls' unalike.
	s.Latency.N = f.store.answered.seen
	timedOut := 0.0
	if n := s.TimedOut; n > 0 {
		ts := slices.Clone(f.store.timeouts)
		slices.Sort(ts)
		s.Timeout = time.Duration(min(quantile(ts, 0.5), 2*float64(maxFitStoreTimeout))).Round(100 * time.Microsecond)
		timedOut = float64(n) / float64(n+s.Latency.N)
	}
	censoredOK := s.censored(xs, timedOut)
	s.fitted = censoredOK && len(xs) > 0
	shared := false
	for _, c := range fit.Classes {
		shared = shared || (s.Allows > 0 && c.RateLimit.Limit != nil) || (s.Acquires > 0 && c.KeyConcurrency.Limit != nil)
	}
	switch {
	case !censoredOK:
		fit.Notes = append(fit.Notes, fmt.Sprintf("store: %.0f%% of the calls that reached it timed out: the round trip's median is beyond the timeout, and cannot be fitted: the scenario has no service.store", 100*timedOut))
	case s.Latency.N < FitMinStoreCalls:
		fit.Notes = append(fit.Notes, fmt.Sprintf("store: too few answered calls recorded (%d, at least %d) to fit the round trip: the scenario has no service.store", s.Latency.N, FitMinStoreCalls))
	case s.Timeout > maxFitStoreTimeout:
		fit.Notes = append(fit.Notes, fmt.Sprintf("store: the calls that timed out took over %v: no client's time budget, the recording is wrong: the scenario has no service.store", maxFitStoreTimeout.Round(time.Hour)))
	case !shared:
		fit.Notes = append(fit.Notes, "store: calls recorded, but the fit inferred no rate limit (for its allow calls) or key concurrency (for its acquire calls) for the store to keep: the scenario has no service.store")
	default:
		s.Model = &StoreModel{Latency: s.Latency.Dist, Timeout: s.Timeout}
		timeout := s.Timeout
		if timeout == 0 {
			timeout = DefaultStoreTimeout
		}
		ttl, ttlSource, shown := s.Renewal.leaseTTL(timeout, s.Timeout > 0)
		if shown || s.Timeout > 0 {
			s.Model.LeaseTTL = ttl // else the default, left implicit
		}
		breakerSource := s.Breaker.apply(s.Model, f.every > 1 || f.lost > 0)
		fit.Notes = append(fit.Notes, fmt.Sprintf("store: service.store from %d answered calls; its timeout %s; %s; %s; %s",
			s.Latency.N, storeTimeoutSource(s.Timeout, s.TimedOut), ttlSource, breakerSource, s.sharedString()))
	}
	fit.Store = *s
}

// censored sets s.Median, s.P99 and the round trip's distribution from
// sorted xs, the durations of the answered calls, when the share
// timedOut of the calls that reached the store timed out: those were
// slower than the budget, so the quantile q of every call is the
// quantile q/(1-timedOut) of the answered ones, and fitted to the
// answered alone the round trip would come out faster and narrower than
// it is, and the scenario would time out less often than the service
// did (TestFitStoreRoundTrip measures both). The shape is the one fitted
// to the answered calls; its parameters come from the quantiles of the
// lower half, which no timeout censors. It reports false when half the
// calls or more timed out (every one, too): no quantile tells the
// median.
func (s *StoreFit) censored(xs []float64, timedOut float64) bool {
	if timedOut >= 0.5 {
		return false
	}
	if len(xs) == 0 {
		return true
	}
	all := func(q float64) float64 { return quantile(xs, q/(1-timedOut)) }
	s.Median, s.P99 = all(0.5), math.Inf(1)
	if timedOut <= 0.01 {
		s.P99 = all(0.99)
	}
	if timedOut == 0 {
		return true
	}
	switch d := &s.Latency.Dist; d.Kind {
	case LogNormal:
		if q10 := all(0.1); q10 > 0 && s.Median > q10 {
			sigma := math.Round(1000*math.Log(s.Median/q10)/1.2815516) / 1000
			*d = LogNorm(round4(s.Median), min(sigma, 5))
		}
	case Exponential:
		*d = Exp(round4(s.Median / math.Ln2))
	case Constant:
		*d = Const(round4(s.Median))
	}
	return true
}

// storeTimeoutSource says where the fitted timeout came from.
func storeTimeoutSource(d time.Duration, n int) string {
	if d == 0 {
		return fmt.Sprintf("is shedredis's default (%v): no call timed out", DefaultStoreTimeout)
	}
	return fmt.Sprintf("(%v) is the median duration of the %d calls that timed out", d, n)
}

// storeString says what the fit made of the store calls, for the report.
func storeString(s *StoreFit) string {
	if s.Calls == 0 {
		return "store: not observed: a recording times no call to the shared store (Redis) unless shedredis has Config.Recorder; the scenario has no service.store (add one with the round trip your Redis client measures, its timeout and its lease_ttl, when a limit is shared)"
	}
	pct := func(r record.StoreResult) string { return fmt.Sprintf("%.1f%%", 100*s.Share(r)) }
	l := s.Latency
	line := fmt.Sprintf("store: %d calls recorded (%d rate decisions, %d lease acquisitions, %d releases), %s timed out, %s failed, %s skipped by the open breaker",
		s.Calls, s.Allows, s.Acquires, s.Releases, pct(record.StoreTimeout), pct(record.StoreError), pct(record.StoreBreakerOpen))
	if s.fitted {
		p99 := "beyond the timeout"
		if !math.IsInf(s.P99, 1) {
			p99 = fitDur(s.P99).String()
		}
		line += fmt.Sprintf("; round trip (%d answered calls, and the timed-out ones counted as slower): median %v, p99 %s, %s; the answered calls fit its shape %s (KS distance %.3f)",
			l.N, fitDur(s.Median), p99, distString(l.Dist, true), l.Quality(), l.KS)
	}
	line += renewalString(&s.Renewal)
	if s.Model == nil {
		return line + "; not written into the scenario (see the notes)"
	}
	return line + "; written as service.store"
}

// sharedString says which limits the scenario shares, as share marks
// them.
func (s *StoreFit) sharedString() string {
	switch {
	case s.Allows > 0 && s.Acquires > 0:
		return "the classes' rate limits and key concurrency caps the fit inferred are shared (rate_limit.shared, key_concurrency.shared): the calls were rate decisions and lease acquisitions"
	case s.Allows > 0:
		return "the classes' rate limits the fit inferred are shared (rate_limit.shared): the calls were rate decisions"
	}
	return "the classes' key concurrency caps the fit inferred are shared (key_concurrency.shared): the calls were lease acquisitions"
}

// share marks the limits the store keeps as shared, in the
// scenario's class cl, when the fit wrote a store.
func (s *StoreFit) share(cl *Class) {
	if s.Model == nil {
		return
	}
	if cl.RateLimit != nil && s.Allows > 0 {
		cl.RateLimit.Shared = true
	}
	if cl.KeyConcurrency != nil && s.Acquires > 0 {
		cl.KeyConcurrency.Shared = true
	}
}
