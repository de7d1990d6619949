package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/shedkit/shedkit/sim"
)

const tuneUsageHead = `shedsim tune searches the configuration of a service's admission control
for the one that serves a scenario (typically the output of shedsim fit)
best under stress, and prints it as Go code and as the scenario's YAML.

Usage:
  shedsim tune [flags] SCENARIO          a YAML file or a built-in name
  shedsim fit -o fitted.yaml ./recording && shedsim tune fitted.yaml

Flags:
`

const tuneUsageTail = `
Variants: each candidate runs on the scenario itself (healthy) and on three
stressed copies, in a window from a third of the duration lasting a third
of it: slowdown (the upstream 5x slower), spike (every open-loop class at
3x its rate) and retry-storm (clients make at least 3 attempts of a third
of their deadline and ignore "do not retry"; a 5x slowdown for half the
window makes attempts time out); and, when an open-loop class is spread
over keys (tenants), flood: the heaviest key of one such class, the one
with the most requests scheduled in the window, sends 8x its share, its
other keys and the other classes as before (one tenant of one class is
the incident a per-key quota is for).

Search space (random draws, the same for a -seed; the first candidate is
the scenario's own settings under shedkit-gradient's defaults): the limit
(shedkit-gradient or shedkit-aimd, tolerance and backoff near their
defaults), per class a protected share (with two classes or more; shares
sum to at most 1), a queue (depth 0, 8, 32, 128; max wait 5% or 20% of
the class's deadline) and a rate limit (429 before admission: none, or
0.5, 1, 1.5 or 2x the class's peak arrival rate or, for a class spread
over keys, a quota per key of 0.5, 1, 2 or 4x its heaviest key's rate at
the peak (at least the mean key's), shared among the replicas, with a
burst of 0.05, 0.1, 0.2 or 1 s of that rate, at least 1), for a class
spread over keys a cap on each key's requests in flight (none, or what
its heaviest key holds in flight by Little's law at 1, 2 or 4x its rate
at the peak, with room for its bursts: the count's 99.9th percentile;
for the fleet with several replicas, as shedredis.Concurrency), and the
retry budget's ratio and floor when a layer of the scenario retries
(-rate-limits=false keeps the scenario's rate limits and caps). Not
expressed by scenarios, so not tuned: the limits' window and bounds,
Retry-After.

Objective: over the variants, the worst case of the first class's
goodput share (steps of 0.5%), then, with a flood, the other tenants'
goodput share during it (class.NAME.trigger_other_keys_goodput of the
flooded class: over the whole run, two thirds without a flood would
dilute what a quota does for them; steps of 0.5%), then the worst case
of the first class's p99 (steps of 5%), then of the other classes'
goodput share. Under the flood the flooded class's goodput share is its
other tenants' (over the whole run): the flooding tenant's excess is not
demand to serve. Do no harm: a candidate whose healthy goodput is below
98% of the best candidate's, or that serves the first class more than a
point worse than the baseline (the scenario's own settings) on the
scenario itself, ranks after all others: the scenario is what happened,
the variants what might.

Output (stdout): the ranking with each variant's figures
(interactive goodput / its p99 / other classes' goodput; with a flood,
the other tenants' goodput during it), the winner as Go
code (with the rate limits as shedhttp.Options.RateLimits, the caps as
a shedredis.ConcurrencyMiddleware to put outside it) and the
scenario's YAML with the winner's settings (or -o FILE).
Exit codes: 0, 1 when a run fails, 2 bad flags or scenario.
`

type tuneOptions struct {
	seeds, budget, top, workers int
	seed                        uint64
	out                         string
	quiet                       bool
	// rateLimits sweeps the classes' per-key limits (rate limits and
	// key concurrency); off, the candidates keep the scenario's own.
	rateLimits bool
}

// runTune runs "shedsim tune".
func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o tuneOptions
	fs := flag.NewFlagSet("shedsim tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.seeds, "seeds", 1, "seeds each candidate runs every variant with (figures are means)")
	fs.IntVar(&o.budget, "budget", sim.DefaultTuneBudget, "candidates to try, the baseline included")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the draw of candidates and of the runs")
	fs.IntVar(&o.top, "top", 10, "candidates shown in the ranking")
	fs.IntVar(&o.workers, "workers", 0, "runs in parallel (default GOMAXPROCS); results do not depend on it")
	fs.StringVar(&o.out, "o", "", "write the tuned scenario YAML to this file instead of stdout")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress bar on stderr")
	fs.BoolVar(&o.rateLimits, "rate-limits", true, "sweep each class's rate limit and per-key cap on requests in flight (false: keep the scenario's own)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tuneUsageHead)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), tuneUsageTail)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() != 1 || o.seeds < 1 || o.budget < 1 || o.top < 1 {
		fmt.Fprintln(stderr, "shedsim tune: give one scenario, and -seeds, -budget and -top >= 1 (see shedsim tune -h)")
		return ExitUsage
	}
	sc, err := loadScenarios(options{scenario: fs.Arg(0)})
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitUsage
	}
	vars, err := sim.StressVariants(sc[0])
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitUsage
	}
	return tune(ctx, o, sc[0], len(vars), stdout, stderr)
}

// tune runs the search on sc, which has nv variants, and prints the
// ranking and the winner.
func tune(ctx context.Context, o tuneOptions, sc *sim.Scenario, nv int, stdout, stderr io.Writer) int {
	cands, err := sim.TuneSpace(sc, o.budget, o.seed, sim.TuneSpaceOptions{KeepRateLimits: !o.rateLimits})
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitUsage
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "shedsim tune: %d candidates x %d variants x %d seed(s) = %d runs\n", len(cands), nv, o.seeds, len(cands)*nv*o.seeds)
	}
	bar := newProgress(stderr, o.quiet, len(cands)*nv*o.seeds)
	res, err := sim.Tune(sc, sim.TuneOptions{Seed: o.seed, Seeds: o.seeds, Candidates: cands,
		Workers: o.workers, Context: ctx, Progress: bar.update})
	bar.done()
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitFail
	}
	flags := ""
	if !o.rateLimits {
		flags = " -rate-limits=false"
	}
	fmt.Fprintf(stdout, "shedsim tune %s -seed %d -seeds %d -budget %d%s\n", sc.Name, o.seed, o.seeds, o.budget, flags)
	writeTuneRanking(stdout, res, o.top)
	writeBaseline(stdout, res, cands[0].String())
	return writeWinner(o, sc, res.Ranked[0].Candidate, stdout, stderr)
}

// writeTuneRanking prints the top candidates with their figures per
// variant and their worst case.
func writeTuneRanking(w io.Writer, res *sim.TuneResult, top int) {
	flood := !math.IsNaN(res.Ranked[0].Tenants)
	if flood {
		fmt.Fprintf(w, "\nobjective: worst case over the variants of interactive goodput, then the other tenants' goodput during the flood,\nthen interactive p99, then the other classes' goodput;\n")
	} else {
		fmt.Fprintf(w, "\nobjective: worst case over the variants of interactive goodput, then its p99, then the other classes' goodput;\n")
	}
	fmt.Fprintf(w, "do no harm: healthy goodput >= %.0f%% of the best candidate's (%.4f), and interactive goodput on the scenario itself\nat most %.0f point below the baseline's (%.4f)\n",
		100*sim.TuneHealthyShare, res.BestHealthy, 100*sim.TuneBaselineSlack, res.BaselineInteractive)
	fmt.Fprintf(w, "figures: interactive goodput / interactive p99 / other classes' goodput\n")
	if flood {
		fmt.Fprintf(w, "fairness: the other tenants' goodput of class %s while its heaviest tenant floods (the stress window alone;\nthe class's goodput under the flood counts them alone, over the whole run)\n", res.Flooded)
	}
	fmt.Fprintf(w, "\n%4s  %-22s", "rank", "worst")
	if flood {
		fmt.Fprintf(w, "  %-8s", "fairness")
	}
	for _, v := range res.Variants {
		fmt.Fprintf(w, "  %-22s", shorten(v, 22))
	}
	fmt.Fprintln(w, "  configuration")
	for i, r := range res.Ranked[:min(top, len(res.Ranked))] {
		mark := ""
		if !r.Feasible {
			mark = " (does harm on the scenario itself)"
		}
		fmt.Fprintf(w, "%4d  %-22s", i+1, tuneCell(r.Worst))
		if flood {
			fmt.Fprintf(w, "  %-8s", fmt.Sprintf("%.1f%%", 100*r.Tenants))
		}
		for _, f := range r.Variants {
			fmt.Fprintf(w, "  %-22s", tuneCell(f))
		}
		fmt.Fprintf(w, "  %s%s\n", r.Candidate.String(), mark)
	}
}

// writeBaseline says where the scenario's own settings (the first
// candidate) rank, so that a small gain over them is seen as such.
func writeBaseline(w io.Writer, res *sim.TuneResult, base string) {
	for i, r := range res.Ranked {
		if r.Candidate.String() == base {
			fmt.Fprintf(w, "\nbaseline (the scenario's own settings, shedkit-gradient defaults): rank %d, worst %s\n", i+1, tuneCell(r.Worst))
			return
		}
	}
}

// tuneCell formats one variant's figures.
func tuneCell(f sim.TuneFigures) string {
	others := "-"
	if !math.IsNaN(f.Others) {
		others = fmt.Sprintf("%.1f%%", 100*f.Others)
	}
	return fmt.Sprintf("%.1f%%/%s/%s", 100*f.Interactive, fmtSeconds(f.InteractiveP99), others)
}

func fmtSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n+1:]
}

// writeWinner prints the winner as Go code and as the scenario's YAML.
func writeWinner(o tuneOptions, sc *sim.Scenario, c sim.TuneCandidate, stdout, stderr io.Writer) int {
	src, err := c.GoSnippet(sc)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitFail
	}
	tuned := c.Apply(sc)
	tuned.Policies = []string{c.Policy}
	y, err := sim.MarshalScenario(tuned)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim tune:", err)
		return ExitFail
	}
	fmt.Fprintf(stdout, "\nrecommended: %s (limit %s)\n\n// Go: paste into your service's package.\n%s", c.String(), c.Policy, src)
	head := fmt.Sprintf("# Tuned by shedsim tune (seed %d): %s\n# Policy: %s\n", o.seed, c.String(), c.Policy)
	if sc.Service.Store != nil && tuned.Service.Store == nil {
		head += "# service.store left out: these settings keep no limit in the store.\n"
	}
	if o.out != "" {
		if err := os.WriteFile(o.out, append([]byte(head), y...), 0o644); err != nil {
			fmt.Fprintln(stderr, "shedsim tune:", err)
			return ExitFail
		}
		fmt.Fprintf(stdout, "\nscenario with these settings written to %s (simulate it with -policies '%s')\n", o.out, c.Policy)
		return ExitOK
	}
	fmt.Fprintf(stdout, "\n# Scenario with these settings (simulate it with -policies '%s'):\n%s%s", c.Policy, head, strings.TrimRight(string(y), "\n")+"\n")
	return ExitOK
}
