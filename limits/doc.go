// Package limits supplies concurrency limits for shed.Limiter: [Gradient],
// an adaptive limit driven by latency and drops; [AIMD], a loss-based
// limit; and [Fixed], a constant an operator can change. All implement
// shed.LimitSource. Sub-package gcl adapts the limits of
// github.com/platinummonkey/go-concurrency-limits.
//
// # Hot path
//
// Limit is one atomic load. Observe adds the sample to a [Window] with a
// few atomic operations: no lock, no allocation. The sample that closes a
// window summarizes it and updates the limit under a mutex, once per
// window. shed reports every drop but only the successes it timed (it
// times a subset at high rates); an untimed success, should a caller report
// one (Sample.Timed false, Sample.Now zero), costs one atomic load. Nothing reads the clock, sleeps or starts a goroutine: windows roll
// on Sample.Now, so the same code runs in virtual time.
//
// # Windows
//
// A window lasts at least MinDuration (1 s) and at least twice its
// fastest latency, and closes at the first sample after that once it holds
// MinSamples (10) samples, or after MaxDuration (10 s) with fewer. Its
// latency statistic is the mean, or a quantile from a log-bucketed
// histogram of atomic counters (16 buckets per power of two: error under
// 3.2%). Every timed success counts, whatever its latency (zero included);
// drops are counted apart and never enter the latency statistics; untimed
// drops count as drops. The go-concurrency-limits WindowedLimit, in
// contrast, discards samples faster than 100 ms.
//
// # Gradient
//
// Gradient compares each window's latency with a learned baseline. Above
// Tolerance x baseline the limit shrinks by Smoothing x (1 - gradient),
// where gradient = Tolerance x baseline / latency, clamped to [0.5, 1].
// Drops beyond DropTolerance, or a latency above the optional
// LatencyCeiling, cut it by Backoff; when several signals fire, the
// strongest cut applies. Without congestion it grows, but only in windows
// whose largest in-flight count reached MinUtilization x limit, and never
// past in-flight / MinUtilization. It keeps the shape of Netflix's
// Gradient2 and fixes the weaknesses its users report:
//
//   - Slow ramp-up. Gradient2 adds queueSize x smoothing = 0.8 per window:
//     20 to 200 takes minutes. Gradient starts in slow start, doubling the
//     limit every window (Growth) until the first congestion signal or the
//     first rise of latency above the baseline's noise band (10%): from 20
//     it passes 500 in 5 windows. After a congestion it grows by Growth
//     again up to 80% of the last limit without congestion (recovery: the
//     congestion shows a window late, so that limit was often already too
//     high), then by QueueAllowance, sqrt(limit) by default, as Envoy;
//     a quarter of that between 80% and 115% of the limit at which the
//     last congestion began, to probe gently near the knee as TCP CUBIC
//     does near its last maximum. A limit that binds while the latency is
//     at or below the healthy baseline (no queue at all: a dependency that
//     got its servers back) grows by half per window.
//   - Creep under steady timeouts. Gradient2 ignores drops and lets its
//     baseline follow the latency it causes, so a stable but bad latency
//     ends at the maximum. Here drops cut the limit, LatencyCeiling gives an
//     absolute target, and latency above the baseline's noise band never
//     drags the baseline up by averaging. When most work fails (more than
//     half of a window dropped) the limit is cut to the floor.
//   - Baseline drift. The baseline falls half-way to the window latency in
//     every window below its band, so it recovers downwards within a few
//     windows. It rises only by re-learning. A congestion episode watches
//     throughput (in flight / latency, by Little's law): above the
//     dependency's knee, admitting less keeps throughput and shortens the
//     queue, so the latency falls and the cuts are right; below it,
//     admitting less only loses throughput. Once the in-flight work fell
//     by 40% and throughput fell below 85% of the episode's best, the
//     latency (or the drop rate) is not ours: the limit holds for
//     RelearnWindows windows, then takes it as the new normal and returns
//     at once to the knee (the least in-flight work that had the best
//     throughput).
//     There is no periodic re-measurement at a pinned low limit (Envoy's
//     minRTT probing), hence no periodic bursts of rejections.
//   - Reacting twice to one congestion. A window's drops surface at the
//     clients' deadline and its latency at completion, so the window after
//     a cut mostly shows work admitted before it: when it is no worse than
//     the window that caused the cut, the limit waits for the cut to show.
//     Once an episode has shown that the queue is ours (the work in
//     flight fell by 30% and the throughput did not), it no longer waits:
//     it cuts toward the in-flight work that Little's law says serves the
//     same throughput at the tolerance, at most halving per window, so
//     that a dependency that lost most of its servers is matched within
//     a few windows.
//   - Growth without use. As Gradient2 and Vegas, the limit does not grow
//     while in-flight work is below half of it.
//   - Mixed costs. Latency counts per unit of shed.Sample.Cost (unless
//     WindowConfig.IgnoreCost), so that a few large requests among small
//     ones (LLM tokens) do not read as congestion.
//
// Drops beyond the tolerance that admitting less does not reduce become a
// background rate too (the dependency times out some work whatever we do);
// only drops clearly above it, given the noise of the window's sample
// count, signal congestion afterwards, and the background recedes as soon
// as drops do.
//
// # AIMD
//
// AIMD sees drops (and, if set, a LatencyThreshold) and nothing else. It
// keeps Netflix's shape (+Increase per window in use, x Backoff per
// congested window) with three changes, each measured on the simulator's
// suite against go-concurrency-limits' AIMD and failsafe-go:
//
//   - Drops within DropTolerance (15% of a window's work) are not
//     congestion: a dependency that slowed ten-fold misses some deadlines
//     however few requests it serves, and Netflix's any-drop rule cut the
//     limit to its minimum for as long as that lasted.
//   - Slow start at the start, and after each run of congested windows back
//     to the limit its first cut left (TCP's slow start threshold), so
//     that a storm of timeouts does not leave the limit at its minimum
//     for minutes afterwards.
//   - Less headroom: it grows only while its in-flight peak reached 75% of
//     it, since the headroom is what a surge puts on the dependency before
//     the first drop, which comes only at a deadline.
//
// The defaults were chosen on the simulator's built-in suite (make sim),
// where Gradient and AIMD beat go-concurrency-limits' Gradient2, Vegas and
// AIMD, and failsafe-go's adaptive limiter, on every scenario; a static limit set exactly at the upstream's capacity
// (which a real service rarely knows) is still better in a sudden
// slowdown or spike.
//
// # Defaults and why
//
// Every zero field of a config takes a default; each is documented on its
// constant: [DefaultInitialLimit] 20 and [DefaultBackoff] 0.9 (Netflix),
// [DefaultMinLimit] 1 (Gradient2's 20 cannot protect a dependency that
// slowed ten-fold), [DefaultMaxLimit] 1,000, [DefaultTolerance] 1.2
// (Envoy; Gradient2's 1.5 queues too much in the simulator's suite), [DefaultSmoothing] 0.5 (Gradient2's 0.2 cuts only 40% in 10
// windows at double latency), [DefaultGrowth] 2 (TCP slow start),
// [DefaultMinUtilization] 0.5 (Gradient2, Vegas; AIMD
// [DefaultAIMDMinUtilization] 0.75), [DefaultRelearnWindows] 1,
// [DefaultBaselineWindows] 20, [DefaultIncrease] 1 (Netflix AIMD),
// [DefaultDropTolerance] 0.15 (AIMD; Gradient's default is 0 and it
// learns a background drop rate instead),
// [DefaultMinWindow] 1 s (Netflix WindowedLimit), [DefaultMinSamples] 20
// (Netflix's 10 leaves too much noise in a window's mean),
// [DefaultMaxWindow] 10 s. Invalid values are constructor
// errors wrapping [ErrInvalidConfig] and naming the field.
//
// # Behaviour in figures
//
// The tests drive each limit with a closed-form model in virtual time: a
// constant arrival rate, in-flight work by Little's law capped by the
// limit. At 10,000 requests per second and 10 ms (100 in flight; Gradient
// settles near 200, twice the work in flight, AIMD at 134):
//
//   - latency 10 ms to 20 ms: Gradient falls to 51% of its healthy limit in
//     5 windows, then (the model's dependency has no knee: admitting less
//     only costs throughput) re-learns 20 ms and grows back; AIMD with a
//     15 ms threshold falls to 34% in 10 windows;
//   - latency back to 10 ms: Gradient stays above 90% of its healthy
//     limit; AIMD is back at its first cut (90%) in 2 windows, then grows
//     by 1 per window;
//   - every request dropped: the limit falls to MinLimit, never climbing,
//     by Backoff every window (AIMD; Gradient from the second such window
//     in a row cuts by a quarter);
//   - +-25% jitter: no cut;
//   - from 20 with a true capacity of 500: Gradient passes 400 in 4
//     windows and stays within [600, 607] (1.2 x 500 is where latency
//     reaches the tolerance) for 500 windows, without creep.
package limits
