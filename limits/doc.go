// Package limits supplies concurrency limits for shed.Limiter: [Gradient],
// an adaptive limit driven by latency and drops; [AIMD], additive increase
// and multiplicative decrease on the same signals; and [Fixed], a constant
// an operator can change. All implement shed.LimitSource. Sub-package gcl
// adapts the limits of github.com/platinummonkey/go-concurrency-limits.
//
// # Hot path
//
// Limit is one atomic load. Observe adds the sample to a [Window] with a
// few atomic operations: no lock, no allocation. The sample that closes a
// window summarizes it and updates the limit under a mutex, once per
// window. shed reports every drop but only the successes it timed (it
// times a subset at high rates); an untimed success (Sample.Timed false,
// Sample.Now zero) costs one atomic load. Nothing reads the clock, sleeps
// or starts a goroutine: windows roll on Sample.Now, so the same code runs
// in virtual time.
//
// # Windows
//
// A window lasts at least MinDuration (1 s), twice its fastest latency and
// twice the median latency of the window before, and closes at the first
// sample after that once it holds MinSamples (10) samples, or after
// MaxDuration (10 s) with fewer. A window shorter than its latencies holds
// the fast completions of recent admissions and the slow ones of earlier
// ones: its statistics follow the admission history, not the dependency.
// It reports the mean latency, the median and a configured quantile from a
// log-bucketed histogram of atomic counters (within 3.2%), the standard
// error of the median (from the spread of the window's own latencies), the
// largest and the mean work in flight, and the drops, counted apart. Every
// latency counts per unit of shed.Sample.Cost unless IgnoreCost.
//
// # What a window says
//
// Both adaptive limits read each window against two things they learn
// about the dependency without congestion, and say congestion only when a
// window clearly departs from them:
//
//   - The baseline latency: an average of the log of the windows' median
//     latency (the median moves with a queue as much as the mean does, and a
//     few very slow requests barely move it). The first 20 windows
//     (BaselineWindows) make a plain mean, whatever they show, so that a
//     fast first window does not set it for good. Until a window is steady
//     (see below), the baseline is only a seed from one whose work in flight
//     grew from nothing, which holds just the fast part of its work: the
//     first steady window without congestion replaces it rather than being
//     averaged with it. The seed is taken even when that window was
//     congested: a first limit far above the capacity of a dependency that
//     thrashes queues every window after it, and a baseline learned from
//     those would take the queue for the dependency's normal. When that
//     first window lasted less than ten times its median, the slow part of
//     its latencies had not completed yet, and until it is replaced no
//     latency reads as congestion, and only one past the threshold as a
//     queue, which holds the limit without ending slow start (a service
//     whose requests take seconds would otherwise be cut at every start, or
//     grow to its demand by tenths). After that it learns from windows
//     without congestion, and only downwards while the limit binds: part
//     of the latency may then be a queue the limit admitted, and a
//     baseline that learned it would creep up with the limit, as Netflix's
//     Gradient2 does. A window clearly
//     faster than the baseline moves it half-way at once: the dependency
//     sped up, or the baseline holds a queue the limit admitted (as it does
//     when the first limit was above a small dependency's capacity). That
//     includes a window in which the limit binds and the work in flight
//     fell: it holds the slow rest of earlier work, so its speed is no
//     accident of the admissions.
//   - The background drop rate: the share of work that is dropped when
//     nothing is congested (the deadlines the slowest requests miss, the
//     dependency's usual errors), learned from windows without congestion.
//
// Latency is congestion when the window's median exceeds the baseline by
// Tolerance and by Significance (3) standard errors of the window's own
// median: a heavy-tailed or small window varies a lot by chance, and a
// fixed tolerance cut such a service's limit window after window while
// nothing was wrong. Drops are congestion when they exceed the background
// by Significance binomial standard deviations of the window's work (plus
// one drop, and DropTolerance): at thousands of samples per window, a few
// tail timeouts in every window are the background, not a signal. Until
// the background is known (the first 20 windows with a latency), drops
// count only when they clearly exceed a fifth of the work (or a set
// DropTolerance), by the same test: at the floor of a slow dependency a
// window holds a handful of units of work, and two slow ones in five are
// no evidence, of congestion or of the background: such a window teaches
// the background nothing. A window whose work in flight changed by more
// than a quarter since the last one must show twice the latency excess,
// and teaches nothing: its completions are a biased sample.
//
// Both limits count drops as congestion only when the limit admitted
// them: the work in flight reached the limit, or the drops are timeouts
// and the latency is up as well or the work in flight used the limit
// (MinUtilization of it). Drops of which a quarter or more failed no
// slower than the last window's median success are errors, not timeouts:
// a timeout lasts until its deadline, which every success beat. Errors
// below the limit are the dependency's failures, and cutting would only
// turn away work it serves (a latency that rose with them cuts on its
// own); so are drops of work far below the limit. A window without a
// success, or whose drops were not timed, has no latency to tell errors
// by: its drops count as timeouts.
//
// Drops are also congestion, whatever their rate, when they crowd at the
// top of the limit: of the work admitted since the window opened, the
// part admitted with three quarters of the limit or more in flight
// succeeded less than half as often as the rest (at least 5 such units
// with 3 drops, and 5 others; errors left out). That work waited behind
// the rest past its deadline, so those slots add work that fails, however
// steady the drop rate and whatever the latency of the successes shows: a
// dependency with a few servers, a heavy tail and a deadline a few
// medians away learns such drops as its background. Timeouts that come
// from the work itself (a heavy tail) fall on crowded work and the rest
// alike. Work admitted before the window opened does not count: a burst's
// successes close in its own window and its timeouts a deadline later,
// in the next one.
//
// # Nothing served: cut below the work in flight, then close
//
// A window that closed on its samples (MinSamples) without a single
// success served nothing in time, so admitting less loses nothing. Both
// limits then cut as for drops, but from the largest work in flight
// rather than from the limit (unless the work in flight is still above
// the limit: those are drops of earlier work, see drain): a handler that
// stops waiting at its deadline releases its permit while the dependency
// may go on with the work, so the work in flight undercounts what the
// dependency holds, and a limit it did not use must still come down. At
// the floor, such a window closes the limit (close): Limit reports 0, and
// shed admits no work but one probe per Window.MinDuration (the next one
// a whole interval after a probe that was dropped), until a success
// reopens the limit at its floor (reopen). Above the floor the cut keeps
// the congestion episode going; closing ends it. A floor of one admits work back to back,
// each timeout freeing its slot for the next; if a thrashing dependency
// completes work more slowly than that, its backlog of work nobody waits
// for never drains, and only a pause lets it. The price is the interval:
// a dependency that recovers is seen at the next probe, and a caller
// that waits for its work (the permit held until the dependency answers,
// however late) never needed the pause.
//
// # Gradient
//
// Each closed window leads to one decision, with a [Reason] that
// GradientState reports (and GradientConfig.Trace receives with the
// window's signals, as a [WindowTrace]):
//
//   - slow-start: no congestion yet: the limit doubles (Growth) per
//     window while the work in flight uses it.
//   - grow: no congestion: the limit grows by QueueAllowance (sqrt, as
//     Envoy, but at most a tenth of the limit and at least one: replicas
//     sharing a dependency must not overshoot it together) while the work
//     in flight reached MinUtilization (half) of it, and never past that
//     work / MinUtilization: a limit that is not used has learned nothing
//     about capacity.
//   - unused, idle: the limit holds: too little work in flight to use it,
//     or too few samples to judge. After BaselineWindows unused windows
//     in a row, it falls to the largest work in flight they saw divided
//     by MinUtilization, twice it by default (TCP's congestion window
//     validation, RFC 7661): headroom that no window tested protects
//     nothing, and when the dependency slows, all of it fills with a
//     queue at once.
//   - queue: the latency is above the baseline by more than the square
//     root of the threshold (its noise), by less than congestion: a queue
//     may be forming, so the limit holds and slow start ends (unless the
//     baseline is still a censored seed, see above). AIMD holds too.
//   - regrow: the limit binds while the latency is at or below the
//     baseline: no queue at all, the dependency got back servers it had
//     lost, and the limit grows by half. Not on a baseline that
//     re-learning raised, where the limit already sits at the knee.
//   - cut-latency: the latency is clearly above the baseline: the limit
//     shrinks by Smoothing x (1 - threshold / ratio), at most a quarter.
//   - cut-drops: drops beyond the background: the limit shrinks in
//     proportion to the excess share (the dependency served the rest in
//     time), by Backoff at least and by half at most.
//   - cut-crowd: drops that crowd at the top of the limit (see above),
//     within the background: the limit shrinks by Backoff, as for drops.
//   - creep: growth by the allowance that would come within an
//     allowance of the limit at which drops last cut it grows by one unit
//     per window there instead, as CUBIC's plateau near its last maximum.
//     When the successes take nearly as long as the deadline, the work
//     that waits past the knee misses it and their latency hardly moves:
//     only drops show the knee, from above, and a whole allowance would
//     overshoot it again at once. Regrowth is left alone (the dependency
//     got faster, which moved the knee), and the cliff is forgotten after
//     BaselineWindows windows that no congestion cut.
//   - cut-ceiling: a latency above LatencyCeiling: the limit shrinks by
//     Backoff, whatever the episode shows.
//   - drain: drops beyond the background while the work in flight is
//     still above the limit (once the background is learned): nothing new
//     was admitted, so they are drops of work admitted under an earlier
//     limit, which the cut that lowered it already answered, and the
//     limit holds. A heavy tail can take many windows to drain, and
//     cutting on each would take the limit far below the knee. Latency
//     still cuts: old work measures the dependency's speed as well as new.
//
// A congestion starts an episode, which lasts while windows are congested
// or the limit binds: its cuts are an experiment on the dependency, read
// by Little's law (throughput = work in flight / latency). Above the
// dependency's knee, admitting less keeps the throughput and shortens the
// queue; below it, admitting less only loses throughput.
//
//   - cut-queue: the latency is back within the threshold, but the last
//     cut cost no throughput (no more than a window's noise below the
//     episode's best): the rest is queue too (even if the baseline was
//     learned with it in), and the limit goes on shrinking by Backoff.
//     So does a cut that raised the throughput: the queue was costing the
//     dependency work. (A dependency that sped up just then looks the
//     same; it costs a few windows before growth resumes from the knee.)
//     When a cut then costs throughput the knee was passed: relearn. A
//     service whose throughput follows its demand, not its capacity, loses
//     a little to rejections with each cut, never much at once, so a loose
//     test would let every episode cut into its traffic.
//     At the floor the episode ends instead: a cut there removes nothing,
//     and a throughput above the episode's best is the dependency's
//     recovery, which only growth can use.
//   - hold, relearn: once the work in flight fell by 40% in the episode,
//     or a cut lowered it while the latency stayed congested and no lower
//     than its noise allows (it removed no queue; Gradient only), and the
//     throughput fell below 85% of its best while the latency (or the drop
//     rate) stayed, they are the dependency's, not ours: the
//     limit holds RelearnWindows window, then takes them as the new
//     baseline and background and returns at once to the knee (the least
//     work in flight that had the episode's best throughput), whatever
//     the drop rate: errors that admitting less does not reduce are not
//     overload, and cutting on them only loses goodput. A window with too
//     few successes for a latency served next to nothing: its throughput
//     counts as none, so that errors of nearly all the work still end in
//     a hold rather than at the floor, once a window of the episode after
//     its first has measured a throughput (the first mixes old and new
//     work, and is no reference); when none has, the cuts go on to the
//     floor. A limit at its floor with its
//     latency back within the threshold holds on the drops that go on (a
//     retry storm's late attempts) whatever the throughput, since it
//     cannot cut them. This is how a ten-fold slowdown is
//     told from a queue without periodic bursts of rejections at a pinned
//     limit (Envoy's minRTT probing). A baseline re-learned upwards is a
//     raise: the faster one comes back as soon as the latency does, and
//     regrow waits for it. Only a baseline that is still the start-up's
//     guess (a seed, or fewer than a quarter of BaselineWindows steady
//     windows) is corrected instead: a slowdown in a service's first
//     minute is the dependency's too.
//
// # AIMD
//
// AIMD reads windows the same way and moves the limit as Netflix's AIMD:
// +Increase per window in use without congestion, x Backoff per congested
// window; drops cut in proportion to their excess share, and drain holds,
// as for Gradient. By default it sees latency (LatencyTolerance, 2, times its
// learned baseline) as well as drops, and, as Gradient, takes a latency or
// drop rate that cutting does not reduce as the dependency's new normal
// instead of cutting to the minimum, and goes on cutting while its cuts
// cost no throughput (cut-queue: the rest is queue; with a looser test than
// Gradient's, since its episodes begin on a queue as long as the work). It
// slow-starts at the start and, as Gradient's regrow, while the work in
// flight fills the limit with the latency at its baseline; with
// LatencyThreshold set, which leaves no baseline to recognise a recovered
// dependency by, also after a run of congested windows, back to the limit
// the run's first cut left (TCP's slow start threshold). Its tolerance lets
// a queue double the latency before it cuts, so a window with the latency
// above the square root of that tolerance holds the limit instead of
// growing it (queue, as for Gradient, but slow start goes on): growing by
// Increase until the latency doubles builds that much queue first, and
// replicas that share a dependency build it together. Such a window in
// which the limit binds teaches the baseline nothing, not even while
// learning: the queue would become the next normal. The price: from one
// replica, a dependency that got 1.41 to 2 times slower with room to spare
// looks the same, and the limit holds where it was for as long as that
// lasts, whatever the demand (Gradient, whose tolerance is lower, cuts
// there and re-learns the latency once the cuts cost throughput). As
// Gradient's, a limit left unused for BaselineWindows windows in a row
// falls to what their largest work in flight uses to MinUtilization. Drops
// within DropTolerance ([DefaultDropTolerance]) never count as beyond the
// background; drops that crowd at the top of the limit still cut
// (cut-crowd). A fixed LatencyThreshold replaces the learned baseline with
// a latency objective; a negative one turns the latency signal off, leaving
// drops as the only one.
//
// # Defaults and why
//
// Every zero field of a config takes a default; each is documented on its
// constant: [DefaultInitialLimit] 20 and [DefaultBackoff] 0.9 (Netflix),
// [DefaultMinLimit] 1 (a floor of 20 cannot protect a dependency that
// slowed ten-fold at 10 requests in flight), [DefaultMaxLimit] 10,000 (a
// guard against runaway: a limit only grows while it is used),
// [DefaultTolerance] 1.2 (Envoy), [DefaultSignificance] 3 (a control
// chart), [DefaultSmoothing] 0.5, [DefaultGrowth] 2 (TCP slow start),
// [DefaultMinUtilization] 0.5 (Gradient2, Vegas; AIMD
// [DefaultAIMDMinUtilization] 0.75), [DefaultRelearnWindows] 1,
// [DefaultBaselineWindows] 20, [DefaultIncrease] 1 (Netflix AIMD),
// [DefaultDropTolerance] 0.15 (AIMD), [DefaultAIMDLatencyTolerance] 2,
// [DefaultMinWindow] 1 s (Netflix WindowedLimit), [DefaultMinSamples] 10,
// [DefaultMaxWindow] 10 s. Invalid values are constructor errors wrapping
// [ErrInvalidConfig] and naming the field.
//
// The defaults are judged in simulation on randomized families of
// services and incidents, not on a fixed suite: shedsim -family healthy
// and -family incident (make sim-family) write the distributions, against
// no limit, a static limit at the dependency's capacity and the peers,
// under out/sim-family.
package limits
