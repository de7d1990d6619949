package sim

import (
	"math"
	"strings"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// Row is one interval of a run's time series. Counts are events in the
// interval; InFlight and UpstreamInFlight are time averages; Limit is
// sampled at the interval's end; latencies are in seconds (NaN when the
// interval has no sample).
type Row struct {
	// Time is the end of the interval, in seconds from the start.
	Time float64
	// Offered counts new logical requests (first attempts of clients).
	Offered int64
	// Attempts counts requests reaching the service (limiter decisions,
	// and the 429s of RateLimited); Admitted those admitted; Rejected
	// those rejected by the limiters, by shed.Reason.
	Attempts int64
	Admitted int64
	Rejected [shed.NumReasons]int64
	// RateLimited counts requests reaching the service that a class's
	// rate limit or key concurrency refused (429) before the limiter saw
	// them. They count in Attempts, not in Rejected.
	RateLimited int64
	// Completed counts admitted requests that finished (permit released).
	Completed int64
	// Goodput counts logical requests answered successfully within
	// their client's deadline; Timeouts those that hit their deadline;
	// Failed those that ended with an error or a rejection.
	Goodput  int64
	Timeouts int64
	Failed   int64
	// Retries counts retry attempts at every layer.
	Retries int64
	// Jobs counts upstream jobs finished, Wasted those whose caller had
	// given up.
	Jobs   int64
	Wasted int64
	// InFlight is the mean number of permits held (all replicas);
	// UpstreamInFlight the mean number of jobs at the upstream, waiting
	// or running; Limit the sum of the replicas' limits (NaN for no
	// limit).
	InFlight         float64
	UpstreamInFlight float64
	Limit            float64
	// Ideal is the goodput the upstream could have delivered (see
	// Summary.Ideal).
	Ideal float64
	// LimitCuts and LimitRelearns count the adaptive limits' windows
	// (all replicas) whose decision cut the limit, or re-learned the
	// dependency's latency as its new normal (limits.Reason); zero for
	// sources that do not report their decisions.
	LimitCuts, LimitRelearns int64
	// LimitDecisions counts the same windows by the reason of their
	// decision, indexed by limits.Reason: which rule moved the limit.
	LimitDecisions [limits.NumReasons]int64
	// AdmittedP99 is the 99th percentile of the time admitted requests
	// spent in the service (queue wait included).
	AdmittedP99 float64
	// Classes holds the per-class figures, in scenario order.
	Classes []ClassRow
}

// ClassRow is the part of a Row about one class. P50 and P99 are the
// client-side latencies of logical requests that succeeded, retries
// included, in seconds.
type ClassRow struct {
	Offered, Goodput, Timeouts, Failed int64
	P50, P99                           float64
}

// acc accumulates the figures of one interval or one summary window.
type acc struct {
	offered, goodput, timeouts, failed []int64
	limited                            []int64 // rate limited, per class
	hotOffered, hotGoodput             []int64 // key 0's offered and goodput, per class
	attempts, admitted, completed      int64
	rejected                           [shed.NumReasons]int64
	retries                            [4]int64 // by layer
	jobs, wasted                       int64
	busy, wastedBusy                   float64 // upstream ns
	sojourn                            float64 // upstream ns, summed
	inFlightArea, upArea               float64 // ns x count
	limitSum                           float64
	limitTicks                         int64
	lat                                []hist // client latency of successes, per class
	all                                hist   // the same, all classes
	adm                                hist   // time admitted requests spent in the service
}

func newAcc(classes int) *acc {
	return &acc{
		offered: make([]int64, classes), goodput: make([]int64, classes),
		timeouts: make([]int64, classes), failed: make([]int64, classes),
		limited: make([]int64, classes), lat: make([]hist, classes),
		hotOffered: make([]int64, classes), hotGoodput: make([]int64, classes),
	}
}

func (a *acc) reset() {
	lat := a.lat
	for i := range lat {
		lat[i].reset()
	}
	clear(a.offered)
	clear(a.goodput)
	clear(a.timeouts)
	clear(a.failed)
	clear(a.limited)
	clear(a.hotOffered)
	clear(a.hotGoodput)
	a.all.reset()
	a.adm.reset()
	*a = acc{offered: a.offered, goodput: a.goodput, timeouts: a.timeouts, failed: a.failed, limited: a.limited,
		hotOffered: a.hotOffered, hotGoodput: a.hotGoodput, lat: lat, all: a.all, adm: a.adm}
}

// recorder gathers a run's measures: the current interval and the summary
// windows (measure: after warmup; healthy: warmup to trigger; trigger).
type recorder struct {
	sc        *Scenario
	cur       *acc
	measure   *acc
	healthy   *acc
	trigger   *acc
	act       []*acc // the accumulators that the current instant belongs to
	rows      []Row
	upPresent int
	inFlight  int
	// decided: the decisions counted so far by reason, all replicas.
	decided [limits.NumReasons]uint64
}

// decider is a limit source that counts its windows by the reason of
// their decision (limits.Gradient and limits.AIMD).
type decider interface {
	Decisions(f func(reason string, windows uint64))
}

// reasonIndex maps a limits.Reason's name back to it.
var reasonIndex = func() map[string]limits.Reason {
	m := make(map[string]limits.Reason, limits.NumReasons)
	for r := range limits.NumReasons {
		m[r.String()] = r
	}
	return m
}()

// decisionTotals sums, over the replicas, the windows decided by each
// reason so far.
func decisionTotals(e *engine) (totals [limits.NumReasons]uint64) {
	for i := range e.replicas {
		d, ok := e.replicas[i].src.(decider)
		if !ok {
			continue
		}
		d.Decisions(func(reason string, n uint64) {
			if r, ok := reasonIndex[reason]; ok {
				totals[r] += n
			}
		})
	}
	return totals
}

func (r *recorder) init(sc *Scenario) {
	n := len(sc.Classes)
	r.sc = sc
	r.cur, r.measure, r.healthy, r.trigger = newAcc(n), newAcc(n), newAcc(n), newAcc(n)
	r.act = []*acc{r.cur}
	r.rows = make([]Row, 0, int(sc.Duration/sc.Interval))
}

// phase recomputes the windows the instant now belongs to.
func (r *recorder) phase(now int64) {
	sc := r.sc
	r.act = r.act[:1]
	if now >= int64(sc.Warmup) {
		r.act = append(r.act, r.measure)
		if t := sc.Trigger; t != nil {
			switch {
			case now < int64(t.At):
				r.act = append(r.act, r.healthy)
			case now < int64(t.End()):
				r.act = append(r.act, r.trigger)
			}
		}
	}
}

// phaseTimes returns the instants at which the windows change.
func (r *recorder) phaseTimes() []int64 {
	t := []int64{int64(r.sc.Warmup)}
	if tr := r.sc.Trigger; tr != nil {
		t = append(t, int64(tr.At), int64(tr.End()))
	}
	return t
}

// advance integrates the time-weighted measures up to at.
func (r *recorder) advance(e *engine, at int64) {
	dt := float64(at - e.now)
	fi, fu := float64(r.inFlight)*dt, float64(r.upPresent)*dt
	for _, a := range r.act {
		a.inFlightArea += fi
		a.upArea += fu
	}
}

func (r *recorder) offered(e *engine, c int, key int32) {
	for _, a := range r.act {
		a.offered[c]++
		if key == 0 {
			a.hotOffered[c]++
		}
	}
}

func (r *recorder) attempt(e *engine) {
	for _, a := range r.act {
		a.attempts++
	}
}

func (r *recorder) reject(e *engine, reason shed.Reason) {
	for _, a := range r.act {
		a.rejected[reason]++
	}
}

func (r *recorder) rateLimited(class uint8) {
	for _, a := range r.act {
		a.limited[class]++
	}
}

func (r *recorder) admit(e *engine, rep *replica) {
	r.inFlight++
	for _, a := range r.act {
		a.admitted++
	}
}

func (r *recorder) retry(l layer) {
	for _, a := range r.act {
		a.retries[l]++
	}
}

func (r *recorder) release(e *engine, t *task, res result) {
	r.inFlight--
	d := e.now - t.arrival
	for _, a := range r.act {
		a.completed++
		a.adm.add(d)
	}
}

func (r *recorder) logical(e *engine, t *task, res result) {
	c := t.class
	switch res {
	case resOK:
		d := e.now - t.arrival
		for _, a := range r.act {
			a.goodput[c]++
			if t.key == 0 {
				a.hotGoodput[c]++
			}
			a.lat[c].add(d)
			a.all.add(d)
		}
	case resTimeout:
		for _, a := range r.act {
			a.timeouts[c]++
		}
	default:
		for _, a := range r.act {
			a.failed[c]++
		}
	}
}

func (r *recorder) job(e *engine, j *task, wasted bool) {
	w := float64(j.work)
	s := float64(e.now - j.arrival)
	for _, a := range r.act {
		a.jobs++
		a.busy += w
		a.sojourn += s
		if wasted {
			a.wasted++
			a.wastedBusy += w
		}
	}
}

// abandoned records the work (ns) an abandoned job received
// (Upstream.Abandon): busy and wasted, but no completed job.
func (r *recorder) abandoned(work int64) {
	w := float64(work)
	for _, a := range r.act {
		a.busy += w
		a.wastedBusy += w
	}
}

// tick closes the current interval.
func (r *recorder) tick(e *engine) {
	a := r.cur
	limit := 0.0
	for i := range e.replicas {
		n := e.replicas[i].lim.Limit()
		if n >= shed.MaxLimit {
			limit = math.NaN()
			break
		}
		limit += float64(n)
	}
	for _, w := range r.act[1:] {
		if !math.IsNaN(limit) {
			w.limitSum += limit
			w.limitTicks++
		}
	}
	iv := float64(r.sc.Interval)
	row := Row{
		Time:             float64(e.now) / 1e9,
		Attempts:         a.attempts,
		Admitted:         a.admitted,
		Rejected:         a.rejected,
		Completed:        a.completed,
		Retries:          a.retries[0] + a.retries[1] + a.retries[2],
		Jobs:             a.jobs,
		Wasted:           a.wasted,
		InFlight:         a.inFlightArea / iv,
		UpstreamInFlight: a.upArea / iv,
		Limit:            limit,
		AdmittedP99:      a.adm.quantile(0.99) / 1e9,
		Classes:          make([]ClassRow, len(a.offered)),
	}
	for c := range a.offered {
		row.Offered += a.offered[c]
		row.Goodput += a.goodput[c]
		row.Timeouts += a.timeouts[c]
		row.Failed += a.failed[c]
		row.RateLimited += a.limited[c]
		row.Classes[c] = ClassRow{
			Offered: a.offered[c], Goodput: a.goodput[c], Timeouts: a.timeouts[c], Failed: a.failed[c],
			P50: a.lat[c].quantile(0.5) / 1e9, P99: a.lat[c].quantile(0.99) / 1e9,
		}
	}
	totals := decisionTotals(e)
	for k := range totals {
		n := int64(totals[k] - r.decided[k])
		row.LimitDecisions[k] = n
		switch {
		case limits.Reason(k).IsCut():
			row.LimitCuts += n
		case limits.Reason(k) == limits.ReasonRelearn:
			row.LimitRelearns += n
		}
	}
	r.decided = totals
	r.rows = append(r.rows, row)
	a.reset()
}

// Summary is what a run comes to. Counts and latencies cover the measure
// window (after Warmup); latencies are in seconds.
type Summary struct {
	Scenario string
	Policy   string
	Seed     uint64

	// Logical requests offered, and how they ended.
	Logical, Goodput, Timeouts, Failed int64
	// Attempts reaching the service, admitted and rejected by limiters.
	Attempts, Admitted, Rejected int64
	// RateLimited counts attempts that a class's rate limit or key
	// concurrency refused (429) before the limiter: in Attempts, apart
	// from Rejected (503).
	RateLimited int64
	// Retries made by clients, the gateway and the replicas.
	ClientRetries, GatewayRetries, ServiceRetries int64
	// Jobs finished by the upstream.
	Jobs int64

	// Ideal is the goodput the upstream could have delivered: in each
	// interval, the logical requests offered, as many as the upstream's
	// servers can serve at their current speed (cheapest classes first
	// when the offered work exceeds it: that maximizes the count), each
	// counted with the probability that its service time at that speed
	// fits within its client's deadline and that it does not fail (error
	// bursts). It ignores queueing, degradation and the cost of failed
	// attempts, and counts requests in the interval they arrive while
	// goodput counts them when they finish, so a run can exceed it by a
	// little, in a window shorter than a few latencies by more.
	Ideal float64
	// GoodputRatio is Goodput / Ideal over the measure window;
	// TriggerGoodputRatio the same during the trigger.
	GoodputRatio        float64
	TriggerGoodputRatio float64

	// Throughput is the goodput per second over the measure window;
	// HealthyThroughput over the healthy window (warmup to trigger).
	Throughput        float64
	HealthyThroughput float64
	// Recovery is the time from the trigger's end to the first interval
	// that starts Sustain of intervals with goodput >= 90% of the healthy
	// throughput, in seconds: +Inf if that never happens, NaN without a
	// trigger.
	Recovery float64

	// P50 and P99: client latency of successful logical requests.
	P50, P99 float64
	// AdmittedP50 and AdmittedP99: time admitted requests spent in the
	// service (queue wait + upstream), measure window; HealthyP99 and
	// TriggerP99: AdmittedP99 before and during the trigger.
	AdmittedP50, AdmittedP99 float64
	HealthyP99, TriggerP99   float64

	// Amplification is attempts at the service per logical request;
	// UpstreamAmplification upstream jobs per logical request.
	Amplification         float64
	UpstreamAmplification float64
	// Wasted is the share of the upstream's busy time spent on jobs whose
	// caller had given up (timed out, or answered by another attempt),
	// including the work of jobs abandoned before their end
	// (Upstream.Abandon), which Jobs does not count.
	Wasted float64
	// RejectedShare is Rejected / Attempts.
	RejectedShare float64
	// MeanLimit and MeanInFlight are time averages over the measure
	// window (sum over replicas; MeanLimit NaN for no limit).
	MeanLimit, MeanInFlight float64

	// Upstream queueing figures, for checks against theory: the mean
	// number of jobs present (waiting or served), jobs finished per
	// second and the mean time a job spends at the upstream (s).
	UpstreamMeanJobs, UpstreamThroughput, UpstreamSojourn float64

	Classes []ClassSummary
}

// ClassSummary is the part of a Summary about one class.
type ClassSummary struct {
	Name                               string
	Offered, Goodput, Timeouts, Failed int64
	// RateLimited counts the class's attempts refused by its rate limit
	// or its key concurrency (429).
	RateLimited int64
	// GoodputShare is Goodput / Offered; TriggerGoodputShare the same
	// during the trigger (NaN without one).
	GoodputShare        float64
	TriggerGoodputShare float64
	P50, P99            float64
	// Keys is the class's number of keys (Class.Keys; 1 without). With
	// more than one, key 0 is its heaviest tenant: HotKeyOffered and
	// HotKeyGoodput count its requests, HotKeyGoodputShare is the share
	// of them that succeeded and OtherKeysGoodputShare the same for
	// every other key. All four are zero with one key.
	Keys                                      int
	HotKeyOffered, HotKeyGoodput              int64
	HotKeyGoodputShare, OtherKeysGoodputShare float64
	// TriggerOtherKeysGoodputShare is OtherKeysGoodputShare during the
	// trigger (NaN without one, zero with one key): what the other
	// tenants get while the incident lasts, which a whole-run share
	// dilutes when the incident is a heavy key's surge. As
	// TriggerGoodputShare, it counts the answers given in the window
	// against the requests sent in it, so it can exceed 1 by a little.
	TriggerOtherKeysGoodputShare float64
}

// metricHelp lists the metric names for errors and -h.
const metricHelp = "goodput, trigger_goodput, throughput, healthy_throughput, recovery, p50, p99, admitted_p50, admitted_p99, healthy_p99, trigger_p99, p99_ratio, amplification, upstream_amplification, wasted, rejected, rate_limited, mean_limit, mean_in_flight, class.NAME.goodput, class.NAME.trigger_goodput, class.NAME.p50, class.NAME.p99, class.NAME.hot_key_goodput, class.NAME.other_keys_goodput, class.NAME.trigger_other_keys_goodput"

// MetricNames returns the names accepted by Summary.Metric (class
// metrics as class.NAME.goodput, class.NAME.trigger_goodput,
// class.NAME.p50, class.NAME.p99).
func MetricNames() []string { return strings.Split(metricHelp, ", ") }

func knownMetric(name string, sc *Scenario) bool {
	if rest, ok := strings.CutPrefix(name, "class."); ok {
		i := strings.LastIndexByte(rest, '.')
		if i < 0 {
			return false
		}
		cl, m := rest[:i], rest[i+1:]
		for _, c := range sc.Classes {
			if c.Name == cl {
				keyed := c.Keys != nil && c.Keys.Count > 1 // the hot key and the rest need keys
				return m == "goodput" || m == "trigger_goodput" || m == "p50" || m == "p99" || (keyed && (m == "hot_key_goodput" || m == "other_keys_goodput" || m == "trigger_other_keys_goodput"))
			}
		}
		return false
	}
	var s Summary
	_, ok := s.Metric(name)
	return ok
}

// Metric returns a summary figure by name (see MetricNames): ratios as
// fractions, times in seconds. p99_ratio is TriggerP99 / HealthyP99;
// rate_limited is RateLimited / Attempts, as rejected is Rejected /
// Attempts.
func (s *Summary) Metric(name string) (float64, bool) {
	switch name {
	case "goodput":
		return s.GoodputRatio, true
	case "trigger_goodput":
		return s.TriggerGoodputRatio, true
	case "throughput":
		return s.Throughput, true
	case "healthy_throughput":
		return s.HealthyThroughput, true
	case "recovery":
		return s.Recovery, true
	case "p50":
		return s.P50, true
	case "p99":
		return s.P99, true
	case "admitted_p50":
		return s.AdmittedP50, true
	case "admitted_p99":
		return s.AdmittedP99, true
	case "healthy_p99":
		return s.HealthyP99, true
	case "trigger_p99":
		return s.TriggerP99, true
	case "p99_ratio":
		return s.TriggerP99 / s.HealthyP99, true
	case "amplification":
		return s.Amplification, true
	case "upstream_amplification":
		return s.UpstreamAmplification, true
	case "wasted":
		return s.Wasted, true
	case "rejected":
		return s.RejectedShare, true
	case "rate_limited":
		return ratio(float64(s.RateLimited), float64(s.Attempts)), true
	case "mean_limit":
		return s.MeanLimit, true
	case "mean_in_flight":
		return s.MeanInFlight, true
	}
	if rest, ok := strings.CutPrefix(name, "class."); ok {
		i := strings.LastIndexByte(rest, '.')
		if i < 0 {
			return 0, false
		}
		cl, m := rest[:i], rest[i+1:]
		for _, c := range s.Classes {
			if c.Name != cl {
				continue
			}
			switch m {
			case "goodput":
				return c.GoodputShare, true
			case "trigger_goodput":
				return c.TriggerGoodputShare, true
			case "p50":
				return c.P50, true
			case "p99":
				return c.P99, true
			case "hot_key_goodput", "other_keys_goodput", "trigger_other_keys_goodput":
				if c.Keys <= 1 {
					return math.NaN(), true // one key: neither the hot one nor the rest
				}
				switch m {
				case "hot_key_goodput":
					return c.HotKeyGoodputShare, true
				case "other_keys_goodput":
					return c.OtherKeysGoodputShare, true
				}
				return c.TriggerOtherKeysGoodputShare, true
			}
		}
	}
	return 0, false
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
