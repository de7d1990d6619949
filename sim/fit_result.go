package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Fit is what a Fitter inferred from a recording: the scenario, and the
// evidence and confidence behind each part of it.
type Fit struct {
	// Scenario is the fitted scenario, valid (see MarshalScenario).
	Scenario *Scenario
	// Start and Span are the recording's first interval and its length.
	Start time.Time
	Span  time.Duration
	// Intervals is the number of intervals (FitOptions.Interval).
	Intervals int
	// Records counts the records read; Lost is the recorder's count of
	// records it did not write; SampleEvery the sparsest sampling seen.
	Records     int
	Lost        uint64
	SampleEvery uint64
	Classes     []ClassFit
	// ServiceTime is fitted to the latencies of successes in the
	// unsaturated intervals: those whose mean latency is within 10% of
	// Baseline, the mean latency of the least loaded intervals.
	ServiceTime DistFit
	Baseline    time.Duration
	Unsaturated int
	Capacity    CapacityFit
	// KeySource is where the service took the keys the fit counted from,
	// as the headers of their files said (record.Header.KeySource), ""
	// when they did not say or disagreed (see the notes). The classes'
	// Keys carry it (Keys.Source).
	KeySource string
	// Store is what the records of the calls to the shared store (Redis)
	// tell, and the scenario's service.store (Store.Model) when enough
	// were seen.
	Store StoreFit
	// Notes say what the recording could not tell, and what was assumed.
	Notes []string
}

// ClassFit is what the fit inferred about one class.
type ClassFit struct {
	Name string
	// Arrivals counts the requests that reached admission (exact, from
	// the recorder's counters), those a rate limit refused with 429
	// included: they were offered all the same, and the fitted scenario
	// offers them to its rate limit. Those refused on sight are not
	// (Refused). MeanRate is per second over the span.
	Arrivals, MeanRate float64
	// Shed counts the rejected and cancelled ones, 429s included.
	Shed float64
	// Refused counts the requests answered 413 that never could have
	// been admitted, which the fitted scenario does not offer (its
	// service has no such limits, and would serve them): a body over the
	// middleware's maximum (exact, from the ticks), and a cost over the
	// limiter's whole budget (shed.ReasonCostTooLarge: estimated as the
	// 429s are, see RateLimitFit.RateLimited; exact when every rejection
	// was recorded). Arrivals, Shed and the costs leave them out.
	Refused float64
	// Segments are the spans of constant rate: the schedule.
	Segments []Segment
	// Cost is fitted to the estimated costs, Actual to actual/estimate.
	Cost, Actual DistFit
	// RateLimit is the class's rate limit, inferred from its 429s.
	RateLimit RateLimitFit
	// Keys is the class's tenants, inferred from its records' keys.
	Keys KeysFit
	// KeyConcurrency is what its refusals at a tenant's cap of requests
	// in flight tell (shedredis.ConcurrencyMiddleware's 429s).
	KeyConcurrency KeyConcurrencyFit
}

// CapacityFit is the upstream's capacity, in servers (requests served at
// once), estimated by Little's law: in an interval where work queues,
// every server is busy, so the throughput times the mean service time is
// the number of servers.
type CapacityFit struct {
	// Servers is the estimate, or when Observed is false a lower bound:
	// the most work that ran at once without queueing.
	Servers  float64
	Observed bool
	// Intervals is the number of saturated intervals (mean latency at
	// least 1.5 x Baseline) the estimate is the median over; Spread the
	// interquartile range of their estimates relative to it.
	Intervals int
	Spread    float64
	// Throughput is the median completions per second in them, InFlight
	// the mean work in flight the ticks saw there.
	Throughput, InFlight float64
	// MeanService is the mean of the service-time samples.
	MeanService time.Duration
	// Confidence is "high" (5 intervals or more, spread within 10%),
	// "medium" (2 or more, within 25%), "low", or "not observed".
	Confidence string
}

// Fit builds the scenario from what Add was given.
func (f *Fitter) Fit() (*Fit, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.endProbe() // a recording shorter than the probe
	f.settle()   // the recording ended: nothing more will tell about what is held
	n := len(f.cells.expo)
	if f.ticks < 2 || n == 0 {
		return nil, errShortRecording
	}
	fit := &Fit{Start: time.Unix(0, f.start).UTC(), Span: time.Duration(n) * f.opt.Interval, Intervals: n,
		Records: f.records, Lost: f.lost, SampleEvery: max(f.every, 1)}
	if f.outside > 0 {
		fit.Notes = append(fit.Notes, fmt.Sprintf("%d records with times far outside the recording's span were ignored", f.outside))
	}
	if note, ok := f.asideNote(); ok {
		fit.Notes = append(fit.Notes, note)
	}
	fit.Notes = append(fit.Notes, f.classNotes()...)
	f.fitClasses(fit)
	f.fitRateLimits(fit)
	f.fitKeys(fit)
	f.fitKeyConcurrency(fit)
	f.fitStore(fit)
	lm, err := f.latencyModel()
	if err != nil {
		return nil, err
	}
	fit.Baseline = time.Duration(lm.base)
	f.fitService(fit, &lm)
	f.fitCapacity(fit, &lm)
	f.fitCosts(fit)
	f.rankClasses(fit) // after the steps that index fit.Classes by the fit's class
	sc := f.scenario(fit)
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sim: fit: the fitted scenario is invalid: %w", err)
	}
	fit.Scenario = sc
	return fit, nil
}

func (f *Fitter) fitClasses(fit *Fit) {
	n := len(f.cells.expo)
	for c := range f.classCount() {
		counts := pad(f.cells.arr[c], n)
		cf := ClassFit{Name: f.className(c)}
		tooLarge := f.withoutRefused(c, counts, &cf)
		starts := segmentRates(counts, f.cells.expo, f.opt.MaxSteps+1)
		cf.Segments = segments(starts, counts, f.cells.expo, f.opt.Interval)
		var expo float64
		for i := range n {
			cf.Arrivals += counts[i]
			expo += f.cells.expo[i]
		}
		for _, v := range f.cells.shed[c] {
			cf.Shed += v
		}
		cf.Shed = max(cf.Shed-tooLarge, 0) + cf.KeyConcurrency.Refused
		if expo > 0 {
			cf.MeanRate = cf.Arrivals / expo
		}
		fit.Classes = append(fit.Classes, cf)
	}
	refusedNote(fit)
}

// pad returns s extended with zeros to n cells.
func pad(s []float64, n int) []float64 {
	out := make([]float64, n)
	copy(out, s)
	return out
}

// latencyModel classifies the intervals by their mean latency.
type latencyModel struct {
	mean        []float64 // per cell; NaN when it has too few latencies
	base        float64   // ns
	least       float64   // mean latency of the least loaded intervals (20% quantile)
	unsat, sat  []bool
	nUnsat, nOK int
}

// latencyModel takes as baseline the median mean latency of the intervals
// within 25% of the 20% quantile (the least loaded, which a service that
// is saturated most of the time still has), then calls an interval
// unsaturated within 10% of it and saturated from 1.5 times it (a queue
// that long means every server is busy), each widened to what an
// interval's few samples explain: 3 and 5 standard errors of its mean.
func (f *Fitter) latencyModel() (latencyModel, error) {
	n := len(f.cells.expo)
	lm := latencyModel{mean: make([]float64, n), unsat: make([]bool, n), sat: make([]bool, n)}
	var ok []float64
	for i := range n {
		lm.mean[i] = math.NaN()
		if f.cells.latN[i] >= 10 {
			lm.mean[i] = f.cells.latSum[i] / f.cells.latN[i]
			ok = append(ok, lm.mean[i])
		}
	}
	if len(ok) == 0 {
		return lm, fmt.Errorf("%w (no interval has 10 timed successes)", errShortRecording)
	}
	lm.nOK = len(ok)
	slices.Sort(ok)
	lm.least = quantile(ok, 0.2)
	lm.base = quantile(ok[:countAtMost(ok, 1.25*lm.least)], 0.5)
	cv := f.latencyCV(&lm)
	half := 0.5 * f.opt.Interval.Seconds()
	for i, m := range lm.mean {
		se := cv / math.Sqrt(f.cells.latN[i])
		switch {
		case math.IsNaN(m):
		case m <= lm.base*(1+max(0.1, 3*se)):
			lm.unsat[i] = true
			lm.nUnsat++
		case m >= lm.base*(1+max(0.5, 5*se)) && f.cells.expo[i] >= half:
			lm.sat[i] = true
		}
	}
	return lm, nil
}

// latencyCV is the coefficient of variation of the latencies in the least
// loaded intervals: how noisy an interval's mean latency is.
func (f *Fitter) latencyCV(lm *latencyModel) float64 {
	limit := 1.25 * lm.least
	xs := f.lat.values(func(c int) bool { return !math.IsNaN(lm.mean[c]) && lm.mean[c] <= limit })
	m := mean(xs)
	if len(xs) < 2 || m <= 0 {
		return 0
	}
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v/float64(len(xs)-1)) / m
}

// countAtMost returns how many of sorted xs are <= v.
func countAtMost(xs []float64, v float64) int {
	i, _ := slices.BinarySearch(xs, math.Nextafter(v, math.Inf(1)))
	return max(i, 1)
}

func (f *Fitter) fitService(fit *Fit, lm *latencyModel) {
	xs := f.lat.values(func(c int) bool { return lm.unsat[c] })
	fit.Unsaturated = lm.nUnsat
	if len(xs) < 100 {
		limit := 1.25 * lm.least
		xs = f.lat.values(func(c int) bool { return !math.IsNaN(lm.mean[c]) && lm.mean[c] <= limit })
		fit.Notes = append(fit.Notes, "few unsaturated intervals: the service time comes from the least loaded ones and may include queueing")
	}
	fit.ServiceTime = fitDist(xs, []DistKind{Constant, Exponential, LogNormal})
	if fit.ServiceTime.Quality() == "poor" {
		fit.Notes = append(fit.Notes, "the service time is none of constant, exponential or log-normal (bimodal? heavy-tailed?): the closest is used")
	}
}

// doneRate returns the completions per second of cell i.
func (f *Fitter) doneRate(i int) float64 {
	if f.cells.expo[i] <= 0 {
		return 0
	}
	d := 0.0
	for c := range shed.MaxClasses {
		if i < len(f.cells.done[c]) {
			d += f.cells.done[c][i]
		}
	}
	return d / f.cells.expo[i]
}
