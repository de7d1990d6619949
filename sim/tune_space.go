package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TuneCandidate is one configuration [Tune] tries: a limit algorithm with
// its parameters (a policy spec) and the settings a scenario expresses
// for the service's limiter and retry budget. Applied to a scenario it
// gives a modified copy ([TuneCandidate.Apply]).
type TuneCandidate struct {
	// Policy is a spec of shedkit-gradient or shedkit-aimd.
	Policy string
	// Classes holds the limiter settings of each class, in the
	// scenario's order.
	Classes []TuneClass
	// Budget, when set, is the retry budget of every layer that retries
	// in the scenario (clients, gateway, service); nil keeps each
	// layer's own.
	Budget *Budget
}

// TuneClass is a class's setting in the service: its protected share and
// its queue in the limiter (Class.Protected, Queue and MaxWait), and the
// per-key limits in front of it (Class.RateLimit, KeyConcurrency).
type TuneClass struct {
	Protected float64
	Queue     int
	MaxWait   time.Duration
	// RateLimit is the class's rate limit per key (429 before
	// admission): a quota per tenant for a class spread over Keys, the
	// whole class's otherwise; per replica unless Shared. Nil for none.
	RateLimit *RateLimit
	// KeyConcurrency caps each tenant's requests in flight (429 before
	// the rate limit), for a class spread over Keys; for the fleet when
	// Shared. Nil for none.
	KeyConcurrency *KeyConcurrency
}

// Apply returns a copy of sc with the candidate's settings. sc must have
// as many classes as the candidate. The copy keeps sc's store model
// (Service.Store) while one of its limits is kept in the store, and
// drops it otherwise: a candidate without a shared limit makes no store
// call, and a store that no limit calls is not a valid scenario.
func (c *TuneCandidate) Apply(sc *Scenario) *Scenario {
	out := cloneScenario(sc, "", Span{})
	out.Trigger = sc.Trigger
	for i := range out.Classes {
		cl := &out.Classes[i]
		k := c.Classes[i]
		cl.Protected, cl.Queue, cl.MaxWait = k.Protected, k.Queue, k.MaxWait
		if k.Queue == 0 {
			cl.MaxWait = 0
		}
		cl.RateLimit = k.RateLimit.clone() // the candidate's stays its own
		cl.KeyConcurrency = k.KeyConcurrency.clone()
		setBudget(&cl.Retry, c.Budget)
	}
	if out.Gateway != nil {
		setBudget(&out.Gateway.Retry, c.Budget)
	}
	setBudget(&out.Service.Retry, c.Budget)
	if !slices.ContainsFunc(out.Classes, usesStore) {
		out.Service.Store = nil
	}
	return out
}

// setBudget gives a retrying layer a copy of b (when set).
func setBudget(r *Retry, b *Budget) {
	if b != nil && r.MaxAttempts > 1 {
		cp := *b
		r.Budget = &cp
	}
}

// String names the candidate in one line: the policy, then each class's
// protected share, queue (depth/max wait), rate limit (rps/burst) and key
// concurrency (kc=limit, "/fleet" when shared), then the budget.
func (c *TuneCandidate) String() string {
	var b strings.Builder
	b.WriteString(c.Policy)
	for _, k := range c.Classes {
		fmt.Fprintf(&b, " | p=%g", k.Protected)
		if k.Queue > 0 {
			fmt.Fprintf(&b, " q=%d/%v", k.Queue, k.MaxWait)
		}
		if l := k.RateLimit; l != nil {
			fmt.Fprintf(&b, " rl=%g/%d", l.RPS, l.Burst)
		}
		if k := k.KeyConcurrency; k != nil {
			fmt.Fprintf(&b, " kc=%d", k.Limit)
			if k.Shared {
				b.WriteString("/fleet")
			}
		}
	}
	if c.Budget != nil {
		fmt.Fprintf(&b, " | budget %g+%g/s", c.Budget.Ratio, c.Budget.MinPerSecond)
	}
	return b.String()
}

// The values [TuneSpace] draws from. Limit parameters keep near the
// defaults of limits.GradientConfig and limits.AIMDConfig: the defaults
// were chosen on families of scenarios, and a large step away from them
// on one scenario is over-fitting.
var (
	tuneLimits = []string{
		"shedkit-gradient", "shedkit-gradient:tolerance=1.5", "shedkit-gradient:tolerance=2",
		"shedkit-gradient:backoff=0.8", "shedkit-gradient:backoff=0.8,tolerance=1.5",
		"shedkit-aimd", "shedkit-aimd:backoff=0.8", "shedkit-aimd:tolerance=3", "shedkit-aimd:backoff=0.8,tolerance=3",
	}
	tuneShares     = []float64{0, 0.1, 0.25, 0.5, 0.75}
	tuneQueues     = []int{0, 8, 32, 128}
	tuneWaitShares = []float64{0.05, 0.2} // of the class's deadline
	tuneRatios     = []float64{0.05, 0.1, 0.2}
	tuneFloors     = []float64{1, 5, 10}
)

// tuneRateFactors are the rate limits [TuneSpace] draws, as multiples of
// a class's peak arrival rate: from one that refuses half the peak to one
// that only cuts spikes.
var tuneRateFactors = []float64{0.5, 1, 1.5, 2}

// tuneBurstSeconds are the bursts [TuneSpace] draws for a rate limit, in
// seconds of its rate: from a bucket that absorbs little more than the
// jitter of arrivals at its rate, through the default (DefaultBurst,
// 0.1 s), to one that lets a second of a spike pass before the first 429.
var tuneBurstSeconds = []float64{0.05, 0.1, 0.2, 1}

// tuneKeyRateFactors are the per-key rate limits [TuneSpace] draws for a
// class spread over keys, as multiples of its heaviest key's expected
// rate at the class's peak, and never below the mean key's rate at the
// peak (a quota under it holds the typical tenant, and is a class limit
// in disguise). The heaviest key is the anchor because a quota is for
// whoever sends most: at 2x and 4x it leaves every tenant's ordinary
// traffic alone, its Poisson bursts and a 3x spike included at 4x, and
// cuts a flood to a few times what the heaviest tenant ordinarily sends;
// at 1x it holds the heaviest at its ordinary rate, at 0.5x below it,
// which the do-no-harm constraint and the first class's goodput weigh.
// It has as many entries as tuneRateFactors: both are indexed by the same
// draw.
var tuneKeyRateFactors = []float64{0.5, 1, 2, 4}

// tuneKeyConcurrencyFactors are the per-key caps on requests in flight
// [TuneSpace] draws for a class spread over keys, as multiples of the
// heaviest key's rate at the class's peak: the cap at factor f lets that
// key send f times its ordinary rate, its Poisson bursts included (see
// keyCap). A cap is for a tenant whose requests hold the fleet: at 1x it
// holds the heaviest tenant to its ordinary concurrency, at 2x and 4x it
// leaves a spike of its own alone and still stops a flood, or a slowdown
// of its requests, from taking more than a few times its share. Not
// below 1x: a cap under the heaviest tenant's ordinary concurrency
// refuses its requests every second, a cost on the healthy scenario that
// no stress variant pays back.
var tuneKeyConcurrencyFactors = []float64{1, 2, 4}

// TuneSpaceOptions narrows the space [TuneSpace] draws from. The zero
// value sweeps all of it.
type TuneSpaceOptions struct {
	// KeepRateLimits gives every candidate each class's rate limit and
	// key concurrency (the per-key limits) as the scenario sets them (or
	// none) instead of drawing them: for limits that are a promise to
	// callers rather than a setting to tune, and for callers that cannot
	// apply a drawn one (make tune-demo: the demo's gateway has no flag
	// for them).
	KeepRateLimits bool
}

// TuneSpace returns the candidates [Tune] tries on sc: first the baseline
// (the scenario's own settings under shedkit-gradient's defaults), then up
// to budget-1 distinct random draws from the space below, the same for a
// given seed. The space is every limit of tuneLimits; per class, a
// protected share (all zero with one class, where it has no effect; the
// shares' sum at most 1), a queue depth with a max wait of a share
// (tuneWaitShares) of the class's deadline and, unless
// opt.KeepRateLimits, a rate limit with its burst (see drawRateLimit: a
// per-key quota for a class spread over keys) and, for a class spread
// over keys, a cap on each key's requests in flight (see
// drawKeyConcurrency); and a retry budget's ratio and floor when some
// layer of sc retries. Draws stop early when the space is exhausted.
//
// The cap is one more axis of the random draw, not a grid multiplied
// into it: the budget bounds the candidates (and so the runs) whatever
// the space, and a scenario without keys draws exactly the candidates it
// drew before caps existed.
func TuneSpace(sc *Scenario, budget int, seed uint64, opt TuneSpaceOptions) ([]TuneCandidate, error) {
	n, err := sc.normalize()
	if err != nil {
		return nil, err
	}
	base := TuneCandidate{Policy: "shedkit-gradient"}
	for i, cl := range sc.Classes {
		// The normalized rate limit: its burst filled in, as it runs.
		base.Classes = append(base.Classes, TuneClass{cl.Protected, cl.Queue, cl.MaxWait, n.Classes[i].RateLimit.clone(), cl.KeyConcurrency.clone()})
	}
	out := []TuneCandidate{base}
	seen := map[string]bool{base.String(): true}
	rng := rand.New(rand.NewPCG(seed, 0x7475_6e65)) // "tune"
	// Per-key limits have streams of their own, so that turning their
	// sweep off, or a scenario without keys, leaves the draws of
	// everything else as they were.
	rateRng := rand.New(rand.NewPCG(seed, 0x7261_7465)) // "rate"
	concRng := rand.New(rand.NewPCG(seed, 0x636f_6e63)) // "conc"
	retries := scenarioRetries(n)
	hot := make([]float64, len(n.Classes))
	for i := range n.Classes {
		hot[i] = n.Classes[i].Keys.hotShare()
	}
	for tries := 0; len(out) < budget && tries < 50*budget; tries++ {
		c := drawCandidate(rng, n, retries)
		for i := range c.Classes {
			k := &c.Classes[i]
			k.RateLimit, k.KeyConcurrency = n.Classes[i].RateLimit.clone(), n.Classes[i].KeyConcurrency.clone()
			if !opt.KeepRateLimits {
				k.RateLimit = drawRateLimit(rateRng, n, i, hot[i])
				k.KeyConcurrency = drawKeyConcurrency(concRng, n, i, hot[i])
			}
		}
		if k := c.String(); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// drawRateLimit draws the rate limit of class i of the normalized
// scenario n: none half of the time (most classes of most services want
// none, and a uniform draw would leave few candidates without any), else
// a multiple (tuneRateFactors) of the class's peak arrival rate or, for a
// class spread over keys, a per-key quota (see keyRate), shared among the
// replicas since each replica has its own bucket (the whole rate when
// the scenario's limits are Shared: one bucket for the fleet), with a
// burst of tuneBurstSeconds of that rate (at least 1). The rates come
// from the class's schedule, not from a surge of its keys: a quota is
// set for ordinary traffic (see tunePeak). No limit is drawn as none
// when the scenario takes the shared store away. It draws the same
// three numbers for every class, whatever it returns, so that a class's
// draw does not shift the next class's; hot is the class's key 0's share
// of its traffic (Keys.hotShare, computed once per tune).
func drawRateLimit(rng *rand.Rand, n *Scenario, i int, hot float64) *RateLimit {
	none, f := rng.IntN(2) == 0, rng.IntN(len(tuneRateFactors))
	burst := tuneBurstSeconds[rng.IntN(len(tuneBurstSeconds))]
	cl := &n.Classes[i]
	peak, ok := tunePeak(cl)
	if !ok {
		return cl.RateLimit.clone()
	}
	// One store keeps every class's limits: the fleet's if any is shared.
	shared := slices.ContainsFunc(n.Classes, func(c Class) bool { return c.RateLimit != nil && c.RateLimit.Shared })
	perBucket := float64(n.Service.Replicas)
	if shared {
		perBucket = 1
	}
	if (none && !(shared && len(n.Service.StoreOutages) > 0)) || !(peak > 0) {
		return nil // a store with outages keeps a limit to fail
	}
	rate := tuneRateFactors[f] * peak
	if tenanted(cl) {
		rate = keyRate(peak, cl.Keys.Count, hot, tuneKeyRateFactors[f])
	}
	// Three significant digits: a limit to read and paste, not a fit.
	rps, _ := strconv.ParseFloat(strconv.FormatFloat(rate/perBucket, 'g', 3, 64), 64)
	rps = math.Min(math.Max(rps, 1e-3), MaxRateLimitRPS)
	return &RateLimit{RPS: rps, Burst: int(math.Min(math.Max(math.Round(burst*rps), 1), math.MaxInt32)), Shared: shared}
}

// tunePeak returns the peak of class cl's scheduled arrival rate, the
// rate per-key limits are derived from, or false for a closed-loop class,
// which keeps its own limits: its rate follows its latency, so it has no
// peak to scale.
func tunePeak(cl *Class) (float64, bool) {
	if cl.Users > 0 {
		return 0, false
	}
	rf, _ := buildRate(cl.Rate, cl.Schedule, "")
	return rf.max(), true
}

// tenanted reports whether class cl is spread over keys (tenants): then
// its rate limit is a quota per tenant, and a cap on each tenant's
// requests in flight is a setting to tune.
func tenanted(cl *Class) bool { return cl.Keys != nil && cl.Keys.Count > 1 }

// drawKeyConcurrency draws the cap on each key's requests in flight of
// class i of the normalized scenario n, for the classes whose rate limit
// drawRateLimit draws as a per-key quota (open-loop, spread over keys);
// the others keep their own. It is none half of the time, as a rate limit
// is, else the cap (keyCap) of a multiple (tuneKeyConcurrencyFactors) of
// what the heaviest key holds in flight at the peak (keyInFlight): for the
// fleet (Shared, as shedredis.Concurrency keeps it) when the service has
// several replicas, since a tenant's requests spread over them; per
// replica with one, where both are the same. Never none when the store
// has outages and the cap would be shared: the scenario may have no other
// limit for the store to fail. Like drawRateLimit it draws the same two
// numbers for every class, and leaves the scenario's own cap when the
// counts would exceed MaxLeaseCounts.
func drawKeyConcurrency(rng *rand.Rand, n *Scenario, i int, hot float64) *KeyConcurrency {
	none, f := rng.IntN(2) == 0, rng.IntN(len(tuneKeyConcurrencyFactors))
	cl := &n.Classes[i]
	peak, ok := tunePeak(cl)
	if !ok || !tenanted(cl) || cl.keyCount()*(n.Service.Replicas+1) > MaxLeaseCounts {
		return cl.KeyConcurrency.clone()
	}
	shared := n.Service.Replicas > 1
	if (none && !(shared && len(n.Service.StoreOutages) > 0)) || !(peak > 0) {
		return nil
	}
	return &KeyConcurrency{Limit: keyCap(tuneKeyConcurrencyFactors[f] * keyInFlight(n, cl, peak, hot)), Shared: shared}
}

// keyCap is the cap on a key's requests in flight that lets a key
// holding mean requests in flight by Little's law through with its
// bursts: the 99.9th percentile of a Poisson count of that mean (the
// count in flight of Poisson arrivals, whatever their service times), by
// its normal approximation, rounded up, in [1, MaxKeyConcurrency].
// Little's law alone is the mean: a cap there refuses the key's requests
// whenever more than the mean are in flight, a fifth of them at a mean
// of 6.
func keyCap(mean float64) int {
	c := math.Ceil(mean + 3.1*math.Sqrt(mean))
	return int(math.Min(math.Max(c, 1), MaxKeyConcurrency))
}

// keyInFlight is what the heaviest key of class cl of the normalized
// scenario n holds in flight at the class's peak, by Little's law: its
// rate (keyRate at 1x) times the class's latency, the upstream's mean
// service time at the class's mean cost (a median for a distribution
// without a mean), at most the class's deadline, after which its client
// gives up.
func keyInFlight(n *Scenario, cl *Class, peak, hot float64) float64 {
	u := &n.Upstream
	st := u.ServiceTime.MeanValue()
	if math.IsInf(st, 0) || math.IsNaN(st) {
		st = u.ServiceTime.Median
	}
	if u.CostScaling != 0 && u.CostRef > 0 {
		st *= math.Pow(cl.Cost.MeanValue()/u.CostRef, u.CostScaling)
	}
	latency := math.Min(st/float64(time.Second), cl.Timeout.Seconds())
	return keyRate(peak, cl.Keys.Count, hot, 1) * latency
}

// keyRate is the per-key quota of a class of count keys at peak rate
// whose heaviest key sends the share hot: factor times the heaviest
// key's rate, at least the mean key's (see tuneKeyRateFactors).
func keyRate(peak float64, count int, hot, factor float64) float64 {
	return math.Max(factor*hot*peak, peak/float64(count))
}

// drawCandidate draws one candidate for the normalized scenario n.
func drawCandidate(rng *rand.Rand, n *Scenario, retries bool) TuneCandidate {
	c := TuneCandidate{Policy: tuneLimits[rng.IntN(len(tuneLimits))]}
	left := 1.0
	for _, cl := range n.Classes {
		var k TuneClass
		if len(n.Classes) > 1 {
			k.Protected = tuneShares[rng.IntN(len(tuneShares))]
			if k.Protected > left+1e-9 {
				k.Protected = 0
			}
			left -= k.Protected
		}
		if k.Queue = tuneQueues[rng.IntN(len(tuneQueues))]; k.Queue > 0 {
			w := tuneWaitShares[rng.IntN(len(tuneWaitShares))]
			k.MaxWait = max(time.Duration(float64(cl.Timeout)*w).Round(time.Millisecond), time.Millisecond)
		}
		c.Classes = append(c.Classes, k)
	}
	if retries {
		c.Budget = &Budget{Ratio: tuneRatios[rng.IntN(len(tuneRatios))], MinPerSecond: tuneFloors[rng.IntN(len(tuneFloors))]}
	}
	return c
}

// scenarioRetries reports whether a layer of the normalized scenario n
// retries: then a retry budget is a setting to tune.
func scenarioRetries(n *Scenario) bool {
	if n.Service.Retry.MaxAttempts > 1 || (n.Gateway != nil && n.Gateway.Retry.MaxAttempts > 1) {
		return true
	}
	for _, cl := range n.Classes {
		if cl.Retry.MaxAttempts > 1 {
			return true
		}
	}
	return false
}
