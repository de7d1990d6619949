// Command demo shows what shedkit does during an upstream slowdown. It
// starts, on 127.0.0.1, an upstream whose latency follows a schedule
// (healthy, then slower, then healthy), a gateway that calls it, and a load
// generator with interactive and batch traffic. It runs the schedule once
// with an unprotected gateway and once with shedkit (adaptive limit,
// priority classes, retry budget, clients' deadlines propagated to the
// gateway and on to the upstream), prints one progress line a second, and
// ends with a side-by-side summary and a report (Markdown and PNG charts).
// The summary counts the answers the gateway finished after its client
// had given up, and the upstream's time spent on work whose caller had
// gone: the waste that overload and unknown deadlines create.
//
// The upstream shares its capacity among the requests in flight
// (processor sharing), the model of the simulator's upstream.discipline:
// ps. With -record the protected run is recorded at the gateway (package
// record); with -calibrate too, the recording is fitted, the run simulated
// under the demo's configuration, and prediction compared with
// measurement (make calibrate-demo). With -tune too, the simulator's
// tuner searches a better configuration on the fitted run, the protected
// run is repeated with the winner, and the two runs are compared (make
// tune-demo); the gateway's admission flags (-limit-algo,
// -interactive-protected, -budget-ratio, ...) select any configuration
// by hand.
//
// While it runs, Prometheus metrics are served on -metrics-addr/metrics.
// Traces and metrics are also exported by OTLP when the standard
// OpenTelemetry variables ask for it (OTEL_EXPORTER_OTLP_ENDPOINT, ...).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

type options struct {
	sched          schedule
	rates          [numClasses]float64
	deadlines      [numClasses]time.Duration
	capacity       int
	modes          []string
	out            string
	metricsAddr    string
	seed           uint64
	quiet          bool
	initialLimit   int
	latencyCeiling time.Duration
	adm            admission // the protected gateway's admission control
	attemptTimeout time.Duration
	noPropagation  bool
	record         string // directory for the protected run's recording
	calibrate      bool
	tune           bool // -tune: tune on the recording, re-run with the winner
	tuneBudget     int
	tuneSeeds      int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: demo [flags]

Runs the same load and the same upstream slowdown against an unprotected
gateway and a gateway protected by shedkit, and compares them. Everything
listens on 127.0.0.1. The report goes to -out (report.md and PNG charts).

Traces and metrics are exported by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT
(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, e.g. to a local Jaeger:
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 demo

Flags:
`)
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.sched.Duration, "duration", 30*time.Second, "length of each run")
	fs.DurationVar(&o.sched.Healthy, "latency", 40*time.Millisecond, "upstream median latency when healthy")
	fs.Float64Var(&o.sched.Factor, "slow-factor", 10, "how many times slower the upstream gets")
	fs.DurationVar(&o.sched.SlowStart, "slow-start", 8*time.Second, "when the slowdown starts, from the start of a run")
	fs.DurationVar(&o.sched.SlowFor, "slow-for", 12*time.Second, "how long the slowdown lasts")
	fs.DurationVar(&o.sched.DownStart, "outage-start", 0, "when the upstream goes down (answers 503 at once), from the start of a run")
	fs.DurationVar(&o.sched.DownFor, "outage-for", 0, "how long the upstream is down (0: never)")
	fs.IntVar(&o.capacity, "capacity", 40, "requests the upstream serves at once before it slows further (processor sharing)")
	fs.Float64Var(&o.rates[interactive], "interactive-rate", 120, "interactive requests per second (Poisson)")
	fs.Float64Var(&o.rates[batch], "batch-rate", 120, "batch requests per second (Poisson)")
	fs.DurationVar(&o.deadlines[interactive], "interactive-deadline", time.Second, "deadline of an interactive request")
	fs.DurationVar(&o.deadlines[batch], "batch-deadline", 3*time.Second, "deadline of a batch request")
	mode := fs.String("mode", "both", "which runs: both, protected or unprotected")
	fs.StringVar(&o.out, "out", "out/demo", "directory for report.md and the charts (empty: no report)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9464", "where to serve Prometheus metrics (empty: nowhere)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrival and latency randomness")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	fs.IntVar(&o.initialLimit, "initial-limit", 20, "shedkit: initial concurrency limit of the gateway")
	fs.DurationVar(&o.latencyCeiling, "latency-ceiling", 0, "shedkit: latency above which the limit is cut (0: none)")
	addAdmissionFlags(fs, &o.adm)
	fs.DurationVar(&o.attemptTimeout, "attempt-timeout", 800*time.Millisecond, "shedkit: timeout of one attempt to the upstream")
	fs.BoolVar(&o.noPropagation, "no-deadline-propagation", false, "shedkit: clients do not send their deadline, so the gateway does not know it")
	fs.StringVar(&o.record, "record", "", "record the protected run's traffic at the gateway to this directory (package record; for shedsim fit and -calibrate)")
	fs.BoolVar(&o.calibrate, "calibrate", false, "after the protected run, fit its recording (-record) with a processor-sharing upstream, simulate the run under the same configuration and compare prediction with measurement")
	fs.BoolVar(&o.tune, "tune", false, "after the protected run, fit its recording (-record), search a better configuration with the simulator's tuner (shedsim tune), re-run the protected gateway with it and compare (make tune-demo)")
	fs.IntVar(&o.tuneBudget, "tune-budget", sim.DefaultTuneBudget, "-tune: candidate configurations to try, the hand-picked one included")
	fs.IntVar(&o.tuneSeeds, "tune-seeds", 3, "-tune: simulated seeds per candidate and stress variant")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch *mode {
	case "both":
		o.modes = []string{"unprotected", "protected"}
	case "protected", "unprotected":
		o.modes = []string{*mode}
	default:
		return nil, fmt.Errorf("-mode must be both, protected or unprotected, got %q", *mode)
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return o, nil
}

// check validates the options that parseFlags has read.
func (o *options) check() error {
	if o.calibrate && (o.record == "" || !slices.Contains(o.modes, "protected")) {
		return fmt.Errorf("-calibrate needs -record and the protected run")
	}
	if o.tune && (o.record == "" || !slices.Contains(o.modes, "protected")) {
		return fmt.Errorf("-tune needs -record and the protected run")
	}
	if o.tuneBudget < 1 || o.tuneSeeds < 1 {
		return fmt.Errorf("-tune-budget and -tune-seeds must be >= 1")
	}
	if err := o.sched.validate(); err != nil {
		return err
	}
	for c := 0; c < numClasses; c++ {
		if o.rates[c] < 0 || o.deadlines[c] <= 0 {
			return fmt.Errorf("rates must be >= 0 and deadlines > 0")
		}
	}
	if o.capacity < 1 || o.initialLimit < 1 || o.attemptTimeout <= 0 {
		return fmt.Errorf("-capacity, -initial-limit and -attempt-timeout must be > 0")
	}
	if err := o.adm.validate(o.latencyCeiling); err != nil {
		return err
	}
	return nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options, stdout io.Writer) error {
	tel, err := setupTelemetry(ctx, o.metricsAddr)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tel.shutdown(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "demo: telemetry shutdown:", err)
		}
	}()
	fmt.Fprintf(stdout, "shedkit demo: upstream %v median, %gx slower from %v for %v; capacity %d in flight\n",
		o.sched.Healthy, o.sched.Factor, o.sched.SlowStart, o.sched.SlowFor, o.capacity)
	if o.sched.DownFor > 0 {
		fmt.Fprintf(stdout, "outage: the upstream answers 503 at once from %v for %v\n", o.sched.DownStart, o.sched.DownFor)
	}
	fmt.Fprintf(stdout, "load: interactive %.0f/s (deadline %v), batch %.0f/s (deadline %v); runs of %v: %s\n",
		o.rates[interactive], o.deadlines[interactive], o.rates[batch], o.deadlines[batch], o.sched.Duration, strings.Join(o.modes, ", "))
	if tel.addr != "" {
		fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", tel.addr)
	}
	if tel.otlp {
		fmt.Fprintln(stdout, "traces: exported by OTLP")
	}

	var results []*runResult
	for _, mode := range o.modes {
		if ctx.Err() != nil {
			break
		}
		r, err := runOnce(ctx, o, mode, tel, stdout)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return ctx.Err()
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, table(results))
	if o.out != "" {
		if err := writeReport(o.out, results, describe(o)); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		fmt.Fprintf(stdout, "\nreport: %s/report.md (charts: goodput, latency, inflight, amplification, trace .png)\n", o.out)
	}
	if o.calibrate {
		if err := calibrate(o, results[len(results)-1], stdout); err != nil {
			return err
		}
	}
	if o.tune {
		return tuneDemo(ctx, o, tel, results[len(results)-1], stdout)
	}
	return nil
}

func describe(o *options) string {
	return fmt.Sprintf("upstream: %v median latency, x%g from %v for %v, capacity %d\n"+
		"interactive: %.0f/s, deadline %v; batch: %.0f/s, deadline %v; seed %d\n"+
		"shedkit: initial limit %d, %s, attempt timeout %v,\n"+
		"clients' deadlines propagated (Connect-Timeout-Ms) to the gateway and from it to the upstream: %v",
		o.sched.Healthy, o.sched.Factor, o.sched.SlowStart, o.sched.SlowFor, o.capacity,
		o.rates[interactive], o.deadlines[interactive], o.rates[batch], o.deadlines[batch], o.seed,
		o.initialLimit, o.adm.String(), o.attemptTimeout, !o.noPropagation)
}

// startUpstream starts a fresh upstream for one run (the work an
// overloaded run leaves behind must not slow the next one) on 127.0.0.1,
// and returns it, its URL and what closes it.
func startUpstream(ctx context.Context, o *options, tel *telemetry) (*upstream, string, func(), error) {
	up := newUpstream(o.sched, o.capacity, o.seed)
	upTP, err := tel.tracerProvider(ctx, serviceUpstream)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{
		Handler:           otelhttp.NewHandler(up, "upstream", otelhttp.WithTracerProvider(upTP), otelhttp.WithMeterProvider(tel.meters)),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return up, "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// runOnce runs the schedule against one gateway.
func runOnce(ctx context.Context, o *options, mode string, tel *telemetry, stdout io.Writer) (*runResult, error) {
	up, upURL, closeUp, err := startUpstream(ctx, o, tel)
	if err != nil {
		return nil, err
	}
	defer closeUp()

	recording, err := newRecording(o, mode)
	if err != nil {
		return nil, err
	}
	gw, err := startGateway(ctx, gatewayConfig{
		protected:      mode == "protected",
		upstream:       upURL,
		tel:            tel,
		initialLimit:   o.initialLimit,
		latencyCeiling: o.latencyCeiling,
		adm:            o.adm,
		attemptTimeout: o.attemptTimeout,
		propagate:      !o.noPropagation,
		recorder:       recording,
	})
	if err != nil {
		return nil, err
	}
	defer gw.close(context.Background())
	if recording != nil {
		if err := recording.Start(); err != nil {
			return nil, err
		}
		defer stopRecording(recording, o.record, stdout)
	}

	tel.keeper.reset()
	start := time.Now()
	up.reset(start)
	rec := newRecorder(start, o.sched.Duration+10*time.Second)
	lgBase := &http.Transport{MaxIdleConnsPerHost: 1024}
	defer lgBase.CloseIdleConnections()
	lg := &loadgen{base: gw.url, rates: o.rates, deadlines: o.deadlines, rec: rec, client: &http.Client{Transport: lgBase}}
	if mode == "unprotected" {
		lg.naive = 2 // clients retry every failure twice, each with a full timeout
	} else if !o.noPropagation {
		if lg.client, err = deadlineClient(lgBase); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(stdout, "\n== %s run ==\n", mode)
	runCtx, cancel := context.WithTimeout(ctx, o.sched.Duration)
	defer cancel()
	done := make(chan struct{})
	go func() {
		lg.run(runCtx, o.seed)
		close(done)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastAttempts, last := int64(0), gauges{}
	for i := 0; ; i++ {
		select {
		case <-done:
			// Count the attempts of the stragglers into the last second.
			n := min(i, len(rec.secs)-1)
			rec.setGauges(n, gw.gauges(), last, int(up.served.Load()-lastAttempts))
			return &runResult{mode: mode, sched: o.sched, secs: rec.secs[:max(n, int(o.sched.Duration/time.Second))+1],
				logical: lg.logical.Load(), attempt: up.served.Load(),
				answered: gw.answered.Load(), late: gw.late.Load(),
				busy: time.Duration(up.busy.Load()), abandoned: time.Duration(up.abandoned.Load()),
				trace: tel.keeper.pick()}, nil
		case <-tick.C:
			served := up.served.Load()
			now := gw.gauges()
			rec.setGauges(i, now, last, int(served-lastAttempts))
			lastAttempts, last = served, now
			if !o.quiet {
				fmt.Fprintln(stdout, progressLine(mode, i, o.sched, rec.snapshot(i)))
			}
		}
	}
}

// deadlineClient is the protected run's client: it sends each request's
// remaining time in deadlineHeader (retrybudget.Transport, one attempt:
// these clients do not retry, and no breaker, so that the comparison is
// about deadlines, not about failing fast).
func deadlineClient(base http.RoundTripper) (*http.Client, error) {
	rt, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Base: base, Name: "loadgen", MaxAttempts: 1, NoBudget: true,
		Breaker: retrybudget.BreakerConfig{Disabled: true}, DeadlineHeader: deadlineHeader,
	})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt}, nil
}

func progressLine(mode string, i int, sched schedule, s second) string {
	offered := s.offered[interactive] + s.offered[batch]
	limit := "-"
	if s.limit > 0 {
		limit = fmt.Sprint(s.limit)
	}
	shed := 0
	var reasons []string
	for r, n := range s.shedBy {
		if n > 0 {
			shed += n
			reasons = append(reasons, fmt.Sprintf("%s %d", shedReason(r), n))
		}
	}
	by := ""
	if len(reasons) > 0 {
		by = " (" + strings.Join(reasons, ", ") + ")"
	}
	return fmt.Sprintf("%-11s t=%2ds %-9s offered %3d/s  admitted %3d/s  shed %3d/s%s  good %3d/s (int %3d, batch %3d)  p99 int %5s batch %5s  limit %4s  in flight %4d  attempts/req %.2f",
		mode, i+1, sched.phaseAt(time.Duration(i)*time.Second), offered, s.admitted, shed, by,
		s.good[interactive]+s.good[batch], s.good[interactive], s.good[batch],
		ms(s.p99(interactive)), ms(s.p99(batch)), limit, s.inflight, ratio(s.attempts, offered))
}

// shedReason shortens a rejection reason for the progress line.
func shedReason(r int) string {
	return strings.TrimSuffix(strings.TrimSuffix(shed.Reason(r).String(), "_exceeded"), "_too_short")
}
