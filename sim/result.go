package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Result is one run: a scenario under a policy with a seed.
type Result struct {
	// Scenario is the normalized scenario (defaults filled in).
	Scenario *Scenario
	Policy   string
	Seed     uint64
	Series   []Row
	Summary  Summary
}

// idealSamples is the size of the sample of service times that the ideal
// is computed from.
const idealSamples = 20000

// idealModel holds, per class, the distribution of service times at
// nominal speed (cost scaling included) and the client's deadline.
type idealModel struct {
	emp      []*empirical // ns
	deadline []float64    // ns
	order    []int        // classes by mean service time, cheapest first
}

func newIdealModel(sc *Scenario, seed uint64) *idealModel {
	m := &idealModel{}
	u := &sc.Upstream
	for i := range sc.Classes {
		cl := &sc.Classes[i]
		r := newStream(seed, "ideal/"+cl.Name)
		xs := make([]float64, idealSamples)
		for k := range xs {
			d := u.ServiceTime.sample(r)
			if u.CostScaling > 0 {
				cost := max(math.Round(cl.Cost.sample(r)), 1)
				if !cl.Actual.IsZero() {
					cost = max(math.Round(cost*cl.Actual.sample(r)), 1)
				}
				d *= math.Pow(cost/u.CostRef, u.CostScaling)
			}
			xs[k] = d
		}
		m.emp = append(m.emp, newEmpirical(xs))
		m.deadline = append(m.deadline, float64(cl.Timeout))
		m.order = append(m.order, i)
	}
	slices.SortStableFunc(m.order, func(a, b int) int { return cmp.Compare(m.emp[a].mean, m.emp[b].mean) })
	return m
}

// ideal fills Row.Ideal for every row.
func (e *engine) ideal(seed uint64) {
	sc := e.sc
	m := newIdealModel(sc, seed)
	qe := make([]float64, len(sc.Classes))
	for i := range e.rec.rows {
		row := &e.rec.rows[i]
		b := int64(math.Round(row.Time * 1e9))
		a := b - int64(sc.Interval)
		clear(qe)
		capacity := 0.0 // nominal work-seconds the servers can do
		for _, u := range e.ups {
			cuts := []int64{a, b}
			for _, t := range u.boundaries() {
				if a < t && t < b {
					cuts = append(cuts, t)
				}
			}
			slices.Sort(cuts)
			for k := 0; k+1 < len(cuts); k++ {
				capF, slow, errs := u.stateAt(cuts[k])
				servers := max(math.Round(float64(sc.Upstream.Capacity)*capF), 1)
				w := servers / slow * float64(cuts[k+1]-cuts[k]) / 1e9
				capacity += w
				for c := range qe {
					qe[c] += w * (1 - errs) * m.emp[c].cdf(m.deadline[c]/slow)
				}
			}
		}
		// Serve the cheapest classes first: that maximizes the count.
		left, served := capacity, 0.0
		for _, c := range m.order {
			n := float64(row.Classes[c].Offered)
			work := m.emp[c].mean / 1e9
			if n*work > left {
				n = left / work
			}
			left -= n * work
			served += n * qe[c] / capacity
		}
		row.Ideal = served
	}
}

// classSummary returns what class c was offered and got, its tenants'
// shares included when it is spread over keys.
func (e *engine) classSummary(c int) ClassSummary {
	r := &e.rec
	m := r.measure
	cs := ClassSummary{
		Name: e.sc.Classes[c].Name, Offered: m.offered[c], Goodput: m.goodput[c],
		Timeouts: m.timeouts[c], Failed: m.failed[c], RateLimited: m.limited[c],
		GoodputShare:        ratio(float64(m.goodput[c]), float64(m.offered[c])),
		TriggerGoodputShare: ratio(float64(r.trigger.goodput[c]), float64(r.trigger.offered[c])),
		P50:                 m.lat[c].quantile(0.5) / 1e9, P99: m.lat[c].quantile(0.99) / 1e9,
		Keys: 1,
	}
	if k := e.sc.Classes[c].Keys; k != nil && k.Count > 1 {
		cs.Keys, cs.HotKeyOffered, cs.HotKeyGoodput = k.Count, m.hotOffered[c], m.hotGoodput[c]
		cs.HotKeyGoodputShare = ratio(float64(m.hotGoodput[c]), float64(m.hotOffered[c]))
		cs.OtherKeysGoodputShare = ratio(float64(m.goodput[c]-m.hotGoodput[c]), float64(m.offered[c]-m.hotOffered[c]))
		t := r.trigger
		cs.TriggerOtherKeysGoodputShare = ratio(float64(t.goodput[c]-t.hotGoodput[c]), float64(t.offered[c]-t.hotOffered[c]))
	}
	return cs
}

func (e *engine) result(policy string, seed uint64) *Result {
	e.ideal(seed)
	sc := e.sc
	r := &e.rec
	res := &Result{Scenario: sc, Policy: policy, Seed: seed, Series: r.rows}
	s := &res.Summary
	s.Scenario, s.Policy, s.Seed = sc.Name, policy, seed
	m := r.measure
	for c := range sc.Classes {
		s.Logical += m.offered[c]
		s.Goodput += m.goodput[c]
		s.Timeouts += m.timeouts[c]
		s.Failed += m.failed[c]
		s.RateLimited += m.limited[c]
		s.Classes = append(s.Classes, e.classSummary(c))
	}
	s.Attempts, s.Admitted = m.attempts, m.admitted
	for _, n := range m.rejected {
		s.Rejected += n
	}
	s.ClientRetries, s.GatewayRetries, s.ServiceRetries = m.retries[layerClient], m.retries[layerGateway], m.retries[layerService]
	s.Jobs = m.jobs

	iv := sc.Interval
	var good, ideal, tgood, tideal float64
	for _, row := range r.rows {
		start := time.Duration(math.Round(row.Time*1e9)) - iv
		if start >= sc.Warmup {
			good += float64(row.Goodput)
			ideal += row.Ideal
		}
		if t := sc.Trigger; t != nil && start >= t.At && start < t.End() {
			tgood += float64(row.Goodput)
			tideal += row.Ideal
		}
	}
	s.Ideal = ideal
	s.GoodputRatio = ratio(good, ideal)
	s.TriggerGoodputRatio = math.NaN()
	s.Recovery = math.NaN()
	s.HealthyThroughput = math.NaN()
	measureNs := float64(sc.Duration - sc.Warmup)
	s.Throughput = float64(s.Goodput) / (measureNs / 1e9)
	if t := sc.Trigger; t != nil {
		s.TriggerGoodputRatio = ratio(tgood, tideal)
		var hg int64
		for _, n := range r.healthy.goodput {
			hg += n
		}
		s.HealthyThroughput = float64(hg) / (t.At - sc.Warmup).Seconds()
		s.Recovery = recovery(r.rows, sc, s.HealthyThroughput)
	}
	s.P50, s.P99 = m.all.quantile(0.5)/1e9, m.all.quantile(0.99)/1e9
	s.AdmittedP50, s.AdmittedP99 = m.adm.quantile(0.5)/1e9, m.adm.quantile(0.99)/1e9
	s.HealthyP99, s.TriggerP99 = r.healthy.adm.quantile(0.99)/1e9, r.trigger.adm.quantile(0.99)/1e9
	s.Amplification = ratio(float64(s.Attempts), float64(s.Logical))
	s.UpstreamAmplification = ratio(float64(s.Jobs), float64(s.Logical))
	s.Wasted = ratio(m.wastedBusy, m.busy)
	s.RejectedShare = ratio(float64(s.Rejected), float64(s.Attempts))
	s.MeanLimit = ratio(m.limitSum, float64(m.limitTicks))
	s.MeanInFlight = m.inFlightArea / measureNs
	s.UpstreamMeanJobs = m.upArea / measureNs
	s.UpstreamThroughput = float64(m.jobs) / (measureNs / 1e9)
	s.UpstreamSojourn = ratio(m.sojourn, float64(m.jobs)) / 1e9
	return res
}

// recovery returns the seconds from the trigger's end to the start of the
// first run of Sustain worth of intervals whose goodput is at least 90% of
// the healthy throughput, or +Inf.
func recovery(rows []Row, sc *Scenario, healthy float64) float64 {
	iv := sc.Interval
	need := int((sc.Sustain + iv - 1) / iv)
	target := 0.9 * healthy * iv.Seconds()
	end := sc.Trigger.End()
	run := 0
	for _, row := range rows {
		start := time.Duration(math.Round(row.Time*1e9)) - iv
		if start < end {
			continue
		}
		if float64(row.Goodput) >= target {
			run++
			if run == need {
				return (start - iv*time.Duration(need-1) - end).Seconds()
			}
		} else {
			run = 0
		}
	}
	return math.Inf(1)
}

// Check returns the scenario's expectations for this result's policy that
// do not hold, one message each. Expect.Policy "*" applies to every
// policy.
func (r *Result) Check() []string {
	var bad []string
	for _, x := range r.Scenario.Expect {
		if x.Policy != r.Policy && x.Policy != "*" {
			continue
		}
		v, ok := r.Summary.Metric(x.Metric)
		if !ok || math.IsNaN(v) || v < x.Min || v > x.Max {
			bad = append(bad, fmt.Sprintf("%s/%s: %s = %.4g, want in [%g, %g]", r.Scenario.Name, r.Policy, x.Metric, v, x.Min, x.Max))
		}
	}
	return bad
}
