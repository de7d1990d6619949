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
	f, err := createForOneRun("-trace", path, jobs)
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

// createForOneRun creates the file at path that flag writes from the one
// run of jobs.
func createForOneRun(flag, path string, jobs []sim.Job) (*os.File, error) {
	if len(jobs) != 1 {
		return nil, fmt.Errorf("%s needs one scenario and one policy, got %d runs", flag, len(jobs))
	}
	return os.Create(path)
}
