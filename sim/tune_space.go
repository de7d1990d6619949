package sim

import (
	"fmt"
	"math/rand/v2"
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

// TuneClass is a class's setting in the service's limiter: its protected
// share and its queue (Class.Protected, Queue and MaxWait).
type TuneClass struct {
	Protected float64
	Queue     int
	MaxWait   time.Duration
}

// Apply returns a copy of sc with the candidate's settings. sc must have
// as many classes as the candidate.
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
		setBudget(&cl.Retry, c.Budget)
	}
	if out.Gateway != nil {
		setBudget(&out.Gateway.Retry, c.Budget)
	}
	setBudget(&out.Service.Retry, c.Budget)
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
// protected share and queue (depth/max wait), then the budget.
func (c *TuneCandidate) String() string {
	var b strings.Builder
	b.WriteString(c.Policy)
	for _, k := range c.Classes {
		fmt.Fprintf(&b, " | p=%g", k.Protected)
		if k.Queue > 0 {
			fmt.Fprintf(&b, " q=%d/%v", k.Queue, k.MaxWait)
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

// TuneSpace returns the candidates [Tune] tries on sc: first the baseline
// (the scenario's own settings under shedkit-gradient's defaults), then up
// to budget-1 distinct random draws from the space below, the same for a
// given seed. The space is every limit of tuneLimits; per class, a
// protected share (all zero with one class, where it has no effect; the
// shares' sum at most 1) and a queue depth with a max wait of 5% or 20%
// of the class's deadline; and a retry budget's ratio and floor when some
// layer of sc retries. Draws stop early when the space is exhausted.
func TuneSpace(sc *Scenario, budget int, seed uint64) ([]TuneCandidate, error) {
	n, err := sc.normalize()
	if err != nil {
		return nil, err
	}
	base := TuneCandidate{Policy: "shedkit-gradient"}
	for _, cl := range sc.Classes {
		base.Classes = append(base.Classes, TuneClass{cl.Protected, cl.Queue, cl.MaxWait})
	}
	out := []TuneCandidate{base}
	seen := map[string]bool{base.String(): true}
	rng := rand.New(rand.NewPCG(seed, 0x7475_6e65)) // "tune"
	retries := scenarioRetries(n)
	for tries := 0; len(out) < budget && tries < 50*budget; tries++ {
		c := drawCandidate(rng, n, retries)
		if k := c.String(); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out, nil
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
