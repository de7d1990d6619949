// Package cli is the shedsim command: it runs scenarios of package sim
// over a list of policies, prints a comparison table and writes CSV and
// JSON series and SVG and PNG charts; in sweep mode it ranks the
// configurations of a parameter grid by an objective; "shedsim fit"
// fits a scenario to a recording (package record), -record writes
// one from a run, "shedsim tune" searches the admission configuration
// that serves a scenario best under stress and prints it as Go code, and
// "shedsim diff" compares two runs of a scenario family. cmd/shedsim
// calls Main; a program that registers more policies
// (sim.RegisterPolicy, for example failsafe-go's adaptive limiter from a
// separate module) calls it too and gets the same command.
//
// Exit codes: 0 success, 1 a run failed or -check found an expectation
// that does not hold, 2 bad flags or scenario files (reported as
// file:line:column: field: problem). Progress goes to stderr (a bar
// redrawn in place on a terminal, a line per 10% otherwise; -quiet turns
// it off); tables go to stdout; files go under -out.
package cli
