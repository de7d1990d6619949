// Package failsafesim runs failsafe-go's adaptive concurrency limiter
// (github.com/failsafe-go/failsafe-go/adaptivelimiter, v0.9.8) in the
// virtual time of shedkit's simulator, and registers it as the sim policy
// "failsafe-adaptive", so that shedsim compares it with shedkit's limits
// on the same scenarios.
//
// # Why this needs more than failsafe-go's public API
//
// failsafe-go's limiter takes no clock. A permit reads the wall clock when
// it is acquired and again in Record, and the limiter's first window is
// anchored at the wall-clock time of Build. Its API offers no way to hand
// it a latency either: Permit has only Record() and Drop(). Driven through
// its public API from a virtual-time simulation, every latency it saw would
// be the few microseconds of real time the simulator spent between two
// events, not the simulated latency, and the comparison would be
// meaningless.
//
// So [Source] keeps failsafe-go's algorithm untouched and replaces its
// clock: before it calls Record or Drop on a permit, it writes the permit's
// three unexported fields (clock, startTime, currentInflight) by
// reflection, with a clock that returns the virtual release time mapped
// onto a fixed offset after the limiter was built. Everything else in
// failsafe-go (its t-digest p90, moving median and averages, queue
// estimate, correlation checks, max-limit factor, semaphore) runs as
// shipped. The field layout is checked once, against a real permit, and
// [New] returns [ErrUnsupportedVersion] if it is not the one this package
// was written for (v0.9.8), instead of corrupting memory. This is a
// deliberate, pinned hack for benchmarking; do not copy it into production
// code.
//
// # How it is wired into shed
//
// shed.Limiter enforces the limit: [Source.Limit] returns failsafe-go's
// limit. failsafe-go's own semaphore is kept as a mirror of shed's in-flight
// work, because its algorithm reads it ("is the limiter full?"): the
// observer from [Source.Observer] takes a failsafe-go permit for every
// admission, and every release returns one. Since shed admits only below
// the same limit, the mirror never refuses a permit; [Stats] counts it if
// it ever did.
//
// # Outcomes
//
// failsafe-go's executor calls Record for every execution that returned,
// with or without an error, and Drop only for cancelled ones; its limiter
// is latency-driven and has no notion of a failed call. By default
// (DropsRecord) a shed.Dropped release is therefore recorded with its
// latency, as failsafe.With(limiter).Get(fn) would for a call that returned
// an error or timed out inside fn; DropsDrop passes it to Drop instead,
// as for an execution cancelled by an outer Timeout policy. shed.Ignored
// releases are always dropped.
//
// # Determinism
//
// failsafe-go's adaptive limiter (without queueing) uses no randomness and,
// with the clock replaced, no wall-clock time in its decisions: the same
// scenario and seed give the same results, run after run.
//
// # Variants
//
// failsafe-go v0.9.8 has one adaptive algorithm, which is itself the
// Vegas-like one (queue estimate limit x (1 - baseline/recent) compared
// with 3 log10(limit) and 6 log10(limit)). Its queueing and prioritized
// builds change how callers wait, not how the limit adapts; the queueing
// one draws from math/rand/v2's global source and the prioritized one
// runs a background prioritizer, so neither is registered: shed does the
// queueing in the simulator.
package failsafesim
