package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shedkit/shedkit/sim"
	"github.com/shedkit/shedkit/sim/chart"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1 // a run failed, or -check found expectations that do not hold
	ExitUsage = 2 // bad flags or scenario files
)

const usageHead = `shedsim simulates shedkit's admission control in virtual time and compares
policies side by side. It runs the real shed.Limiter, limits and retrybudget
against modelled clients, gateway, service replicas and upstream.

Usage:
  shedsim -suite                                  run the built-in suite
  shedsim -scenario slowdown,spike                run built-in scenarios
  shedsim -scenario my.yaml -policies 'static:limit=80;shedkit-gradient'
  shedsim -scenario slowdown -policies shedkit-gradient \
          -sweep 'tolerance=1.2,1.5,2 smoothing=0.2,0.5' \
          -objective 'max:goodput,trigger_p99<=2s'
  shedsim -print slowdown > my.yaml               start a scenario of your own
  shedsim -scenario my.yaml -policies none -record rec.jsonl
                                                  record replica 0's limiter
  shedsim fit -o fitted.yaml rec.jsonl            fit a scenario to a recording
                                                  (shedsim fit -h)
  shedsim tune fitted.yaml                        search the configuration that
                                                  serves it best under stress
                                                  (shedsim tune -h)
  shedsim -family incident -instance 16 -policies shedkit-gradient \
          -trace t.csv                            why the limit moved, window by window
  shedsim -family incident -seed 2 -out after     a family of 200 random scenarios
  shedsim diff before/family-incident.csv after/family-incident.csv
                                                  what a change did to it, per
                                                  policy (shedsim diff -h)

Flags:
`

const usageTail = `
Policies (-policies; separate them with ';', or with ',' when none has
parameters; parameters follow ':' as key=value pairs separated by ','):
%s
Scenarios: a built-in name or a YAML file (anything with a '/' or ending in
.yaml or .yml). Built-in: %s.
The file format is documented in package sim (go doc github.com/shedkit/shedkit/sim);
-print NAME shows a built-in one. Malformed files are reported as
file:line:column: field: problem.

Outputs (under -out, default ./out/sim; -out '' writes nothing):
  table.txt, summary.csv, summary.json    every scenario x policy
  SCENARIO/series.csv, series.json        one row per interval and policy
  SCENARIO/chart.svg, chart.png           limit, in flight, admitted p99 and
                                          goodput over time, one line per policy
  sweep.csv, sweep.txt                    sweep mode: configurations ranked

Table columns: goodput (against the ideal: what the upstream could serve
within the clients' deadlines), trigger (the same during the scenario's
trigger), recovery (from the trigger's end to sustained 90%% of healthy
throughput), p50/p99 (client latency of successful requests), adm p99 (time
admitted requests spent in the service), trig p99 (adm p99 during the
trigger), amp (attempts at the service per logical request), wasted (upstream
time spent on work nobody waited for), rejected (share of attempts), limit
(mean, sum over replicas).

Metrics for -objective and scenario expectations (ratios as fractions,
times in seconds):
  %s

The same -seed, scenario and policies give byte-identical CSV, JSON and tables.
`

type options struct {
	scenario, policies, out, sweep, objective, print string
	family, instances, record, trace, deadlineModel  string
	n                                                int
	suite, quiet, list, check, charts                bool
	seed                                             uint64
	workers                                          int
}

// Main runs the command with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, ok := runSubcommand(ctx, args, stdout, stderr); ok {
		return code
	}
	var o options
	fs := flag.NewFlagSet("shedsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scenario, "scenario", "", "scenarios to run: built-in names or YAML files, separated by ','")
	fs.BoolVar(&o.suite, "suite", false, "run the built-in suite ("+strings.Join(sim.SuiteNames(), ", ")+")")
	fs.StringVar(&o.policies, "policies", "", "policies to compare (default: the scenario's own list, else "+strings.Join(sim.DefaultPolicies(), ",")+")")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every random stream")
	fs.StringVar(&o.out, "out", filepath.Join("out", "sim"), "directory for CSV, JSON and charts ('' for none)")
	fs.StringVar(&o.sweep, "sweep", "", "parameter grid, e.g. 'tolerance=1.2,1.5,2 smoothing=0.2,0.5': runs every combination for each policy and ranks them")
	fs.StringVar(&o.objective, "objective", "max:goodput", "sweep objective: max:METRIC or min:METRIC, then ',METRIC<=VALUE' or '>=' constraints that must hold in every scenario")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress bar or notes on stderr")
	fs.BoolVar(&o.check, "check", false, "check the scenarios' expectations; exit 1 if one fails")
	fs.BoolVar(&o.charts, "charts", true, "write SVG and PNG charts")
	fs.IntVar(&o.workers, "workers", 0, "runs in parallel (default GOMAXPROCS); results do not depend on it")
	fs.BoolVar(&o.list, "list", false, "list the built-in scenarios and the policies")
	fs.StringVar(&o.family, "family", "", "run a family of random scenarios ("+strings.Join(sim.FamilyNames(), ", ")+"): -n instances, or the -instance list")
	fs.IntVar(&o.n, "n", 50, "instances of the -family to run")
	fs.StringVar(&o.deadlineModel, "deadline-model", "wait", deadlineModelUsage)
	fs.StringVar(&o.instances, "instance", "", "with -family: run these instances (e.g. 3,17) as scenarios, with series and charts")
	fs.StringVar(&o.print, "print", "", "print the YAML of a built-in scenario")
	fs.StringVar(&o.record, "record", "", "record the decisions of replica 0's limiter to this file (package record's format, for shedsim fit); one scenario and one policy")
	fs.StringVar(&o.trace, "trace", "", "write every window of replica 0's adaptive limit to this CSV file: its signals, the limit before and after, and the rule that decided; one scenario (or -family with one -instance) and one shedkit policy")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, usageHead)
		fs.PrintDefaults()
		fmt.Fprintf(w, usageTail, policyHelp(), strings.Join(sim.SuiteNames(), ", "), wrap(strings.Join(sim.MetricNames(), ", "), 74, "\n  "))
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "shedsim: unexpected argument %q (see -h)\n", fs.Arg(0))
		return ExitUsage
	}
	switch {
	case o.list:
		fmt.Fprintln(stdout, "Built-in scenarios:")
		for _, n := range sim.SuiteNames() {
			sc, err := sim.Builtin(n)
			if err != nil {
				fmt.Fprintln(stderr, "shedsim:", err)
				return ExitFail
			}
			fmt.Fprintf(stdout, "  %-14s %s\n", n, firstSentence(sc.Description))
		}
		fmt.Fprintln(stdout, "\nPolicies:")
		fmt.Fprint(stdout, policyHelp())
		return ExitOK
	case o.print != "":
		src, err := sim.BuiltinSource(o.print)
		if err != nil {
			fmt.Fprintf(stderr, "shedsim: no built-in scenario %q (built-in: %s)\n", o.print, strings.Join(sim.SuiteNames(), ", "))
			return ExitUsage
		}
		stdout.Write(src)
		return ExitOK
	}
	if o.family != "" {
		return runFamily(ctx, o, stdout, stderr)
	}
	scenarios, err := loadScenarios(o)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitUsage
	}
	if o.sweep != "" {
		return runSweep(ctx, o, scenarios, stdout, stderr)
	}
	return runCompare(ctx, o, scenarios, stdout, stderr)
}

// runSubcommand runs "shedsim fit", "tune" or "diff"; ok is false when
// args name none of them.
func runSubcommand(ctx context.Context, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "fit":
		return runFit(args[1:], os.Stdin, stdout, stderr), true
	case "tune":
		return runTune(ctx, args[1:], stdout, stderr), true
	case "diff":
		return runDiff(args[1:], stdout, stderr), true
	}
	return 0, false
}

// deadlineModelUsage is the help of -deadline-model.
const deadlineModelUsage = "with -family: what each instance's replicas and upstream do at a request's deadline: " +
	"wait (the replica waits for the upstream however late), cancel (it stops waiting: service.cancel_at_deadline) or " +
	"abandon (and the upstream stops the work: upstream.abandon)"

func loadScenarios(o options) ([]*sim.Scenario, error) {
	if m := o.deadlineModel; m != "" && m != "wait" {
		// Scenarios set their own (service.cancel_at_deadline,
		// upstream.abandon): a flag that silently did nothing would mislead.
		// (shedsim tune leaves it empty.)
		return nil, errors.New("-deadline-model needs -family; scenarios set service.cancel_at_deadline and upstream.abandon")
	}
	if o.suite == (o.scenario != "") {
		return nil, errors.New("give either -suite or -scenario (see -h)")
	}
	if o.suite {
		return sim.Suite()
	}
	var out []*sim.Scenario
	for _, s := range strings.Split(o.scenario, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		var sc *sim.Scenario
		var err error
		if strings.ContainsRune(s, '/') || strings.ContainsRune(s, os.PathSeparator) || strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml") {
			sc, err = sim.LoadScenario(s)
		} else {
			sc, err = sim.Builtin(s)
		}
		if err != nil {
			return nil, err
		}
		for _, p := range out {
			if p.Name == sc.Name {
				return nil, fmt.Errorf("two scenarios are named %q", sc.Name)
			}
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, errors.New("-scenario names no scenario")
	}
	return out, nil
}

// splitPolicies splits a -policies value.
func splitPolicies(s string) []string {
	sep := ";"
	if !strings.Contains(s, ";") && !strings.Contains(s, ":") {
		sep = ","
	}
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// policiesFor returns the policy specs to run on sc.
func policiesFor(o options, sc *sim.Scenario) []string {
	switch {
	case o.policies != "":
		return splitPolicies(o.policies)
	case len(sc.Policies) > 0:
		return sc.Policies
	}
	return sim.DefaultPolicies()
}

func runCompare(ctx context.Context, o options, scenarios []*sim.Scenario, stdout, stderr io.Writer) int {
	var jobs []sim.Job
	for _, sc := range scenarios {
		for _, spec := range policiesFor(o, sc) {
			p, err := sim.ParsePolicy(spec)
			if err != nil {
				fmt.Fprintln(stderr, "shedsim:", err)
				return ExitUsage
			}
			jobs = append(jobs, sim.Job{Scenario: sc, Policy: p, Seed: o.seed})
		}
	}
	if o.record == "" {
		return runJobs(ctx, o, jobs, stdout, stderr)
	}
	return withOutput("-record", func() (func() error, error) { return recordJob(o.record, jobs) },
		func() int { return runJobs(ctx, o, jobs, stdout, stderr) }, stderr)
}

// runJobs runs a comparison and writes its table and outputs, and the
// trace that -trace asks for.
func runJobs(ctx context.Context, o options, jobs []sim.Job, stdout, stderr io.Writer) int {
	if o.trace == "" {
		return compare(ctx, o, jobs, stdout, stderr)
	}
	return withOutput("-trace", func() (func() error, error) { return traceJob(o.trace, jobs) },
		func() int { return compare(ctx, o, jobs, stdout, stderr) }, stderr)
}

// withOutput runs run between start and stop of the output that flag asks
// for: a bad start is a usage error, a failed stop fails the command.
func withOutput(flag string, start func() (stop func() error, err error), run func() int, stderr io.Writer) int {
	stop, err := start()
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitUsage
	}
	code := run()
	if err := stop(); err != nil {
		fmt.Fprintf(stderr, "shedsim: %s: %v\n", flag, err)
		return ExitFail
	}
	return code
}

// compare runs a comparison and writes its table and outputs.
func compare(ctx context.Context, o options, jobs []sim.Job, stdout, stderr io.Writer) int {
	start := time.Now()
	bar := newProgress(stderr, o.quiet, len(jobs))
	results, err := sim.RunBatch(ctx, jobs, o.workers, bar.update)
	bar.done()
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitFail
	}
	sums := make([]*sim.Summary, len(results))
	for i, r := range results {
		sums[i] = &r.Summary
	}
	var table bytes.Buffer
	sim.WriteTable(&table, sums)
	stdout.Write(table.Bytes())
	if o.out != "" {
		if err := writeOutputs(o, results, sums, table.Bytes()); err != nil {
			fmt.Fprintln(stderr, "shedsim:", err)
			return ExitFail
		}
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "shedsim: %d runs in %.1fs", len(jobs), time.Since(start).Seconds())
		if o.out != "" {
			fmt.Fprintf(stderr, "; outputs in %s", o.out)
		}
		fmt.Fprintln(stderr)
	}
	if o.check {
		var bad []string
		for _, r := range results {
			bad = append(bad, r.Check()...)
		}
		for _, b := range bad {
			fmt.Fprintln(stderr, "shedsim: expectation failed:", b)
		}
		if len(bad) > 0 {
			return ExitFail
		}
		if !o.quiet {
			fmt.Fprintln(stderr, "shedsim: every expectation holds")
		}
	}
	return ExitOK
}

// writeOutputs writes the files of a comparison under o.out.
func writeOutputs(o options, results []*sim.Result, sums []*sim.Summary, table []byte) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	files := map[string]func(io.Writer) error{
		"table.txt":    func(w io.Writer) error { _, err := w.Write(table); return err },
		"summary.csv":  func(w io.Writer) error { return sim.WriteSummaryCSV(w, sums) },
		"summary.json": func(w io.Writer) error { return sim.WriteSummaryJSON(w, sums) },
	}
	for _, name := range []string{"table.txt", "summary.csv", "summary.json"} {
		if err := writeFile(filepath.Join(o.out, name), files[name]); err != nil {
			return err
		}
	}
	for _, group := range byScenario(results) {
		dir := filepath.Join(o.out, fileName(group[0].Scenario.Name))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "series.csv"), func(w io.Writer) error { return sim.WriteSeriesCSV(w, group) }); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "series.json"), func(w io.Writer) error { return sim.WriteSeriesJSON(w, group) }); err != nil {
			return err
		}
		if o.charts {
			if err := writeFile(filepath.Join(dir, "chart.svg"), func(w io.Writer) error { return chart.WriteSVG(w, group) }); err != nil {
				return err
			}
			if err := writeFile(filepath.Join(dir, "chart.png"), func(w io.Writer) error { return chart.WritePNG(w, group) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// byScenario groups results by scenario name, in order of first
// appearance.
func byScenario(results []*sim.Result) [][]*sim.Result {
	var groups [][]*sim.Result
	for _, r := range results {
		i := slices.IndexFunc(groups, func(g []*sim.Result) bool { return g[0].Scenario.Name == r.Scenario.Name })
		if i < 0 {
			groups = append(groups, nil)
			i = len(groups) - 1
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// fileName makes a scenario name safe as a directory name.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ':' || r == ' ' || r < 32 {
			return '_'
		}
		return r
	}, s)
}

func writeFile(path string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func runSweep(ctx context.Context, o options, scenarios []*sim.Scenario, stdout, stderr io.Writer) int {
	grid, err := sim.ParseGrid(o.sweep)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitUsage
	}
	obj, err := sim.ParseObjective(o.objective)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitUsage
	}
	bases := splitPolicies(o.policies)
	if len(bases) == 0 {
		fmt.Fprintln(stderr, "shedsim: -sweep needs -policies (the policies whose parameters the grid sets)")
		return ExitUsage
	}
	configs, err := grid.Expand(bases)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim: sweep:", err)
		return ExitUsage
	}
	var jobs []sim.Job
	for _, p := range configs {
		for _, sc := range scenarios {
			jobs = append(jobs, sim.Job{Scenario: sc, Policy: p, Seed: o.seed})
		}
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "shedsim: sweep of %d configurations x %d scenarios = %d runs, objective %s\n", len(configs), len(scenarios), len(jobs), obj)
	}
	bar := newProgress(stderr, o.quiet, len(jobs))
	results, err := sim.RunBatch(ctx, jobs, o.workers, bar.update)
	bar.done()
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitFail
	}
	by := make([][]*sim.Result, len(configs))
	for i := range configs {
		by[i] = results[i*len(scenarios) : (i+1)*len(scenarios)]
	}
	ranked := sim.Rank(by, obj)
	var txt, csv bytes.Buffer
	writeRanking(&txt, ranked, obj, scenarios)
	writeRankingCSV(&csv, ranked, obj, scenarios)
	stdout.Write(txt.Bytes())
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			fmt.Fprintln(stderr, "shedsim:", err)
			return ExitFail
		}
		for name, b := range map[string][]byte{"sweep.txt": txt.Bytes(), "sweep.csv": csv.Bytes()} {
			if err := os.WriteFile(filepath.Join(o.out, name), b, 0o644); err != nil {
				fmt.Fprintln(stderr, "shedsim:", err)
				return ExitFail
			}
		}
	}
	return ExitOK
}

func writeRanking(w io.Writer, ranked []sim.Ranked, obj sim.Objective, scenarios []*sim.Scenario) {
	fmt.Fprintf(w, "objective: %s over %d scenario(s)\n", obj, len(scenarios))
	width := len("configuration")
	for _, r := range ranked {
		width = max(width, len(r.Policy))
	}
	fmt.Fprintf(w, "%4s  %-*s  %10s  %s\n", "rank", width, "configuration", "score", "constraints")
	for i, r := range ranked {
		status := "ok"
		if !r.Feasible {
			status = "violated: " + strings.Join(r.Violations, "; ")
		} else if len(obj.Constraints) == 0 {
			status = "-"
		}
		fmt.Fprintf(w, "%4d  %-*s  %10s  %s\n", i+1, width, r.Policy, strconv.FormatFloat(r.Score, 'g', 5, 64), status)
	}
}

func writeRankingCSV(w io.Writer, ranked []sim.Ranked, obj sim.Objective, scenarios []*sim.Scenario) {
	fmt.Fprint(w, "rank,configuration,score,feasible")
	for _, sc := range scenarios {
		fmt.Fprintf(w, ",%s_%s", sc.Name, obj.Metric)
	}
	fmt.Fprintln(w)
	for i, r := range ranked {
		fmt.Fprintf(w, "%d,%q,%s,%t", i+1, r.Policy, fmtNum(r.Score), r.Feasible)
		for _, v := range r.Values {
			fmt.Fprintf(w, ",%s", fmtNum(v))
		}
		fmt.Fprintln(w)
	}
}

func fmtNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

func policyHelp() string {
	var b strings.Builder
	for _, n := range sim.PolicyNames() {
		doc, params, _ := sim.PolicyDoc(n)
		fmt.Fprintf(&b, "  %-17s %s\n", n, doc)
		if len(params) > 0 {
			fmt.Fprintf(&b, "  %-17s parameters: %s\n", "", strings.Join(params, ", "))
		}
	}
	return b.String()
}

func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

func wrap(s string, width int, sep string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), sep)
}

// progress draws a progress bar on stderr: redrawn in place on a
// terminal, one line per 10% otherwise.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	off   bool
	tty   bool
	runs  int
	start time.Time
	last  time.Time
	shown float64
}

func newProgress(w io.Writer, quiet bool, runs int) *progress {
	p := &progress{w: w, off: quiet, runs: runs, start: time.Now(), shown: -1}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(done float64) {
	if p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 200*time.Millisecond && done < 1 {
			return
		}
	} else if math.Floor(done*10) <= math.Floor(p.shown*10) {
		return
	}
	p.last, p.shown = now, done
	el := now.Sub(p.start)
	eta := "?"
	if done > 0.01 {
		eta = (time.Duration(float64(el)/done) - el).Round(time.Second).String()
	}
	const width = 30
	n := int(done * width)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	line := fmt.Sprintf("[%s] %3.0f%%  %d runs  elapsed %s  eta %s", bar, 100*done, p.runs, el.Round(time.Second), eta)
	if p.tty {
		fmt.Fprint(p.w, "\r"+line+"   ")
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if !p.off && p.tty && p.shown >= 0 {
		fmt.Fprintln(p.w)
	}
}
