package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/sim"
)

const fitUsageHead = `shedsim fit reads a recording of a service's traffic (package record: the
Recorder of the net/http or Echo middleware or of the gRPC interceptors,
a limiter's Observer, or shedsim -record) and writes a scenario that
reproduces it: the arrival rate of each class over time, its costs, the
upstream's service-time distribution and its capacity.

Usage:
  shedsim fit [flags] RECORDING          a record-NNNNNN.jsonl file, a
                                         recording's directory, or - (stdin)
  shedsim fit -o fitted.yaml ./recording
  shedsim -scenario fitted.yaml          then simulate it

Flags:
`

const fitUsageTail = `
What it infers, and how:
  arrivals      exact per-class counts from the recording's ticks, cut into
                spans of constant rate (binary segmentation on Poisson
                likelihood; a ramp becomes a staircase) -> rate and schedule
  service time  the latencies of successes in unsaturated intervals (mean
                latency within 10% of the least loaded intervals'), fitted
                as constant, exponential or log-normal (from the median and
                the 10%/90% quantiles): the smallest Kolmogorov-Smirnov
                distance wins, the simpler shape within 0.01
  capacity      Little's law in saturated intervals (mean latency at least
                1.5x the baseline: a queue, so every server is busy):
                servers = completions per second x mean service time,
                median over those intervals, with its spread and a
                confidence; without saturation, a lower bound, and it says
                "capacity not observed"
  costs         estimated cost per class (constant, exponential, log-normal
                or uniform), and actual/estimate when the records pair them
  rate limits   per class with at least 20 recorded 429s (rate limited):
                rps = the requests that passed (arrivals, 429s included,
                minus 429s) per second in the intervals with 429s; burst =
                the most that passed in the 5 s before a 429 beyond rps,
                when those records are complete (else the default, rps/10,
                and it says "burst not observed"); per replica, the class's
                traffic as one key
  keys          per class, from the key hashes on the records of arrivals
                (nethttp records a sampled request's rate-limit key hashed;
                the simulator its tenant): count = distinct keys seen, a
                lower bound (the report adds Chao1's estimate of the unseen
                ones); zipf by maximum likelihood on the ranked key counts,
                with its standard error. Sampling keeps every 2^k-th request
                whatever its key, so the shares stay unbiased. A class with
                a fitted rate limit keeps one key (the limit is the class's).
                Keys are counted only from files whose headers hash them as
                the newest keyed records are (the salt in effect now):
                files under another salt (or none) are left out of the
                counts, files that do not say (older) are counted with a
                warning; the notes name them. Where the service took the
                keys from (the headers' keysrc: a trusted header, the
                client address, its Classify) goes into keys.source, for
                shedsim tune's snippet; none when the files disagree
  key cap       per class with at least 10 recorded 429s at a tenant's cap
                (key_concurrency: shedredis.ConcurrencyMiddleware with a
                Recorder): counted among the arrivals, as offered, and the
                cap = the median of the tenants' requests in flight when
                refused, when the class keeps its tenants (keys)
  store         from the recorded calls to the shared store (shedredis
                with Config.Recorder): their shares that timed out, failed
                or met the open breaker; the round trip fitted to the
                answered calls' durations (constant, exponential or
                log-normal), its median and spread taken from the quantiles
                of every call, the timed-out ones counted as slower (so
                that the scenario times out as often); the timeout = the
                median duration of the calls that timed out (else the
                default). With at least 100 answered calls and a fitted
                rate limit (allow calls) or key cap (acquire calls), those
                limits become shared and service.store is written
  classes       matched by name across the files (a redeploy that reorders
                the classes or adds one), ranked as the first file ranks
                them; a class a later file adds goes right below the
                lowest-ranked known class that file lists above it (or
                right above the highest it lists below it; else last); a
                note says when a file ranks known classes otherwise. A
                header naming two classes alike, or files naming more than
                16 between them, are refused
  timeline      the first 16 records start it at their median time (one
                far from it is set aside); then a record dated more than
                10 intervals (at least a minute) after the rest, or a tick
                dated back, is held aside: set aside if a tick comes back
                near the timeline, or the recording ends first; taken if a
                later tick (or 1,024 records) follow it there. A note
                counts what was set aside
The report (stderr) says what was inferred, from how much, how well it
fits, and what was assumed (client deadlines, retries, one replica); the
scenario (stdout or -o) repeats the notes as comments. Exit codes: 0, 1 when
the recording cannot be fitted, 2 bad flags or a malformed recording.
`

// runFit runs "shedsim fit".
func runFit(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shedsim fit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "-", "where to write the scenario YAML ('-': stdout)")
	name := fs.String("name", "", "the scenario's name (default: the recording's file name)")
	interval := fs.Duration("interval", time.Second, "resolution of the fit: rates and saturation are judged per interval")
	steps := fs.Int("max-steps", 20, "most rate changes in a class's schedule")
	quiet := fs.Bool("quiet", false, "no report on stderr")
	discipline := fs.String("discipline", "fifo", "the upstream's model: fifo (servers, a queue in front) or ps (processor sharing: past capacity everything slows down together); a recording cannot tell them apart")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), fitUsageHead)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), fitUsageTail)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "shedsim fit: give one recording (see shedsim fit -h)")
		return ExitUsage
	}
	path := fs.Arg(0)
	opt := sim.FitOptions{Name: *name, Interval: *interval, MaxSteps: *steps}
	switch *discipline {
	case "fifo":
		opt.Discipline = sim.FIFO
	case "ps":
		opt.Discipline = sim.PS
	default:
		fmt.Fprintf(stderr, "shedsim fit: -discipline: want fifo or ps, got %q\n", *discipline)
		return ExitUsage
	}
	if opt.Name == "" {
		opt.Name = scenarioName(path)
	}
	fit, code := fitPath(path, stdin, opt, stderr)
	if fit == nil {
		return code
	}
	if !*quiet {
		sim.WriteFitReport(stderr, fit)
	}
	return writeFitted(fit, path, *out, stdout, stderr)
}

// fitPath reads and fits the recording at path ("-": stdin).
func fitPath(path string, stdin io.Reader, opt sim.FitOptions, stderr io.Writer) (*sim.Fit, int) {
	var rd *record.Reader
	if path == "-" {
		rd = record.NewReader(stdin)
	} else {
		var err error
		if rd, err = record.Open(path); err != nil {
			fmt.Fprintln(stderr, "shedsim fit:", err)
			return nil, ExitUsage
		}
		defer rd.Close()
	}
	fit, err := sim.FitRecording(rd, opt)
	switch {
	case errors.Is(err, record.ErrFormat) || errors.Is(err, sim.ErrInvalidConfig) || errors.Is(err, sim.ErrInvalidRecording):
		fmt.Fprintln(stderr, "shedsim fit:", err)
		return nil, ExitUsage
	case err != nil:
		fmt.Fprintln(stderr, "shedsim fit:", err)
		return nil, ExitFail
	}
	return fit, ExitOK
}

// writeFitted writes the scenario, its notes as comments first.
func writeFitted(fit *sim.Fit, path, out string, stdout, stderr io.Writer) int {
	y, err := sim.MarshalScenario(fit.Scenario)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim fit:", err)
		return ExitFail
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Fitted by shedsim fit from %s.\n", commentText(path))
	for _, n := range fit.Notes {
		fmt.Fprintf(&b, "# Note: %s\n", commentText(n))
	}
	b.Write(y)
	if out == "-" {
		stdout.Write(b.Bytes())
		return ExitOK
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(stderr, "shedsim fit:", err)
		return ExitFail
	}
	return ExitOK
}

// commentText makes note fit on one YAML comment line. A note repeats
// what the recording says (class names, key hashings) and where it is
// (a file name may hold any byte but '/' and NUL), and YAML ends a
// comment at a carriage return as at a newline: whatever followed would
// be read as a field of the scenario. Other control characters (which
// YAML refuses anywhere, so that the file would not read back) and the
// line separators of YAML 1.1 go too.
func commentText(note string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, note)
}

// scenarioName derives a scenario name from a recording's path.
func scenarioName(path string) string {
	base := strings.TrimSuffix(filepath.Base(filepath.Clean(path)), ".jsonl")
	if path == "-" || base == "" || base == "." || base == string(filepath.Separator) {
		return "fitted"
	}
	return "fitted-" + base
}

// recordJob makes the only job of jobs record replica 0's limiter to the
// file path; stop ends the recording and closes the file.
func recordJob(path string, jobs []sim.Job) (stop func() error, err error) {
	f, err := createForOneRun("-record", path, jobs)
	if err != nil {
		return nil, err
	}
	// Every decision, and no size cap: a simulated run is bounded.
	rec, err := record.New(record.Config{Writer: f, MaxRecordsPerSecond: -1, MaxFileBytes: 1 << 50})
	if err != nil {
		f.Close()
		return nil, err
	}
	jobs[0].Policy = sim.RecordPolicy(jobs[0].Policy, rec, 0)
	return func() error {
		err := rec.Stop()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if st := rec.Stats(); err == nil && st.Lost > 0 {
			err = fmt.Errorf("%d records lost", st.Lost)
		}
		return err
	}, nil
}
