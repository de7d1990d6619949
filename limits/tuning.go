package limits

// The internal constants of the adaptive limits, in one place: each is a
// share or a count that the configuration does not expose, with the
// reason for its value. The scenario families of sim/ (make sim-family)
// judge them; a rule whose effect stays within the noise there goes.
const (
	// steadyShare: a window whose mean work in flight is within this
	// share of the last window's is steady. Completions of a window in
	// which the work in flight grew or fell by more are a biased sample
	// of the dependency's latency (the fast part of new work, or the slow
	// rest of old work).
	steadyShare = 0.25

	// relearnCut and holdThroughput: once the work in flight fell by
	// relearnCut since a congestion episode began (or the limit reached
	// its floor, or Gradient's last cut lowered it without lowering a
	// congested latency: it removed no queue) and the throughput fell below
	// holdThroughput of the episode's best, admitting less has cut into
	// useful work rather than into a queue: the latency (or drops) are
	// the dependency's. 40% is far beyond the noise of a window's
	// throughput; 85% is where the loss is more than that noise.
	relearnCut     = 0.4
	holdThroughput = 0.85

	// kneeShare: a window of an episode whose throughput is within this
	// share of the episode's best is as good as the best, and the least
	// work in flight among them is the knee. The margin is a window's
	// noise.
	kneeShare = 0.9

	// queueCutKeep: a cut of Gradient's that kept this share of the
	// episode's best throughput removed only queue, and the next cut
	// follows; one that cost more turned away work the dependency would
	// have served, and the knee is relearned. A service whose throughput
	// follows its demand rather than its capacity loses a little to
	// rejections with each cut, never much at once, so the test is as
	// tight as a window's noise allows. AIMD's (aimdQueueCutKeep) is
	// looser: its episodes begin only at a latency twice its baseline,
	// where the queue is long, and ending them sooner left more of it in
	// the incidents than it saved healthy services.
	queueCutKeep     = 0.95
	aimdQueueCutKeep = 0.9

	// learningDrops: while the background is unknown (the first
	// BaselineWindows windows), a drop rate up to it, or not clearly
	// above it, is taken for one.
	// The deadlines that a heavy tail misses on its own stay under it
	// unless the deadline is within a few medians; above it, a service
	// that collapses under its first limit must cut.
	learningDrops = 0.2

	// raisedShare: a baseline that re-learning raised is the faster
	// dependency's again once it falls back within this factor of the
	// baseline before the raise.
	raisedShare = 1.2

	// regrowth multiplies the limit per window while the mean work in
	// flight is at least regrowShare of it and the latency at or below
	// an unraised baseline: the dependency has room (it got back servers
	// it had lost), and growing by the queue allowance would take minutes
	// to find it.
	regrowth    = 1.5
	regrowShare = 0.8

	// errorShare: drops of which at least this share failed no slower
	// than the median success are errors, not timeouts. A timeout lasts until
	// its deadline, which every success beat, so none is that fast;
	// errors that take as long as the work they fail put about half of
	// themselves at or below the median, and errors mixed with as many
	// timeouts still a quarter. A mean-based test (drops within some
	// factor of the successes' mean) took errors for timeouts whenever
	// the deadline had cut the slow tail off the successes only.
	errorShare = 0.25

	// crowdLevel and crowdShare: work admitted with crowdLevel of the
	// limit or more in flight is crowded, and when it succeeds less than
	// crowdShare as often as the rest of the window's work, it mostly
	// waited behind that work past its deadline: the slots at the top of
	// the limit add work that fails, not work that is served, and the
	// limit is cut as for drops. The top quarter is where a limit's
	// queue sits when it binds. At the minimum counts below (crowdMinWork
	// crowded units with crowdMinDrops drops among them, and crowdMinWork
	// others) chance alone fires the test in a few windows in a hundred
	// when a fifth of all work drops, and more often when more does; a
	// binomial test would remove that but miss most real crowding at
	// these counts, and the families showed no harm from it.
	crowdLevel    = 0.75
	crowdShare    = 0.5
	crowdMinWork  = 5
	crowdMinDrops = 3

	// censoredSpan: the first window, whose work in flight grew from
	// nothing, shows a request only if it completed before the window
	// closed. Unless the window lasted this many times its median, the
	// slow part of its latencies is missing, and its median, the
	// baseline's seed, is too fast to read any latency as congestion.
	censoredSpan = 10
)
