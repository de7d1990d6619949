package sim

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// FamilyRun asks for a run of policies over instances of a family.
type FamilyRun struct {
	Family string
	Seed   uint64
	// N instances, 0 to N-1; or, when Only is set, those instances.
	N    int
	Only []int
	// Policies are specs as for ParsePolicy, in which {warm} and {max}
	// stand for the instance's Traits.Warm and Traits.Max: give a peer
	// "initial={warm},max={max}" to compare it converged and with the
	// room the instance needs.
	Policies []string
	// DeadlineModel is applied to every instance once drawn. Default:
	// DeadlineWait, the instances as drawn.
	DeadlineModel DeadlineModel
	// Workers runs instances in parallel (0: GOMAXPROCS).
	Workers  int
	Context  context.Context
	Progress func(done float64)
}

// FamilyResult holds the summaries of a family run: Summaries[i][p] is
// instance i under policy p.
type FamilyResult struct {
	Family        string
	Seed          uint64
	DeadlineModel DeadlineModel
	Instances     []*Instance
	Policies      []string
	Summaries     [][]Summary
}

// defaultFamilyPolicies returns the policies a family run compares when
// none are given: no limit and the oracle (the references), shedkit's
// limits at their defaults, and go-concurrency-limits' started converged
// ({warm}) with the room the instance needs ({max}). The slice is a copy.
func DefaultFamilyPolicies() []string { return slices.Clone(defaultFamilyPolicies) }

var defaultFamilyPolicies = []string{"none", "static", "shedkit-gradient", "shedkit-aimd",
	"gcl-gradient2:initial={warm},min=1,max={max}", "gcl-vegas:initial={warm},max={max}", "gcl-aimd:initial={warm},max={max}"}

// InstancePolicy builds the policy of spec for an instance of traits t:
// {warm} and {max} in spec stand for t.Warm and t.Max.
func InstancePolicy(spec string, t Traits) (Policy, error) {
	s := strings.NewReplacer("{warm}", strconv.Itoa(t.Warm), "{max}", strconv.Itoa(t.Max)).Replace(spec)
	return ParsePolicy(s)
}

// RunFamily runs every policy on every instance. It keeps the summaries
// only, so that hundreds of runs fit in memory. Results do not depend on
// Workers.
func RunFamily(run FamilyRun) (*FamilyResult, error) {
	f, err := LookupFamily(run.Family)
	if err != nil {
		return nil, err
	}
	idx := run.Only
	if idx == nil {
		for i := range run.N {
			idx = append(idx, i)
		}
	}
	if err := run.DeadlineModel.validate(); err != nil {
		return nil, err
	}
	res := &FamilyResult{Family: f.Name, Seed: run.Seed, DeadlineModel: run.DeadlineModel, Policies: run.Policies}
	for _, i := range idx {
		in, err := f.Draw(run.Seed, i)
		if err != nil {
			return nil, err
		}
		run.DeadlineModel.Apply(in.Scenario)
		for _, spec := range run.Policies {
			if _, err := InstancePolicy(spec, in.Traits); err != nil {
				return nil, err
			}
		}
		res.Instances = append(res.Instances, in)
	}
	res.Summaries = make([][]Summary, len(res.Instances))
	for i := range res.Summaries {
		res.Summaries[i] = make([]Summary, len(run.Policies))
	}
	return res, res.run(run)
}

func (res *FamilyResult) run(run FamilyRun) error {
	ctx := run.Context
	if ctx == nil {
		ctx = context.Background()
	}
	workers := run.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	np := len(res.Policies)
	total := len(res.Instances) * np
	var next, done atomic.Int64
	errs := make([]error, total)
	var wg sync.WaitGroup
	for range min(workers, total) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= total || ctx.Err() != nil {
					return
				}
				in := res.Instances[k/np]
				p, err := InstancePolicy(res.Policies[k%np], in.Traits)
				if err == nil {
					var r *Result
					if r, err = Run(in.Scenario, p, Options{Seed: run.Seed + uint64(in.Index), Context: ctx}); err == nil {
						s := r.Summary
						s.Policy = res.Policies[k%np]
						res.Summaries[k/np][k%np] = s
					}
				}
				if err != nil {
					errs[k] = fmt.Errorf("%s: %w", in.Scenario.Name, err)
				}
				if n := done.Add(1); run.Progress != nil {
					run.Progress(float64(n) / float64(total))
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return firstErr(errs)
}
