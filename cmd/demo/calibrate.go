package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

// Calibration checks that the simulator predicts the demo. The protected
// run is recorded at the gateway (-record); -calibrate fits the recording
// (sim.FitRecording) with a processor-sharing upstream, the demo
// upstream's model, and simulates the run under the demo's own
// configuration (its admission flags): the limit, the classes (by
// default interactive protected 0.8 with its queue, batch), the retry
// budget and attempt timeout, the clients' deadlines and the slowdown. It
// then compares, per class and per phase, the goodput (2xx within the client's deadline, as a share
// of the requests offered) and the limit, measured and predicted.
//
// From the recording come the arrival rates and the service time: the
// latency of admitted work when nothing queued, which includes the
// gateway's and the loopback's own time. The upstream's capacity comes
// from -capacity: the protected run rarely saturates the upstream when it
// is healthy, and during the slowdown it does, but at a tenth of its
// speed, which a fit reads as a tenth of the capacity. The fitted estimate
// is printed beside it. The slowdown slows the upstream's work only, not
// the gateway's and the loopback's part of the fitted time
// (upstreamSlowdown). The prediction replays the run's offered load
// second by second (replayOffered): what is checked is the model of the
// gateway and the upstream, not the luck of one run's arrivals.

// newRecording returns the recorder of the protected run when -record is
// set, nil otherwise. It refuses a directory that already holds a
// recording: two runs in one recording fit as neither.
func newRecording(o *options, mode string) (*record.Recorder, error) {
	if o.record == "" || mode != "protected" {
		return nil, nil
	}
	if err := os.MkdirAll(o.record, 0o755); err != nil {
		return nil, fmt.Errorf("-record: %w", err)
	}
	if old, _ := filepath.Glob(filepath.Join(o.record, "record-*.jsonl")); len(old) > 0 {
		return nil, fmt.Errorf("-record: %s already holds a recording: remove it or choose another directory", o.record)
	}
	// Everything is recorded: the demo's rates are low, and a calibration
	// wants every request.
	return record.New(record.Config{Dir: o.record, MaxRecordsPerSecond: -1})
}

func stopRecording(r *record.Recorder, dir string, stdout io.Writer) {
	if err := r.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: recording:", err)
	}
	st := r.Stats()
	fmt.Fprintf(stdout, "recording: %s (%d records written, %d lost)\n", dir, st.Written, st.Lost)
}

// calibrate fits the protected run's recording, simulates the run and
// prints prediction against measurement; with -out it also writes
// calibration.csv (per second), calibration.yaml (the scenario) and
// calibration.png.
func calibrate(o *options, measured *runResult, stdout io.Writer) error {
	if measured.mode != "protected" {
		return errors.New("calibrate: the protected run did not complete")
	}
	fit, sc, err := fitDemo(o)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	fitted := sc
	sc = replayOffered(fitted, measured.secs)
	preds, err := predict(sc, o)
	if err != nil {
		return err
	}
	pred := preds[0]
	fmt.Fprintf(stdout, "\n== calibration: the simulator (processor-sharing upstream) against the protected run ==\n")
	fmt.Fprintf(stdout, "fitted from %d records: service time %s (median %v), capacity estimate %.1f (%s), used: -capacity %d\n",
		fit.Records, fit.ServiceTime.Dist.Kind, medianOf(fit.ServiceTime.Dist).Round(100*time.Microsecond),
		fit.Capacity.Servers, fit.Capacity.Confidence, o.capacity)
	for c, name := range classNames {
		fmt.Fprintf(stdout, "%s: fitted rate %.1f/s (offered %.0f/s)\n", name, fitted.Classes[c].Rate, o.rates[c])
	}
	fmt.Fprintf(stdout, "predicted: at the run's own offered load, second by second; mean over %d seeds (from -seed %d), their range in parentheses\n", len(preds), o.seed)
	fmt.Fprint(stdout, comparePhases(o.sched, measured.secs, preds).String())
	// The simulator's default upstream, for contrast: FIFO servers.
	fifo := *sc
	fifo.Upstream.Discipline = sim.FIFO
	if fp, err := predict(&fifo, o); err == nil {
		fmt.Fprintf(stdout, "the same with a FIFO upstream (the simulator's default) instead:\n%s",
			comparePhases(o.sched, measured.secs, fp).String())
	}
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if b, err := sim.MarshalScenario(sc); err == nil {
		if err := os.WriteFile(filepath.Join(o.out, "calibration.yaml"), b, 0o644); err != nil {
			return err
		}
	}
	if err := writeCalibrationCSV(filepath.Join(o.out, "calibration.csv"), measured.secs, pred); err != nil {
		return err
	}
	if err := calibrationChart(filepath.Join(o.out, "calibration.png"), o.sched, measured.secs, pred); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "calibration: %s/calibration.csv, .png (measured and predicted per second) and .yaml (the scenario: shedsim -scenario)\n", o.out)
	return nil
}

// fitDemo fits the recording of -record and returns the fit and the
// protected run as a scenario (demoScenario).
func fitDemo(o *options) (*sim.Fit, *sim.Scenario, error) {
	rd, err := record.Open(o.record)
	if err != nil {
		return nil, nil, err
	}
	fit, err := sim.FitRecording(rd, sim.FitOptions{Name: "demo-calibration", Discipline: sim.PS})
	_ = rd.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("fit: %w", err)
	}
	return fit, demoScenario(o, fit), nil
}

var classNames = [numClasses]string{"interactive", "batch"}

// calibrationSeeds is the number of simulated runs a prediction averages.
// A simulated slowdown is as noisy as a real one: one seed's goodput
// differs from the next by several points, and the mean of a handful
// carries noise of the size of the gaps the comparison is there to show.
// A run of the demo's scenario takes a fraction of a second.
const calibrationSeeds = 20

// predict simulates sc with calibrationSeeds seeds from -seed, and
// returns the series of each, the one of -seed first.
func predict(sc *sim.Scenario, o *options) ([][]second, error) {
	var out [][]second
	for i := range uint64(calibrationSeeds) {
		res, err := sim.Run(sc, demoPolicy(o), sim.Options{Seed: o.seed + i})
		if err != nil {
			return nil, fmt.Errorf("calibrate: simulate: %w", err)
		}
		out = append(out, predictedSeconds(res))
	}
	return out, nil
}

func medianOf(d sim.Dist) time.Duration {
	switch d.Kind {
	case sim.LogNormal:
		return time.Duration(d.Median)
	case sim.Exponential:
		return time.Duration(d.Mean * math.Ln2)
	}
	return time.Duration(d.Value)
}

// demoScenario is the protected run as a scenario: the fitted arrivals
// and service time, the demo's configuration for everything else.
func demoScenario(o *options, fit *sim.Fit) *sim.Scenario {
	d := max(o.sched.Duration.Truncate(time.Second), 2*time.Second)
	sc := &sim.Scenario{
		Name:        "demo-calibration",
		Description: "The demo's protected run: rates and service time fitted to its recording, the rest from its flags.",
		Duration:    d, Interval: time.Second, Warmup: time.Second,
	}
	for c, name := range classNames {
		cl := sim.Class{Name: name, Timeout: o.deadlines[c]}
		for _, fc := range fit.Scenario.Classes {
			if fc.Name == name {
				cl.Rate = fc.Rate
				for _, ch := range fc.Schedule {
					if ch.At < d {
						cl.Schedule = append(cl.Schedule, ch)
					}
				}
			}
		}
		sc.Classes = append(sc.Classes, cl)
	}
	// As gateway.go configures the limiter (admission.shedClasses).
	for c, k := range o.adm.classes {
		cl := &sc.Classes[c]
		cl.Protected = k.protected
		if k.queue > 0 {
			cl.Queue, cl.MaxWait = k.queue, k.wait
		}
	}
	// As gateway.go's retrybudget.Transport: 3 attempts, each bounded by
	// -attempt-timeout, its backoff, and the budget of -budget-ratio and
	// -budget-floor.
	sc.Service = sim.Service{
		Timeout: o.attemptTimeout,
		Retry: sim.Retry{MaxAttempts: 3, Budget: &sim.Budget{Ratio: o.adm.budgetRatio, MinPerSecond: o.adm.budgetFloor},
			Backoff: retrybudget.DefaultBaseBackoff, MaxBackoff: retrybudget.DefaultMaxBackoff},
		NoDeadlinePropagation: o.noPropagation,
	}
	up := sim.Upstream{Capacity: o.capacity, Discipline: sim.PS, MaxInFlight: 25 * o.capacity, ServiceTime: fit.ServiceTime.Dist}
	if s := o.sched; s.Factor > 1 && s.SlowFor > 0 {
		up.Events = append(up.Events, sim.UpstreamEvent{At: s.SlowStart, For: s.SlowFor, Slowdown: upstreamSlowdown(s, fit.ServiceTime.Dist)})
	}
	if s := o.sched; s.DownFor > 0 {
		// The demo answers 503 at once; the simulator fails the work
		// after its service time: close enough for a comparison.
		up.Events = append(up.Events, sim.UpstreamEvent{At: s.DownStart, For: s.DownFor, Errors: 1})
	}
	sc.Upstream = up
	return sc
}

// upstreamSlowdown is the factor by which the slowdown multiplies the
// fitted service time. The demo's upstream multiplies its own work
// (median -latency) by -slow-factor, but the fitted time is measured at
// the gateway: it also holds the gateway's and the loopback's time, which
// the slowdown leaves alone. Multiplying that overhead by the factor too
// would make every slow job longer than the demo's, and the upstream,
// saturated during the slowdown, would serve fewer of them. So the slowed
// median is the fitted one plus (factor - 1) times -latency. A fit no
// slower than -latency shows no overhead: the factor applies as is.
func upstreamSlowdown(s schedule, fitted sim.Dist) float64 {
	m, h := float64(medianOf(fitted)), float64(s.Healthy)
	if !(m > h) || h <= 0 {
		return s.Factor
	}
	return (m + (s.Factor-1)*h) / m
}

// replayOffered returns sc with each class offering, second by second,
// as many requests as the measured run did (secs), in place of the fitted
// rate. The run is one draw of the load generator's Poisson arrivals: a
// slowdown that happens to get fewer interactive requests than the mean
// rate ends with a higher goodput, and a prediction at the mean rate
// would miss that by chance, not by a fault of the model it checks. A
// class that offered nothing in secs keeps the fit.
func replayOffered(sc *sim.Scenario, secs []second) *sim.Scenario {
	out := *sc
	out.Description = "The demo's protected run: its offered load second by second, the service time fitted to its recording, the rest from its flags."
	out.Classes = slices.Clone(sc.Classes)
	n := min(len(secs), int(sc.Duration/time.Second))
	for c := range min(len(out.Classes), numClasses) {
		total := 0
		for i := range n {
			total += secs[i].offered[c]
		}
		if total == 0 {
			continue
		}
		cl := &out.Classes[c]
		cl.Rate = float64(secs[0].offered[c])
		cl.Schedule = make([]sim.RateChange, 0, n-1)
		for i := 1; i < n; i++ {
			cl.Schedule = append(cl.Schedule, sim.RateChange{At: time.Duration(i) * time.Second, Rate: float64(secs[i].offered[c])})
		}
	}
	return &out
}

// demoPolicy builds the gateway's limiter as gateway.go does: the limit
// of -limit-algo with the demo's initial limit and latency ceiling.
func demoPolicy(o *options) sim.Policy {
	return sim.PolicyFunc("demo-"+o.adm.algo, func(env sim.PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		g, err := o.adm.newLimit(o.initialLimit, o.latencyCeiling)
		if err != nil {
			return nil, nil, err
		}
		cfg := env.Config
		cfg.Source = g
		l, err := shed.New(cfg)
		return l, g, err
	})
}

// predictedSeconds turns the simulator's rows into the demo's seconds.
func predictedSeconds(res *sim.Result) []second {
	out := make([]second, len(res.Series))
	for i, r := range res.Series {
		for c := range numClasses {
			if c < len(r.Classes) {
				out[i].offered[c] = int(r.Classes[c].Offered)
				out[i].good[c] = int(r.Classes[c].Goodput)
			}
		}
		if !math.IsNaN(r.Limit) {
			out[i].limit = int(math.Round(r.Limit))
		}
		out[i].inflight = int(math.Round(r.InFlight))
	}
	return out
}

// phaseFigures are one phase's figures in one series.
type phaseFigures struct {
	goodput [numClasses]float64 // good / offered
	limit   float64             // mean of the per-second limits
}

func figures(secs []second, from, to int) phaseFigures {
	var f phaseFigures
	to = min(to, len(secs))
	var good, offered [numClasses]int
	n := 0
	for i := from; i < to; i++ {
		for c := range numClasses {
			good[c] += secs[i].good[c]
			offered[c] += secs[i].offered[c]
		}
		f.limit += float64(secs[i].limit)
		n++
	}
	for c := range numClasses {
		f.goodput[c] = ratio(good[c], offered[c])
	}
	if n > 0 {
		f.limit /= float64(n)
	}
	return f
}

// comparison is measured against predicted, phase by phase. The
// prediction is made with several seeds: a simulated run is as noisy as a
// real one, and one seed could agree by chance.
type comparison struct {
	phases   []string
	measured []phaseFigures
	pred     [][]phaseFigures // by phase, then seed
}

// comparePhases cuts the series into the schedule's phases: healthy
// (from the second second, as the demo's summary: the first is the
// process's and the limit's warm-up), slowdown, and after it. predicted
// holds one series per seed.
func comparePhases(s schedule, measured []second, predicted [][]second) comparison {
	sec := func(d time.Duration) int { return int(d / time.Second) }
	bounds := []struct {
		name     string
		from, to int
	}{
		{"healthy", min(1, sec(s.SlowStart)-1), sec(s.SlowStart)},
		{"slowdown", sec(s.SlowStart), sec(s.SlowStart + s.SlowFor)},
		{"after", sec(s.SlowStart + s.SlowFor), sec(s.Duration)},
	}
	var cmp comparison
	for _, b := range bounds {
		if b.to <= b.from {
			continue
		}
		cmp.phases = append(cmp.phases, fmt.Sprintf("%s %ds-%ds", b.name, b.from, b.to))
		cmp.measured = append(cmp.measured, figures(measured, b.from, b.to))
		var ps []phaseFigures
		for _, p := range predicted {
			ps = append(ps, figures(p, b.from, b.to))
		}
		cmp.pred = append(cmp.pred, ps)
	}
	return cmp
}

// spread returns the mean, min and max of f over the seeds.
func spread(ps []phaseFigures, f func(*phaseFigures) float64) (mean, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range ps {
		v := f(&ps[i])
		mean += v
		lo, hi = min(lo, v), max(hi, v)
	}
	return mean / float64(len(ps)), lo, hi
}

// String prints one line per figure and, for each phase, the measured
// figure, the predicted one (mean over the seeds, and their range) and the
// gap: points of goodput, percent of the limit.
func (c comparison) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s", "")
	for _, p := range c.phases {
		fmt.Fprintf(&b, " | %-37s", p)
	}
	fmt.Fprintf(&b, "\n%-20s", "")
	for range c.phases {
		fmt.Fprintf(&b, " | %7s %7s %12s %8s", "meas.", "pred.", "(seeds)", "gap")
	}
	b.WriteString("\n")
	for k := range numClasses {
		fmt.Fprintf(&b, "%-20s", "goodput "+classNames[k])
		for i := range c.phases {
			m := 100 * c.measured[i].goodput[k]
			p, lo, hi := spread(c.pred[i], func(f *phaseFigures) float64 { return 100 * f.goodput[k] })
			fmt.Fprintf(&b, " | %6.1f%% %6.1f%% %12s %+6.1fpt", m, p, fmt.Sprintf("(%.0f-%.0f)", lo, hi), p-m)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%-20s", "mean limit")
	for i := range c.phases {
		m := c.measured[i].limit
		p, lo, hi := spread(c.pred[i], func(f *phaseFigures) float64 { return f.limit })
		gap := math.NaN()
		if m > 0 {
			gap = 100 * (p/m - 1)
		}
		fmt.Fprintf(&b, " | %7.1f %7.1f %12s %+7.0f%%", m, p, fmt.Sprintf("(%.0f-%.0f)", lo, hi), gap)
	}
	b.WriteString("\n")
	return b.String()
}
