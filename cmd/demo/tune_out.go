package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shedkit/shedkit/sim"
)

// printTuned prints the tuner's winner and the hand-picked configuration
// (hand) as the simulator sees them: the worst case over the stress
// variants, the healthy variant's goodput that the do-no-harm
// constraint checks, and the interactive goodput on the recorded run
// itself (the first variant), which the re-run measures. They are
// predictions; the re-run measures.
func printTuned(w io.Writer, res *sim.TuneResult, hand sim.TuneCandidate, took time.Duration) {
	fmt.Fprintf(w, "variants: %s (%v)\n", strings.Join(res.Variants, ", "), took.Round(time.Second))
	line := func(label string, r sim.TuneRanked) {
		fmt.Fprintf(w, "%-11s %s\n%-11s simulated worst case: interactive goodput %.1f%%, p99 %v, batch goodput %.1f%%; healthy goodput %.1f%% (do-no-harm: %v)\n",
			label, r.Candidate.String(), "",
			100*r.Worst.Interactive, time.Duration(r.Worst.InteractiveP99*float64(time.Second)).Round(time.Millisecond),
			100*r.Worst.Others, 100*r.Variants[0].Goodput, r.Feasible)
		fmt.Fprintf(w, "%-11s simulated on the recorded run: interactive goodput %.1f%% over the run, batch %.1f%%\n",
			"", 100*r.Variants[0].Interactive, 100*r.Variants[0].Others)
	}
	line("winner", res.Ranked[0])
	for i, r := range res.Ranked {
		if r.Candidate.String() == hand.String() {
			line("hand-picked", r)
			fmt.Fprintf(w, "%-11s ranked %d of %d\n", "", i+1, len(res.Ranked))
			break
		}
	}
}

// compareTunedRuns prints the hand-picked and the tuned protected runs
// side by side, and the difference in interactive goodput during the
// slowdown, whichever way it goes: one run each, on a shared machine, so
// a few points either way can be noise.
func compareTunedRuns(hand, tuned *runResult, handCfg, tunedCfg string) string {
	h, t := hand.summarize(), tuned.summarize()
	var b strings.Builder
	fmt.Fprintf(&b, "== hand-picked against tuned, measured (one run each, same schedule and seed) ==\n")
	fmt.Fprintf(&b, "hand-picked: %s\ntuned:       %s\n", handCfg, tunedCfg)
	fmt.Fprintf(&b, "%-40s | %12s | %12s\n", "", "hand-picked", "tuned")
	row := func(name, a, c string) { fmt.Fprintf(&b, "%-40s | %12s | %12s\n", name, a, c) }
	row("interactive goodput during the slowdown", pct(h.goodputSlow[interactive]), pct(t.goodputSlow[interactive]))
	row("interactive goodput over the run", pct(h.goodput[interactive]), pct(t.goodput[interactive]))
	row("batch goodput during the slowdown", pct(h.goodputSlow[batch]), pct(t.goodputSlow[batch]))
	row("batch goodput over the run", pct(h.goodput[batch]), pct(t.goodput[batch]))
	row("interactive p99, healthy", ms(h.p99Healthy[interactive]), ms(t.p99Healthy[interactive]))
	row("interactive p99, slowdown", ms(h.p99Slow[interactive]), ms(t.p99Slow[interactive]))
	row("attempts per request over the run", fmt.Sprintf("%.2f", h.amplification), fmt.Sprintf("%.2f", t.amplification))
	row("attempts per request, slowdown", fmt.Sprintf("%.2f", h.amplificationSlow), fmt.Sprintf("%.2f", t.amplificationSlow))
	b.WriteString(verdict(h.goodputSlow[interactive], t.goodputSlow[interactive], handCfg == tunedCfg))
	return b.String()
}

// verdict states the tuned run's difference in interactive goodput during
// the slowdown, in points; differences under half a point are "the same".
// When the tuner kept the hand-picked configuration (same), the two runs
// differ by run-to-run noise alone, and the verdict says so rather than
// calling one configuration better than itself.
func verdict(hand, tuned float64, same bool) string {
	d := 100 * (tuned - hand)
	if same {
		return fmt.Sprintf("tuned is the hand-picked configuration: the two runs differ by %+.1f points (%s -> %s), this machine's run-to-run noise\n",
			d, pct(hand), pct(tuned))
	}
	word := "the same as"
	switch {
	case d >= 0.5:
		word = "better than"
	case d <= -0.5:
		word = "worse than"
	}
	return fmt.Sprintf("tuned is %s hand-picked on interactive goodput during the slowdown: %+.1f points (%s -> %s)\n",
		word, d, pct(hand), pct(tuned))
}

// writeSnippet writes the winner as Go source for a service of one's own
// (sim.TuneCandidate.GoSnippet) to dir/tuned_admission.go.txt; the .txt
// keeps it out of builds. Nothing without -out.
func writeSnippet(dir string, c sim.TuneCandidate, sc *sim.Scenario, w io.Writer) error {
	if dir == "" {
		return nil
	}
	src, err := c.GoSnippet(sc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "tuned_admission.go.txt")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "Go source of the winner: %s\n", path)
	return nil
}
