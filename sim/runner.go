package sim

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Job is one run of a batch.
type Job struct {
	Scenario *Scenario
	Policy   Policy
	Seed     uint64
}

// RunBatch runs jobs on up to workers goroutines (0 means GOMAXPROCS) and
// returns the results in job order. Runs are independent and
// deterministic, so results do not depend on workers. progress, when set,
// is called (from the workers, possibly concurrently) with the share of
// the batch done, in [0, 1], weighted by the expected number of requests
// of each run. The first error in job order is returned; ctx cancels the
// batch.
func RunBatch(ctx context.Context, jobs []Job, workers int, progress func(done float64)) ([]*Result, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	weights := make([]float64, len(jobs))
	total := 0.0
	for i, j := range jobs {
		weights[i] = jobWeight(j.Scenario)
		total += weights[i]
	}
	var doneBits atomic.Uint64 // float64 bits of the work done
	add := func(w float64) {
		for {
			old := doneBits.Load()
			nv := math.Float64frombits(old) + w
			if doneBits.CompareAndSwap(old, math.Float64bits(nv)) {
				if progress != nil {
					progress(min(nv/total, 1))
				}
				return
			}
		}
	}
	results := make([]*Result, len(jobs))
	errs := make([]error, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				ticks := max(float64(j.Scenario.Duration/max(j.Scenario.Interval, DefaultInterval)), 1)
				per := weights[i] / ticks
				seen := 0.0
				opt := Options{Seed: j.Seed, Context: ctx, OnTick: func() {
					if seen < weights[i] {
						seen += per
						add(per)
					}
				}}
				results[i], errs[i] = Run(j.Scenario, j.Policy, opt)
				if rest := weights[i] - seen; rest > 0 {
					add(rest)
				}
			}
		}()
	}
	wg.Wait()
	return results, firstErr(errs)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// jobWeight estimates the requests of a run.
func jobWeight(sc *Scenario) float64 {
	w := 1.0
	for i := range sc.Classes {
		c := &sc.Classes[i]
		if c.Users > 0 {
			think := c.Think.MeanValue() / 1e9
			if c.Think.IsZero() {
				think = 1
			}
			w += float64(c.Users) * sc.Duration.Seconds() / max(think, 0.01)
			continue
		}
		if f, err := classRate(c); err == nil {
			w += f.integral(0, sc.Duration.Seconds())
		}
	}
	return w
}
