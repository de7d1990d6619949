package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// fitCapacity estimates the servers by Little's law over the saturated
// intervals, or, when there are none, bounds them from below by the most
// work that ran without queueing.
func (f *Fitter) fitCapacity(fit *Fit, lm *latencyModel) {
	meanS := fit.ServiceTime.Mean / 1e9 // seconds
	cf := &fit.Capacity
	cf.MeanService = time.Duration(fit.ServiceTime.Mean)
	var est, thr, infl []float64
	for i, s := range lm.sat {
		if !s {
			continue
		}
		x := f.doneRate(i)
		est, thr = append(est, x*meanS), append(thr, x)
		if f.cells.inflN[i] > 0 {
			infl = append(infl, f.cells.inflSum[i]/f.cells.inflN[i])
		}
	}
	if len(est) == 0 {
		f.capacityBound(fit, lm, meanS)
		return
	}
	slices.Sort(est)
	slices.Sort(thr)
	cf.Observed, cf.Intervals = true, len(est)
	cf.Servers, cf.Throughput, cf.InFlight = quantile(est, 0.5), quantile(thr, 0.5), mean(infl)
	if cf.Servers > 0 {
		cf.Spread = (quantile(est, 0.75) - quantile(est, 0.25)) / cf.Servers
	}
	switch {
	case cf.Intervals >= 5 && cf.Spread <= 0.1:
		cf.Confidence = "high"
	case cf.Intervals >= 2 && cf.Spread <= 0.25:
		cf.Confidence = "medium"
	default:
		cf.Confidence = "low"
	}
	if cf.Spread > 0.25 {
		fit.Notes = append(fit.Notes, fmt.Sprintf("the throughput of the saturated intervals varied (spread %.0f%%): a slowdown looks like saturation, and lowers the estimate", 100*cf.Spread))
	}
}

// capacityBound handles a recording that never saturated: the capacity is
// at least the largest work in flight that latency did not notice, and at
// least the busy servers (throughput x service time) of the busiest
// intervals (the 95% quantile: one interval's noise is no evidence).
func (f *Fitter) capacityBound(fit *Fit, lm *latencyModel, meanS float64) {
	cf := &fit.Capacity
	cf.Confidence = "not observed"
	peak, busy := 0.0, []float64(nil)
	half := 0.5 * f.opt.Interval.Seconds()
	for i := range lm.unsat {
		if !lm.unsat[i] || f.cells.expo[i] < half {
			continue
		}
		busy = append(busy, f.doneRate(i)*meanS)
		if f.cells.inflN[i] > 0 {
			peak = max(peak, f.cells.inflSum[i]/f.cells.inflN[i])
		}
	}
	slices.Sort(busy)
	cf.Servers = math.Ceil(max(peak, quantile(busy, 0.95), 1))
	msg := fmt.Sprintf("capacity not observed: traffic never saturated (latency stayed under 1.5x its baseline); the upstream serves at least %.0f at once", cf.Servers)
	if f.shedBy[shed.ReasonLimit] > 0 && f.limits[0] == f.limits[1] {
		msg += fmt.Sprintf(", and the limiter shed requests at its limit of %d before the upstream was the bottleneck", f.limits[0])
	}
	fit.Notes = append(fit.Notes, msg+": the scenario's capacity is that lower bound")
}

// fitCosts fits each class's estimated cost and its actual/estimate ratio.
func (f *Fitter) fitCosts(fit *Fit) {
	for c := range fit.Classes {
		cf := &fit.Classes[c]
		est := f.cost[c].values(nil)
		if allEqual(est, 1) {
			est = nil // every request costs 1: the default
		}
		cf.Cost = fitDist(est, []DistKind{Constant, Exponential, LogNormal, Uniform})
		if ratios := f.ratio[c].values(nil); len(ratios) >= 30 {
			cf.Actual = fitDist(ratios, []DistKind{Constant, Uniform, LogNormal})
		} else if act := f.actual[c].values(nil); len(act) > 0 && len(est) > 0 {
			// Estimates and actual costs from separate limiter events
			// cannot be paired: only their ratio of means is known.
			cf.Actual = DistFit{Dist: Const(round4(mean(act) / mean(est))), N: len(act)}
			if math.Abs(cf.Actual.Dist.Value-1) >= 0.01 {
				fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: actual costs are a constant share of the estimate (the ratio of their means): limiter events do not pair them", cf.Name))
			}
		}
		if d := cf.Actual.Dist; d.Kind == Constant && math.Abs(d.Value-1) < 0.01 {
			cf.Actual = DistFit{} // the actual cost is the estimate
		}
	}
}

func allEqual(xs []float64, v float64) bool {
	for _, x := range xs {
		if x != v {
			return false
		}
	}
	return true
}

// scenario builds the fitted scenario.
func (f *Fitter) scenario(fit *Fit) *Scenario {
	sc := &Scenario{
		Name:        f.opt.Name,
		Description: fmt.Sprintf("Fitted by shedsim fit to %v of recorded traffic from %s.", fit.Span, fit.Start.Format(time.RFC3339)),
		Duration:    fit.Span,
		Interval:    f.opt.Interval,
	}
	timeout := niceCeil(time.Duration(10 * fit.ServiceTime.P99))
	for _, cf := range fit.Classes {
		cl := Class{Name: cf.Name, Rate: round4(cf.Segments[0].Rate), Cost: cf.Cost.Dist, Actual: cf.Actual.Dist, RateLimit: cf.RateLimit.Limit.clone()}
		for _, s := range cf.Segments[1:] {
			cl.Schedule = append(cl.Schedule, RateChange{At: s.At, Rate: round4(s.Rate)})
		}
		if cl.Cost.Kind == Constant && cl.Cost.Value <= 1 {
			cl.Cost = Dist{}
		}
		if timeout > DefaultTimeout {
			cl.Timeout = timeout
		}
		cl.Keys = fittedKeys(&cf, fit)
		cl.KeyConcurrency = cf.KeyConcurrency.Limit.clone()
		fit.Store.share(&cl)
		sc.Classes = append(sc.Classes, cl)
	}
	sc.Service.Store = fit.Store.Model.clone()
	sc.Upstream = Upstream{Capacity: max(int(math.Round(fit.Capacity.Servers)), 1), ServiceTime: fit.ServiceTime.Dist, Discipline: f.opt.Discipline}
	if l := f.limits; l[0] == l[1] && l[0] < shed.MaxLimit {
		sc.Service.StaticLimit = l[0]
		fit.Notes = append(fit.Notes, fmt.Sprintf("the recorded limit was constant, %d: service.static_limit is set to it", l[0]))
	}
	fit.Notes = append(fit.Notes,
		fmt.Sprintf("client deadlines are not in the recording: every class gets %v (10x the service time's 99th percentile, at least 1s)", max(timeout, DefaultTimeout)),
		"the service sees attempts, not logical requests: the rates include any retries, and the scenario retries nothing",
		"one replica with its own upstream, no congestion collapse (degradation 0), service time independent of cost")
	return sc
}

// niceCeil rounds d up to 1, 2 or 5 times a power of ten.
func niceCeil(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	p := time.Duration(1)
	for p*10 <= d && p < time.Hour {
		p *= 10
	}
	for _, m := range []time.Duration{1, 2, 5, 10} {
		if m*p >= d {
			return m * p
		}
	}
	return 10 * p
}
