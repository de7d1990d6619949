package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shedkit/shedkit/sim"
	"github.com/shedkit/shedkit/sim/chart"
)

// runFamily runs -family: the distribution over -n instances, or the
// -instance list as plain scenarios.
func runFamily(ctx context.Context, o options, stdout, stderr io.Writer) int {
	fam, err := sim.LookupFamily(o.family)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitUsage
	}
	model, err := sim.ParseDeadlineModel(o.deadlineModel)
	if err != nil {
		fmt.Fprintln(stderr, "shedsim: -deadline-model:", err)
		return ExitUsage
	}
	policies := sim.DefaultFamilyPolicies()
	if o.policies != "" {
		policies = splitPolicies(o.policies)
	}
	if o.instances != "" {
		return runInstances(ctx, o, fam, model, policies, stdout, stderr)
	}
	if o.trace != "" {
		fmt.Fprintln(stderr, "shedsim: -trace needs one -instance of the family")
		return ExitUsage
	}
	if o.n < 1 {
		fmt.Fprintln(stderr, "shedsim: -n must be >= 1")
		return ExitUsage
	}
	start := time.Now()
	bar := newProgress(stderr, o.quiet, o.n*len(policies))
	res, err := sim.RunFamily(sim.FamilyRun{Family: fam.Name, Seed: o.seed, N: o.n, Policies: policies,
		DeadlineModel: model, Workers: o.workers, Context: ctx, Progress: bar.update})
	bar.done()
	if err != nil {
		fmt.Fprintln(stderr, "shedsim:", err)
		return ExitFail
	}
	var report bytes.Buffer
	fmt.Fprintf(&report, "shedsim -family %s -n %d -seed %d", fam.Name, o.n, o.seed)
	if model != sim.DeadlineWait {
		fmt.Fprintf(&report, " -deadline-model %s", model)
	}
	fmt.Fprintf(&report, " -policies '%s'\n", strings.Join(policies, ";"))
	sim.WriteFamilyReport(&report, res)
	stdout.Write(report.Bytes())
	if o.out != "" {
		if err := writeFamilyOutputs(o, res, report.Bytes()); err != nil {
			fmt.Fprintln(stderr, "shedsim:", err)
			return ExitFail
		}
	}
	if !o.quiet {
		fmt.Fprintf(stderr, "shedsim: %d runs in %.1fs\n", o.n*len(policies), time.Since(start).Seconds())
	}
	return ExitOK
}

// runInstances runs chosen instances of a family as scenarios, with the
// usual table, series and charts.
func runInstances(ctx context.Context, o options, fam *sim.Family, model sim.DeadlineModel, policies []string, stdout, stderr io.Writer) int {
	var jobs []sim.Job
	for _, f := range strings.Split(o.instances, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 {
			fmt.Fprintf(stderr, "shedsim: -instance: %q is not an instance number\n", f)
			return ExitUsage
		}
		in, err := fam.Draw(o.seed, i)
		if err != nil {
			fmt.Fprintln(stderr, "shedsim:", err)
			return ExitFail
		}
		model.Apply(in.Scenario) // after the draw, as RunFamily does
		fmt.Fprintf(stdout, "%s: %s\n", in.Scenario.Name, in.Traits)
		for _, spec := range policies {
			p, err := sim.InstancePolicy(spec, in.Traits)
			if err != nil {
				fmt.Fprintln(stderr, "shedsim:", err)
				return ExitUsage
			}
			// The seed of a family run's instance i.
			jobs = append(jobs, sim.Job{Scenario: in.Scenario, Policy: p, Seed: o.seed + uint64(i)})
		}
	}
	return runJobs(ctx, o, jobs, stdout, stderr)
}

func writeFamilyOutputs(o options, res *sim.FamilyResult, report []byte) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	base := filepath.Join(o.out, "family-"+res.Family)
	if err := writeFile(base+".txt", func(w io.Writer) error { _, err := w.Write(report); return err }); err != nil {
		return err
	}
	if err := writeFile(base+".csv", func(w io.Writer) error { return sim.WriteFamilyCSV(w, res) }); err != nil {
		return err
	}
	if !o.charts {
		return nil
	}
	if err := writeFile(base+".svg", func(w io.Writer) error { return chart.WriteFamilySVG(w, res) }); err != nil {
		return err
	}
	return writeFile(base+".png", func(w io.Writer) error { return chart.WriteFamilyPNG(w, res) })
}
