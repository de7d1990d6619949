package sim

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
)

// TuneOptions configures [Tune]. Zero fields take the defaults.
type TuneOptions struct {
	// Seed seeds the draw of candidates and the first run; the runs of
	// Seeds > 1 use Seed+1, Seed+2, ... Default 0 (as given).
	Seed uint64
	// Seeds is the number of seeds each candidate runs every variant
	// with; its figures are the means over them. Default 1.
	Seeds int
	// Budget bounds the candidates, the baseline included. Default
	// DefaultTuneBudget.
	Budget int
	// Candidates, when set, replaces the draw of [TuneSpace] (each must
	// have one TuneClass per class of the scenario).
	Candidates []TuneCandidate
	// Space narrows the draw of [TuneSpace] (not Candidates).
	Space TuneSpaceOptions
	// Workers, Context and Progress are passed to [RunBatch].
	Workers  int
	Context  context.Context
	Progress func(done float64)
}

// DefaultTuneBudget is the default number of candidates: with the four
// or five variants, several hundred runs.
const DefaultTuneBudget = 120

// TuneHealthyShare is the do-no-harm constraint: a candidate must keep at
// least this share of the best candidate's goodput on the healthy
// (unstressed) scenario.
const TuneHealthyShare = 0.98

// TuneBaselineSlack is the other half of do no harm: a candidate must
// serve the first class, on the scenario itself, within this share of
// what the baseline (the first candidate: the scenario's own settings)
// serves it. The scenario is what happened (a fitted recording, its
// incident included); the stress variants are what might. A winner that
// buys a better worst case with fewer answers to the users of the day it
// was fitted on is not a recommendation. One point is two of the
// ranking's half-percent steps of noise.
const TuneBaselineSlack = 0.01

// TuneFigures are a candidate's figures on one variant (means over the
// seeds), or its worst case over the variants.
type TuneFigures struct {
	// Goodput is the goodput against the ideal, all classes.
	Goodput float64
	// Interactive is the goodput share (goodput / offered) of the first
	// class, the highest priority; InteractiveP99 its p99 latency in
	// seconds.
	Interactive, InteractiveP99 float64
	// Others is the mean goodput share of the other classes (NaN with
	// one class).
	//
	// In a run where a class's heaviest key surges (the "flood" variant),
	// Interactive and Others count that class's other keys only
	// (class.NAME.other_keys_goodput, over the whole run as every other
	// figure here): the flooding tenant's excess is not demand the
	// service owes an answer, and a quota that refuses it must not rank
	// lower for it.
	Others float64
}

// TuneRanked is a candidate's standing.
type TuneRanked struct {
	Candidate TuneCandidate
	// Variants holds the figures per variant, in the order of
	// TuneResult.Variants; Worst their worst case.
	Variants []TuneFigures
	Worst    TuneFigures
	// Feasible reports whether the candidate meets the do-no-harm
	// constraints (see TuneHealthyShare and TuneBaselineSlack).
	Feasible bool
	// Tenants is what the other tenants get when one floods: the lowest,
	// over the variants and the classes whose heaviest key surges in them,
	// of the other keys' goodput share (means over the seeds); NaN when
	// no key surges. For the class the "flood" variant floods it is the
	// share during the flood (class.NAME.trigger_other_keys_goodput), not
	// over the whole run, which the flood fills a third of: a quota's
	// protection would be diluted there. A surge of the scenario's own
	// counts over the whole run.
	Tenants float64
}

// TuneResult is the outcome of [Tune]: the ranking, best first.
type TuneResult struct {
	// Variants are the names of the variants (of the baseline).
	Variants []string
	// Flooded is the class whose heaviest tenant floods in the "flood"
	// variant (see [StressVariants]); "" without one.
	Flooded string
	Ranked  []TuneRanked
	// BestHealthy is the best healthy goodput of any candidate, the
	// reference of the do-no-harm constraint.
	BestHealthy float64
	// BaselineInteractive is the baseline's (the first candidate's)
	// interactive goodput share on the scenario itself, the reference of
	// TuneBaselineSlack.
	BaselineInteractive float64
}

// Tune searches the configurations of the service's admission control for
// the one that serves sc best under stress. Every candidate (see
// [TuneSpace]) is applied to sc, and the result and its stress variants
// (see [StressVariants]) are run with the candidate's limit; runs go in
// parallel and the result is the same for the same options, whatever the
// number of workers.
//
// The objective compares, over the variants, the worst case rather than
// the mean, because a configuration is chosen for the incident one has
// not seen yet: first the interactive (first) class's goodput share (in
// steps of half a percent, so that noise does not override the next keys),
// then, when a tenant floods (see TuneRanked.Tenants), the other
// tenants' goodput share during the flood (in the same steps), then the
// interactive p99 latency (in steps of 5%), then the other classes'
// goodput share. Without keys the second key is NaN for every
// candidate, and the order is as it was before keys. Fairness comes second rather than within the
// worst case alone: another variant (a slowdown) is often the worst for
// every candidate alike, and would hide what a quota does for the other
// tenants; it comes after the first class's goodput so that a quota that
// costs interactive users their answers elsewhere does not win for it.
// Candidates that break a do-no-harm constraint (TuneHealthyShare,
// TuneBaselineSlack) rank after all others. Ties keep the order of the
// candidates (the baseline first).
func Tune(sc *Scenario, opt TuneOptions) (*TuneResult, error) {
	opt = opt.withDefaults()
	cands := opt.Candidates
	if cands == nil {
		var err error
		if cands, err = TuneSpace(sc, opt.Budget, opt.Seed, opt.Space); err != nil {
			return nil, err
		}
	}
	jobs, names, err := tuneJobs(sc, cands, opt)
	if err != nil {
		return nil, err
	}
	results, err := RunBatch(opt.Context, jobs, opt.Workers, opt.Progress)
	if err != nil {
		return nil, err
	}
	res := &TuneResult{Variants: names}
	for _, r := range results[:len(names)*opt.Seeds] {
		if i := floodedClass(r.Scenario); i >= 0 {
			res.Flooded = r.Scenario.Classes[i].Name
		}
	}
	per := len(names) * opt.Seeds
	for i, c := range cands {
		r := TuneRanked{Candidate: c, Tenants: math.NaN()}
		for v := range names {
			f, tenants := tuneFigures(results[i*per+v*opt.Seeds : i*per+(v+1)*opt.Seeds])
			r.Variants = append(r.Variants, f)
			if !math.IsNaN(tenants) {
				r.Tenants = math.Min(nanHigh(r.Tenants), tenants)
			}
		}
		r.Worst = worstFigures(r.Variants)
		res.BestHealthy = math.Max(res.BestHealthy, r.Variants[0].Goodput)
		res.Ranked = append(res.Ranked, r)
	}
	res.BaselineInteractive = res.Ranked[0].Variants[0].Interactive
	for i := range res.Ranked {
		res.Ranked[i].Feasible = feasible(&res.Ranked[i], res.BestHealthy, res.BaselineInteractive)
	}
	slices.SortStableFunc(res.Ranked, compareTuned)
	return res, nil
}

func (o TuneOptions) withDefaults() TuneOptions {
	if o.Seeds <= 0 {
		o.Seeds = 1
	}
	if o.Budget <= 0 {
		o.Budget = DefaultTuneBudget
	}
	if o.Context == nil {
		o.Context = context.Background()
	}
	return o
}

// tuneJobs returns the runs of every candidate x variant x seed, in that
// order, and the names of the variants.
func tuneJobs(sc *Scenario, cands []TuneCandidate, opt TuneOptions) ([]Job, []string, error) {
	var jobs []Job
	var names []string
	for i := range cands {
		c := &cands[i]
		if len(c.Classes) != len(sc.Classes) {
			return nil, nil, errors.New("sim: tune: a candidate's classes do not match the scenario's")
		}
		p, err := ParsePolicy(c.Policy)
		if err != nil {
			return nil, nil, err
		}
		vars, err := StressVariants(c.Apply(sc))
		if err != nil {
			return nil, nil, err
		}
		for _, v := range vars {
			if i == 0 {
				names = append(names, v.Name)
			}
			for s := range opt.Seeds {
				jobs = append(jobs, Job{Scenario: v, Policy: p, Seed: opt.Seed + uint64(s)})
			}
		}
	}
	return jobs, names, nil
}

// tuneFigures returns the mean figures of one variant's runs, and the
// mean of the lowest other keys' goodput share of a class whose heaviest
// key surges (NaN when none does; during the trigger for the class the
// flood variant floods, see TuneRanked.Tenants).
func tuneFigures(rs []*Result) (TuneFigures, float64) {
	var f TuneFigures
	var tenants float64
	for _, r := range rs {
		s := &r.Summary
		f.Goodput += s.GoodputRatio
		share := make([]float64, len(s.Classes))
		low := math.NaN()
		flooded := floodedClass(r.Scenario)
		for i, c := range s.Classes {
			share[i] = c.GoodputShare
			if k := r.Scenario.Classes[i].Keys; k != nil && k.Surge != nil {
				share[i] = c.OtherKeysGoodputShare
				other := c.OtherKeysGoodputShare
				if i == flooded {
					other = c.TriggerOtherKeysGoodputShare
				}
				low = math.Min(nanHigh(low), other)
			}
		}
		f.Interactive += share[0]
		f.InteractiveP99 += s.Classes[0].P99
		others := math.NaN()
		if len(share) > 1 {
			others = 0
			for _, o := range share[1:] {
				others += o / float64(len(share)-1)
			}
		}
		f.Others += others
		tenants += low
	}
	n := float64(len(rs))
	return TuneFigures{f.Goodput / n, f.Interactive / n, f.InteractiveP99 / n, f.Others / n}, tenants / n
}

// feasible reports whether r does no harm: on the scenario itself (the
// first variant) it keeps TuneHealthyShare of the best goodput
// (bestHealthy), and serves the first class within TuneBaselineSlack of
// the baseline's share (baseline).
func feasible(r *TuneRanked, bestHealthy, baseline float64) bool {
	self := r.Variants[0]
	return self.Goodput >= TuneHealthyShare*bestHealthy && !(self.Interactive < baseline-TuneBaselineSlack)
}

// worstFigures returns the worst of each figure over the variants.
func worstFigures(vs []TuneFigures) TuneFigures {
	w := vs[0]
	for _, v := range vs[1:] {
		w.Goodput = math.Min(w.Goodput, v.Goodput)
		w.Interactive = math.Min(w.Interactive, v.Interactive)
		w.InteractiveP99 = math.Max(w.InteractiveP99, v.InteractiveP99)
		w.Others = math.Min(w.Others, v.Others)
	}
	return w
}

// compareTuned orders candidates by the objective of [Tune].
func compareTuned(a, b TuneRanked) int {
	if a.Feasible != b.Feasible {
		if a.Feasible {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(step(b.Worst.Interactive, 0.005), step(a.Worst.Interactive, 0.005)); c != 0 {
		return c
	}
	if c := cmp.Compare(step(b.Tenants, 0.005), step(a.Tenants, 0.005)); c != 0 {
		return c
	}
	if c := cmp.Compare(logStep(a.Worst.InteractiveP99, 1.05), logStep(b.Worst.InteractiveP99, 1.05)); c != 0 {
		return c
	}
	return cmp.Compare(nanLow(b.Worst.Others), nanLow(a.Worst.Others))
}

// step quantizes v to steps of size q (NaN lowest).
func step(v, q float64) float64 { return math.Floor(nanLow(v) / q) }

// logStep quantizes a positive v to powers of r (NaN highest).
func logStep(v, r float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return math.Floor(math.Log(math.Max(v, 1e-9)) / math.Log(r))
}

// nanHigh is v, or +Inf for NaN: the neutral value of a minimum.
func nanHigh(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

func nanLow(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}
