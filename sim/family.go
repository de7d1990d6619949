package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// A Family draws random scenarios from ranges: service-time shapes from
// constant to heavy-tailed, one to thousands of servers, one to a hundred
// replicas, light to heavy load, deadlines from 3 to 100 times the median,
// warm-ups from 10 s to 5 minutes and, in the incident family, every kind
// of incident. A default tuned on a fixed suite fits that suite; judged on
// many instances of a family, it has to fit services.
//
// Instance i of a family with seed s is the same whatever the number of
// instances drawn, so that a run of n instances extends a run of fewer.
type Family struct {
	Name        string
	Description string
	incident    bool
}

var families = []Family{
	{Name: "healthy", Description: "nothing goes wrong: a limit must admit what the service can serve"},
	{Name: "incident", Description: "one incident after the warm-up: slowdowns, ramps, capacity loss, errors, spikes, retry storms, oscillating load, closed-loop users, batch floods", incident: true},
}

// FamilyNames returns the names of the families.
func FamilyNames() []string {
	out := make([]string, len(families))
	for i, f := range families {
		out[i] = f.Name
	}
	return out
}

// LookupFamily returns the family of the given name.
func LookupFamily(name string) (*Family, error) {
	for i := range families {
		if families[i].Name == name {
			return &families[i], nil
		}
	}
	return nil, fmt.Errorf("no family %q (known: %s)", name, strings.Join(FamilyNames(), ", "))
}

// Instance is one scenario drawn from a family, with the traits it was
// drawn from.
type Instance struct {
	Family   string
	Seed     uint64
	Index    int
	Scenario *Scenario
	Traits   Traits
}

// Traits describe an instance in a few numbers, for tables and for
// telling which kinds of service a policy fails.
type Traits struct {
	Shape    string        // service-time shape, e.g. "lognormal(1.5)"
	Median   time.Duration // median service time
	Servers  int           // upstream servers in all
	Replicas int
	Shared   bool    // one upstream shared by the replicas
	Load     float64 // healthy offered work / capacity
	Deadline float64 // client deadline / median service time
	Rate     float64 // healthy logical requests per second, all replicas
	Warmup   time.Duration
	Incident string // "" in the healthy family
	Kind     string // the incident's kind ("slowdown", "errors", ...)
	// Warm is an estimate of the in-flight work per replica under the
	// healthy load, with room for bursts: the initial limit that makes a
	// peer start converged ({warm} in a policy spec). Max is a maximum
	// limit per replica that leaves every policy the room the instance
	// may need ({max}).
	Warm, Max int
}

// String describes the traits on one line.
func (t Traits) String() string {
	up := "own"
	if t.Shared {
		up = "shared"
	}
	s := fmt.Sprintf("%s median %v, %d servers, %d replicas (%s), load %.0f%%, deadline %.0fx, %.0f req/s, warm-up %v",
		t.Shape, t.Median, t.Servers, t.Replicas, up, 100*t.Load, t.Deadline, t.Rate, t.Warmup)
	if t.Incident != "" {
		s += "; " + t.Incident
	}
	return s
}

// Bounds of the draws. maxRequests bounds the cost of one run.
const (
	familyMinRate       = 20.0    // logical requests per second in all
	familyMinRepRate    = 10.0    // per replica: a window needs samples
	familyMaxRate       = 20000.0 // in all
	familyMaxRequests   = 4e6
	familyHealthyLength = 120 * time.Second
	familyBefore        = 20 * time.Second // healthy, measured, before an incident
	familyAfter         = 60 * time.Second // after it, for recovery
)

// Draw returns instance i of the family for seed.
func (f *Family) Draw(seed uint64, i int) (*Instance, error) {
	r := newStream(seed, "family/"+f.Name+"/"+strconv.Itoa(i))
	for try := 0; ; try++ {
		in, ok := f.draw(r)
		if !ok && try < 100 {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("family %s: instance %d: no valid draw", f.Name, i)
		}
		in.Family, in.Seed, in.Index = f.Name, seed, i
		in.Scenario.Name = f.Name + "-" + strconv.Itoa(i)
		if err := in.Scenario.Validate(); err != nil {
			return nil, fmt.Errorf("family %s: instance %d: %w", f.Name, i, err)
		}
		return in, nil
	}
}

// DrawFamily returns instances [0, n) of the named family.
func DrawFamily(name string, seed uint64, n int) ([]*Instance, error) {
	f, err := LookupFamily(name)
	if err != nil {
		return nil, err
	}
	out := make([]*Instance, n)
	for i := range out {
		if out[i], err = f.Draw(seed, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// logUniform draws from [lo, hi] uniformly on a log scale.
func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return lo * math.Exp(r.Float64()*math.Log(hi/lo))
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }

// drawShape draws a service-time shape of median 1 (scaled later) and
// returns it with its name.
func drawShape(r *rand.Rand) (Dist, string) {
	switch r.IntN(6) {
	case 0:
		return Const(1), "constant"
	case 1:
		return Exp(1 / math.Ln2), "exponential" // median 1
	case 2:
		s := uniform(r, 0.2, 1)
		return LogNorm(1, s), fmt.Sprintf("lognormal(%.2f)", s)
	case 3:
		s := uniform(r, 1, 2)
		return LogNorm(1, s), fmt.Sprintf("lognormal(%.2f)", s)
	case 4:
		a := uniform(r, 1.1, 2.5)
		return Par(1, a), fmt.Sprintf("pareto(%.2f)", a)
	default:
		ratio, share := logUniform(r, 3, 30), uniform(r, 0.02, 0.3)
		return Bimod(1, 0.3, ratio, share), fmt.Sprintf("bimodal(x%.0f, %.0f%%)", ratio, 100*share)
	}
}

// scaleDist multiplies a shape of median 1 by m, and bounds its tail at
// 300 x m: no dependency takes forever, and an unbounded Pareto draw would
// hold a server for longer than the run.
func scaleDist(d Dist, m float64) Dist {
	switch d.Kind {
	case Constant:
		d.Value *= m
	case Exponential:
		d.Mean *= m
	default:
		d.Median *= m
	}
	if d.Kind != Constant {
		d.ClampMax = 300 * m
	}
	return d
}

// meanOf estimates the mean of d from a fixed sample.
func meanOf(d Dist) float64 {
	r := newStream(0, "family/mean")
	s := 0.0
	const n = 20000
	for range n {
		s += d.sample(r)
	}
	return s / n
}

// draft is an instance being drawn.
type draft struct {
	sc       *Scenario
	t        Traits
	shape    Dist // median 1
	mean     float64
	capacity int // servers of each upstream (all of them when shared)
	loads    []float64
	at       time.Duration // when the incident starts
	// Per class, in multiples of the median service time: the client's
	// attempt timeout (0: none) and the mean think time of closed-loop
	// users.
	attemptX, thinkX []float64
}

// draw draws one instance, or reports that the draw cannot be realized
// within the bounds (the caller draws again).
func (f *Family) draw(r *rand.Rand) (*Instance, bool) {
	d := &draft{sc: &Scenario{Interval: time.Second}}
	t := &d.t
	d.shape, t.Shape = drawShape(r)
	d.mean = meanOf(scaleDist(d.shape, 1))
	t.Servers = int(math.Round(logUniform(r, 1, 5000)))
	t.Replicas = int(math.Round(logUniform(r, 1, float64(min(100, t.Servers)))))
	t.Shared = t.Replicas > 1 && r.IntN(2) == 0
	t.Load = uniform(r, 0.1, 0.9)
	t.Deadline = logUniform(r, 3, 100)
	t.Warmup = time.Duration(math.Round(logUniform(r, 10, 300))) * time.Second
	d.capacity = t.Servers
	if !t.Shared {
		d.capacity = max(1, int(math.Round(float64(t.Servers)/float64(t.Replicas))))
		t.Servers = d.capacity * t.Replicas
	}
	d.baseClasses(r)
	length := familyHealthyLength
	if f.incident {
		// The incident's length is drawn before the rate, which bounds
		// the cost of the whole run.
		d.at = t.Warmup + familyBefore
		span, ok := d.drawIncident(r)
		if !ok {
			return nil, false
		}
		length = familyBefore + span + familyAfter
	}
	d.sc.Duration = (t.Warmup + length + time.Second - 1).Truncate(time.Second)
	d.sc.Warmup = t.Warmup
	if !d.setMedian(r) {
		return nil, false
	}
	d.finish(r)
	return &Instance{Scenario: d.sc, Traits: *t}, true
}

// setMedian draws the median service time so that the healthy rate stays
// within the bounds: enough samples per replica for a window, not so many
// that a run takes long.
func (d *draft) setMedian(r *rand.Rand) bool {
	t := &d.t
	total := d.sc.Duration.Seconds()
	maxRate := min(familyMaxRate, familyMaxRequests/total)
	minRate := max(familyMinRate, familyMinRepRate*float64(t.Replicas))
	work := t.Load * float64(t.Servers) / d.mean // requests per second at a median of 1 s
	lo := max(0.001, work/maxRate)
	hi := min(2, work/minRate)
	if lo > hi {
		return false
	}
	m := logUniform(r, lo, hi)
	t.Median = time.Duration(m * 1e9)
	t.Rate = work / m
	return true
}

// baseClasses draws the classes: one, or interactive and batch with a
// protected share; sometimes with naive client retries.
func (d *draft) baseClasses(r *rand.Rand) {
	sc := d.sc
	sc.Classes = []Class{{Name: "default"}}
	d.loads = []float64{1}
	if r.IntN(4) == 0 {
		share := uniform(r, 0.3, 0.8)
		sc.Classes = []Class{
			{Name: "interactive", Protected: uniform(r, 0.5, 0.9)},
			{Name: "batch"},
		}
		d.loads = []float64{share, 1 - share}
	}
	if r.IntN(10) < 3 {
		for i := range sc.Classes {
			sc.Classes[i].Retry = Retry{MaxAttempts: 2 + r.IntN(2)}
		}
	}
	d.attemptX = make([]float64, len(sc.Classes))
	d.thinkX = make([]float64, len(sc.Classes))
}

// finish scales the classes and the upstream to the drawn median.
func (d *draft) finish(r *rand.Rand) {
	t, sc := &d.t, d.sc
	m := float64(t.Median)
	deadline := time.Duration(t.Deadline * m)
	for i := range sc.Classes {
		c := &sc.Classes[i]
		c.Timeout = deadline
		if c.Name == "batch" {
			c.Timeout = 3 * deadline
		}
		if x := d.thinkX[i]; x > 0 {
			// Closed loop: N users thinking Z between requests of
			// latency about mean offer N / (Z + mean) per second.
			c.Think = Exp(x * m)
			c.Users = max(1, int(math.Round(d.loads[i]*t.Rate*(x+d.mean)*m/1e9)))
		} else {
			c.Rate = d.loads[i] * t.Rate
		}
		if x := d.attemptX[i]; x > 0 {
			c.AttemptTimeout = min(time.Duration(x*m), c.Timeout)
		}
		if c.Retry.MaxAttempts > 1 {
			c.Retry.Backoff = max(time.Duration(m), time.Millisecond)
		}
	}
	sc.Upstream = Upstream{Capacity: d.capacity, ServiceTime: scaleDist(d.shape, m), Shared: t.Shared,
		Events: sc.Upstream.Events}
	if r.IntN(2) == 0 {
		sc.Upstream.Degradation = uniform(r, 0.2, 1)
	}
	sc.Service.Replicas = t.Replicas
	if r.IntN(3) == 0 {
		sc.Service.Balancer = PowerOfTwo
	}
	perReplica := d.capacity
	if t.Shared {
		perReplica = (d.capacity + t.Replicas - 1) / t.Replicas
	}
	sc.Service.StaticLimit = perReplica // the oracle: the capacity, known
	inFlight := t.Load * float64(t.Servers) / float64(t.Replicas)
	t.Warm = int(math.Ceil(inFlight + 3*math.Sqrt(inFlight) + 1))
	t.Max = max(1000, 4*perReplica)
}
