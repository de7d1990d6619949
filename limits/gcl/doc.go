// Package gcl lets the limits of github.com/platinummonkey/go-concurrency-limits
// (v1.0.0) drive a shed.Limiter: [FromCore] wraps any core.Limit (its
// Gradient2, Vegas, AIMD, Settable, Windowed...) as a shed.LimitSource,
// so that users migrating from that library keep their tuning, and so that
// the simulator can compare its algorithms with package limits under the
// same limiter. [NewGradient2], [NewVegas] and [NewAIMD] build its
// algorithms with their default tuning.
//
// # Tuning
//
// [NewGradient2Tuned], [NewVegasTuned] and [NewAIMDTuned] keep the default
// tuning except the limits given in a [Tuning]: InitialLimit (start warm),
// MinLimit (Gradient2 only: Vegas and AIMD have no floor but 1) and
// MaxLimit (Gradient2 defaults to 200, Vegas to 1000, which is too low
// for a replica that needs thousands in flight). The library's AIMD has
// no maximum, so its MaxLimit is a clamp of what the Source reports; the
// library's own estimate stops at most one increase above it. Zero fields
// keep the defaults, and defaults give way to the values given (a default
// maximum is raised to a given initial limit). Tuning.NoProbe turns off
// Vegas' probe, which draws from math/rand's global source, for
// reproducible runs.
//
// It is a separate package so that importing package limits does not
// pull in the library.
//
// # Mapping
//
// Samples are aggregated by a lock-free limits.Window (by default as the
// library's DefaultLimiter: windows of at least 1 s and 100 samples, and
// the window's fastest latency as rtt) and passed once per window to
// OnSample(startTime, rtt, inFlight, didDrop): startTime is the window's
// start in Unix nanoseconds, rtt the latency in nanoseconds (at least 1),
// inFlight the window's largest in-flight count, didDrop whether the
// window had any drop. Config.PerSample passes every sample instead, for a
// limit that windows samples itself. Limit reads an atomic updated from
// the library's NotifyOnChange and after every OnSample, so admission
// never takes the library's mutex; an estimate read before a change is
// never published over it, even by a goroutine that publishes last.
//
// # Faults of go-concurrency-limits v1.0.0
//
// Observed in its source and demonstrated by faults_test.go:
//
//   - limit.WindowedLimit discards every sample faster than 100 ms (its
//     threshold is 1e8 ns, commented as 100 microseconds), drops included.
//   - limit.WindowedLimit closes a window only on a sample whose in-flight
//     count exceeds the window size (10): at 10 or fewer in flight its
//     delegate never hears anything.
//   - limit.WindowedLimit passes on the drop flag of the sample that closes
//     a window, not whether the window had a drop: drops inside a window
//     are lost.
//   - limiter.DefaultLimiter closes a window only once it holds more than
//     windowSize timed successes: under steady timeouts the limit never
//     moves.
//   - limiter.DefaultLimiter allocates 3 times per acquire + release and
//     serializes both on one limiter-wide mutex: 5 to 8 times the cost of
//     a shed.Limiter with a Gradient in the same benchmark run.
//   - Gradient2 ignores drops: under steady timeouts at a stable latency
//     it climbs to its maximum.
//   - Gradient2's default tuning ramps up by 0.8 per update (20 to 28 in 10
//     windows) and has a floor of 20 in flight.
//   - A zero rtt makes Gradient2's limit NaN, which converts to an
//     arbitrary integer.
//   - Vegas forgets its no-load latency every 15 to 30 x limit samples, at
//     a point drawn from math/rand's global source (so runs are not
//     reproducible), and re-bases on the next sample, congested or not.
//   - AIMD has no maximum and ignores latency.
//   - Vegas' ProbeDisabled is mapped back to the default multiplier (30)
//     by its constructor: the probe cannot be turned off.
//
// The adapter avoids the windowing faults (its own window counts every
// sample, any in-flight count, and any drop in the window), passes an rtt
// of at least 1 ns, and clamps the limit it reads to at least 1. It cannot
// fix the algorithms: wrapped, Gradient2 still ignores drops and Vegas
// still re-bases.
//
// A window of drops only (no timed success) is passed with the last known
// rtt; before any rtt is known it is skipped, because a made-up rtt would
// corrupt Gradient2's and Vegas' averages.
package gcl
