package cli

import (
	"fmt"
	"os"

	"github.com/shedkit/shedkit/sim"
)

// traceJob makes the one run of jobs write the windows of replica 0's
// adaptive limit to a CSV file at path; stop flushes and closes it after
// the run.
func traceJob(path string, jobs []sim.Job) (stop func() error, err error) {
	if len(jobs) != 1 {
		return nil, fmt.Errorf("-trace needs one scenario and one policy, got %d runs", len(jobs))
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	tc := sim.NewTraceCSV(f)
	jobs[0].Policy = sim.TracePolicy(jobs[0].Policy, 0, tc.Write)
	return func() error {
		err := tc.Flush()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && tc.Rows() == 0 {
			err = fmt.Errorf("policy %s has no adaptive limit to trace (shedkit-gradient, shedkit-aimd)", jobs[0].Policy.Name())
		}
		return err
	}, nil
}
