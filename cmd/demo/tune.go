package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/sim"
)

// Tuning closes the loop on the demo (make tune-demo): the protected run
// with the hand-picked configuration is recorded, fitted into the
// calibration's scenario (processor-sharing upstream, the demo's
// configuration), and sim.Tune searches that scenario and its stress
// variants for a better configuration. The winner is mapped back onto the
// gateway's flags (admission) and the protected run repeated with it, same
// schedule and seed, so that the simulator's recommendation meets the
// measurement: the tuner can be wrong about the real service, and the
// comparison says so when it is.

// handCandidate expresses the demo's configuration as a tune candidate: it
// is the tuner's baseline, so that the search starts from, and is ranked
// against, what the demo actually runs.
func handCandidate(o *options) sim.TuneCandidate {
	a := &o.adm
	c := sim.TuneCandidate{
		Policy: policySpec(a.algo, o.initialLimit, o.latencyCeiling, a.tolerance, a.backoff),
		Budget: &sim.Budget{Ratio: a.budgetRatio, MinPerSecond: a.budgetFloor},
	}
	for _, k := range a.classes {
		tc := sim.TuneClass{Protected: k.protected}
		if k.queue > 0 {
			tc.Queue, tc.MaxWait = k.queue, k.wait
		}
		c.Classes = append(c.Classes, tc)
	}
	return c
}

// policySpec is the sim policy spec of the gateway's limit. The initial
// limit and the ceiling are written only when they differ from the
// limits' defaults, so that the demo's default spec is the tuner's plain
// baseline.
func policySpec(algo string, initial int, ceiling time.Duration, tolerance, backoff float64) string {
	var params []string
	if initial != limits.DefaultInitialLimit {
		params = append(params, "initial="+strconv.Itoa(initial))
	}
	if ceiling > 0 {
		params = append(params, "ceiling="+ceiling.String())
	}
	if tolerance > 0 {
		params = append(params, "tolerance="+strconv.FormatFloat(tolerance, 'g', -1, 64))
	}
	if backoff > 0 {
		params = append(params, "backoff="+strconv.FormatFloat(backoff, 'g', -1, 64))
	}
	spec := "shedkit-" + algo
	if len(params) > 0 {
		spec += ":" + strings.Join(params, ",")
	}
	return spec
}

// tuneCandidates returns what the tuner tries: the hand-picked
// configuration first, then sim.TuneSpace's draws carrying the demo's
// initial limit and ceiling (which the tuner does not sweep). With a
// ceiling, AIMD candidates are left out: the demo cannot run them as
// simulated (AIMD has no ceiling). Rate limits are not swept: the gateway
// has no flag for them, and keeping them out keeps make tune-demo's draws
// (and its minute and a half) as they were.
func tuneCandidates(o *options, sc *sim.Scenario) ([]sim.TuneCandidate, error) {
	space, err := sim.TuneSpace(sc, o.tuneBudget, o.seed, sim.TuneSpaceOptions{KeepRateLimits: true})
	if err != nil {
		return nil, err
	}
	out := []sim.TuneCandidate{handCandidate(o)}
	for _, c := range space[1:] {
		a, err := candidateAdmission(o.adm, c)
		if err != nil {
			return nil, err
		}
		if a.validate(o.latencyCeiling) != nil {
			continue
		}
		c.Policy = policySpec(a.algo, o.initialLimit, o.latencyCeiling, a.tolerance, a.backoff)
		out = append(out, c)
	}
	return out, nil
}

// candidateAdmission maps a tune candidate onto the gateway's admission
// control; base supplies the retry budget when the candidate keeps it
// (Budget nil). Parameters the demo has no flag for are an error rather
// than dropped: a silently dropped parameter would make the re-run test
// another configuration than the one the tuner ranked. initial and ceiling
// are accepted because tuneCandidates sets them from the demo's own flags.
func candidateAdmission(base admission, c sim.TuneCandidate) (admission, error) {
	a := base
	name, params, _ := strings.Cut(c.Policy, ":")
	switch name {
	case "shedkit-gradient":
		a.algo = "gradient"
	case "shedkit-aimd":
		a.algo = "aimd"
	default:
		return a, fmt.Errorf("tune: the demo cannot run policy %q", c.Policy)
	}
	a.tolerance, a.backoff = 0, 0
	for p := range strings.SplitSeq(params, ",") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		var err error
		switch k {
		case "tolerance":
			a.tolerance, err = strconv.ParseFloat(v, 64)
		case "backoff":
			a.backoff, err = strconv.ParseFloat(v, 64)
		case "initial", "ceiling":
		default:
			err = fmt.Errorf("no demo flag for it")
		}
		if err != nil {
			return a, fmt.Errorf("tune: policy %q, parameter %s: %w", c.Policy, k, err)
		}
	}
	if len(c.Classes) != numClasses {
		return a, fmt.Errorf("tune: candidate has %d classes, the demo %d", len(c.Classes), numClasses)
	}
	for i, k := range c.Classes {
		if k.RateLimit != nil {
			return a, fmt.Errorf("tune: class %d: no demo flag for a rate limit", i)
		}
		a.classes[i] = classAdmission{protected: k.Protected}
		if k.Queue > 0 {
			a.classes[i].queue, a.classes[i].wait = k.Queue, k.MaxWait
		}
	}
	if c.Budget != nil {
		a.budgetRatio, a.budgetFloor = c.Budget.Ratio, c.Budget.MinPerSecond
	}
	return a, nil
}

// flags returns the demo flags that select a (all of them, so that the
// line reproduces the configuration whatever the defaults become).
func (a *admission) flags() string {
	in, ba := a.classes[interactive], a.classes[batch]
	return fmt.Sprintf("-limit-algo %s -limit-tolerance %g -limit-backoff %g -interactive-protected %g -interactive-queue %d -queue-wait %v -batch-protected %g -batch-queue %d -batch-queue-wait %v -budget-ratio %g -budget-floor %g",
		a.algo, a.tolerance, a.backoff, in.protected, in.queue, in.wait, ba.protected, ba.queue, ba.wait, a.budgetRatio, a.budgetFloor)
}

// tuneDemo runs the tuner on the recording of hand (the hand-picked
// protected run), re-runs the protected gateway with the winner and
// compares the two runs.
func tuneDemo(ctx context.Context, o *options, tel *telemetry, hand *runResult, stdout io.Writer) error {
	if hand.mode != "protected" {
		return fmt.Errorf("tune: the protected run did not complete")
	}
	_, sc, err := fitDemo(o)
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	cands, err := tuneCandidates(o, sc)
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	fmt.Fprintf(stdout, "\n== tune: %d candidates x stress variants x %d seeds on the fitted scenario (seed %d) ==\n", len(cands), o.tuneSeeds, o.seed)
	start := time.Now()
	res, err := sim.Tune(sc, sim.TuneOptions{Seed: o.seed, Seeds: o.tuneSeeds, Candidates: cands, Context: ctx})
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	best := res.Ranked[0]
	printTuned(stdout, res, cands[0], time.Since(start))
	tuned := *o
	if tuned.adm, err = candidateAdmission(o.adm, best.Candidate); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo flags of the winner: %s\n", tuned.adm.flags())
	if err := writeSnippet(o.out, best.Candidate, sc, stdout); err != nil {
		return err
	}
	if best.Candidate.String() == cands[0].String() {
		fmt.Fprintln(stdout, "the tuner keeps the hand-picked configuration; the re-run repeats it (run-to-run noise)")
	}
	// The tuned run is recorded too, to a directory removed afterwards:
	// recording costs the gateway some time, and both runs should pay it.
	if tuned.record, err = os.MkdirTemp("", "demo-tuned-"); err != nil {
		return err
	}
	defer os.RemoveAll(tuned.record)
	fmt.Fprintf(stdout, "\nre-running the protected gateway with the winner (same schedule, seed %d)\n", o.seed)
	r, err := runOnce(ctx, &tuned, "protected", tel, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, compareTunedRuns(hand, r, o.adm.String(), tuned.adm.String()))
	return nil
}
