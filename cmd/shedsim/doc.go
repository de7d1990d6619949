// Command shedsim simulates shedkit's admission control in virtual time
// and compares policies side by side: a comparison table on stdout, CSV
// and JSON series and SVG and PNG charts under -out, and a sweep mode that
// ranks the configurations of a parameter grid. Run shedsim -h for the
// flags, the policies, the metrics and the output files; the scenario
// format is documented in package sim.
//
// Examples:
//
//	shedsim -suite                          # every built-in scenario x policy
//	shedsim -scenario slowdown -policies 'static:limit=80;shedkit-gradient'
//	shedsim -scenario my.yaml -check        # exit 1 if an expected range fails
//	shedsim -scenario slowdown,spike -policies shedkit-gradient \
//	        -sweep 'tolerance=1.2,1.5,2 smoothing=0.2,0.5' \
//	        -objective 'max:goodput,trigger_p99<=2s'
//	shedsim fit -o fitted.yaml ./recording  # a scenario fitted to recorded traffic
//	shedsim -scenario my.yaml -policies none -record rec.jsonl
//	shedsim tune fitted.yaml                # the configuration to paste
//	shedsim diff before/family-incident.csv after/family-incident.csv
//
// shedsim fit reads a recording (package record: a middleware's Recorder,
// net/http, Echo or gRPC, a limiter's Observer, or -record) and
// writes a scenario with the recorded arrival rates, costs, service time
// and upstream capacity; shedsim fit -h says how each is inferred.
// shedsim tune runs candidate configurations (limit, protected shares,
// queues, rate limits, retry budget) on a scenario and on a slowdown, a spike and a
// retry storm derived from it, and prints the best as Go code and YAML;
// shedsim tune -h gives the search space and the objective.
// shedsim diff compares two runs of a scenario family on the same seed,
// policy by policy: the score, the goodput over the run and the recovery
// after an incident, before and after, and the instances that moved
// (losses before gains, largest first).
//
// The command is package github.com/shedkit/shedkit/sim/cli, so that a
// program registering more policies can offer the same interface.
package main
