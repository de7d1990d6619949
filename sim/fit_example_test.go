package sim_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/sim"
)

// A simulated service is recorded through its limiter's Observer, and a
// scenario is fitted back from the recording: the round trip of shedsim
// -record and shedsim fit. The upstream has 20 servers and exponential
// service times of mean 50 ms (400 requests/s); traffic doubles past that
// for 10 s. The fit is as close as 15 s of unsaturated traffic allow.
func ExampleFitRecording() {
	truth := &sim.Scenario{
		Name: "truth", Duration: 40 * time.Second,
		Classes:  []sim.Class{{Name: "api", Rate: 250, Schedule: []sim.RateChange{{At: 15 * time.Second, Rate: 800, For: 10 * time.Second}}}},
		Upstream: sim.Upstream{Capacity: 20, ServiceTime: sim.Exp(float64(50 * time.Millisecond))},
	}
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		panic(err)
	}
	p, _ := sim.ParsePolicy("none")
	if _, err := sim.Run(truth, sim.RecordPolicy(p, rec, 0), sim.Options{Seed: 1}); err != nil {
		panic(err)
	}
	if err := rec.Stop(); err != nil {
		panic(err)
	}

	fit, err := sim.FitRecording(record.NewReader(&buf), sim.FitOptions{Name: "fitted"})
	if err != nil {
		panic(err)
	}
	for _, s := range fit.Classes[0].Segments {
		fmt.Printf("from %v: %.0f requests/s\n", s.At, s.Rate)
	}
	st := fit.ServiceTime
	fmt.Printf("service time: %v, mean %v (fit %s)\n", st.Dist.Kind, time.Duration(st.Mean).Round(100*time.Microsecond), st.Quality())
	fmt.Printf("capacity: %.1f servers (confidence %s)\n", fit.Capacity.Servers, fit.Capacity.Confidence)
	// Output:
	// from 0s: 250 requests/s
	// from 15s: 810 requests/s
	// from 25s: 249 requests/s
	// service time: exponential, mean 49.2ms (fit good)
	// capacity: 19.3 servers (confidence high)
}
