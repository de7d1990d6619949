package sim

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func TestRateSchedule(t *testing.T) {
	f, err := buildRate(100, []RateChange{
		{At: 10 * time.Second, Factor: 3, For: 5 * time.Second},        // spike to 300 for 5 s
		{At: 20 * time.Second, Rate: 200, Ramp: 10 * time.Second},      // ramp 100 -> 200
		{At: 40 * time.Second, Rate: 0},                                // stop
		{At: 50 * time.Second, Rate: 50, Ramp: 0, For: 0, Factor: 0.5}, // factor wins: 50
	}, "s")
	if err != nil {
		t.Fatal(err)
	}
	at := []struct{ t, want float64 }{{5, 100}, {10, 300}, {14.9, 300}, {15, 100}, {25, 150}, {30, 200}, {45, 0}, {55, 50}}
	for _, c := range at {
		if got := f.at(c.t); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("rate at %vs = %v, want %v", c.t, got, c.want)
		}
	}
	if got, want := f.integral(0, 60), 100*10+300*5+100*5+150*10+200*10+0+50*10.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("integral = %v, want %v", got, want)
	}
	if got := f.max(); got != 300 {
		t.Errorf("max = %v", got)
	}
	// Arrivals by inversion: counts per window match the integral.
	r := rand.New(rand.NewPCG(1, 2))
	a := arrivals{f: &f}
	counts := map[int]int{}
	for {
		x := a.next(r.ExpFloat64())
		if x > 60 {
			break
		}
		counts[int(x/10)]++
	}
	for w := range 6 {
		want := f.integral(float64(10*w), float64(10*w+10))
		got := float64(counts[w])
		// Poisson: allow 5 standard deviations.
		if math.Abs(got-want) > 5*math.Sqrt(want)+1 {
			t.Errorf("window %d: %v arrivals, want about %v", w, got, want)
		}
	}
	if counts[4] != 0 {
		t.Errorf("%d arrivals while the rate is 0", counts[4])
	}
	// A rate that ends at zero ends the arrivals.
	g, _ := buildRate(10, []RateChange{{At: time.Second, Rate: 0}}, "s")
	b := arrivals{f: &g}
	n := 0
	for !math.IsInf(b.next(r.ExpFloat64()), 1) {
		n++
		if n > 1000 {
			t.Fatal("arrivals do not end")
		}
	}
}

func TestHeapOrder(t *testing.T) {
	// Random pushes into the heap and two lanes come out in (at, seq)
	// order, with lane entries that break monotonicity falling back to the
	// heap.
	r := rand.New(rand.NewPCG(3, 4))
	var h eventHeap
	l1, l2 := h.newLane(), h.newLane()
	now := int64(0)
	var got []event
	for i := range 20000 {

		switch i % 4 {
		case 0:
			h.push(event{at: now + r.Int64N(1000), arg: int32(i)})
		case 1:
			h.pushLane(l1, event{at: now + 500, arg: int32(i)})
		case 2:
			h.pushLane(l2, event{at: now + r.Int64N(300), arg: int32(i)}) // not monotone
		default:
			if h.len() > 0 {
				e := h.next()
				if e.at < now {
					t.Fatalf("time went back: %d after %d", e.at, now)
				}
				now = e.at
				got = append(got, e)
			}
		}
	}
	for h.len() > 0 {
		got = append(got, h.next())
	}
	if !slices.IsSortedFunc(got, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	}) {
		t.Fatal("events out of (at, seq) order")
	}
	if len(got) != 15000 {
		t.Fatalf("%d events out, 15000 in", len(got))
	}
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	r := rand.New(rand.NewPCG(5, 6))
	xs := make([]float64, 100000)
	for i := range xs {
		xs[i] = math.Exp(17 + 2*r.NormFloat64()) // ~24 ms median, wide
		h.add(int64(xs[i]))
	}
	slices.Sort(xs)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
		got := h.quantile(q)
		if rel := math.Abs(got-exact) / exact; rel > 0.017 {
			t.Errorf("q%.3f = %.4g, exact %.4g (%.2f%% off)", q, got, exact, 100*rel)
		}
	}
	if !math.IsNaN(new(hist).quantile(0.5)) {
		t.Error("empty histogram has a quantile")
	}
	for _, v := range []int64{0, 1, 63, 64, 65, 1 << 20, maxHistValue, maxHistValue + 1, math.MaxInt64} {
		if i := histIndex(v); i < 0 || i >= histBuckets {
			t.Errorf("index of %d = %d", v, i)
		}
	}
}

// outage is a scenario whose upstream fails every job, with retries at
// every layer: the amplification is the product of the attempts.
func outage(retry Retry, gateway, service bool) *Scenario {
	sc := &Scenario{
		Name: "outage", Duration: 15 * time.Second, Warmup: 5 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 200, Timeout: 10 * time.Second, Retry: retry}},
		Upstream: Upstream{Capacity: 10000, ServiceTime: Const(float64(time.Millisecond)), Events: []UpstreamEvent{{At: 0, For: 15 * time.Second, Errors: 1}}},
	}
	if gateway {
		sc.Gateway = &Gateway{Retry: retry}
	}
	if service {
		sc.Service.Retry = retry
	}
	return sc
}

func TestRetryAmplification(t *testing.T) {
	none, _ := ParsePolicy("none")
	naive := Retry{MaxAttempts: 4, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	budget := naive
	budget.Budget = &Budget{}
	tests := []struct {
		name            string
		sc              *Scenario
		service, upstrm [2]float64 // attempts at the service, jobs at the upstream, per logical request: [min, max]
	}{
		{"1 layer x 4", outage(naive, false, false), [2]float64{3.99, 4.01}, [2]float64{3.99, 4.01}},
		{"3 layers x 4", outage(naive, true, true), [2]float64{15.9, 16.1}, [2]float64{63.5, 64.5}},
		// Budget: retries <= 20% of a layer's requests + 10/s. At 200
		// logical requests/s the client makes 200 + 40 + 10 attempts per
		// second (1.25x), the gateway adds 20% + 10/s of those (1.55x),
		// the replica 20% + 10/s of its own (1.91x).
		{"1 layer x 4, budget", outage(budget, false, false), [2]float64{1.24, 1.26}, [2]float64{1.24, 1.26}},
		{"3 layers x 4, budgets", outage(budget, true, true), [2]float64{1.53, 1.56}, [2]float64{1.88, 1.93}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Run(tc.sc, none, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			s := r.Summary
			if s.Amplification < tc.service[0] || s.Amplification > tc.service[1] {
				t.Errorf("attempts per logical request at the service = %.3f, want in %v", s.Amplification, tc.service)
			}
			if s.UpstreamAmplification < tc.upstrm[0] || s.UpstreamAmplification > tc.upstrm[1] {
				t.Errorf("jobs per logical request = %.3f, want in %v", s.UpstreamAmplification, tc.upstrm)
			}
			t.Logf("attempts per logical request: service %.3f, upstream %.3f", s.Amplification, s.UpstreamAmplification)
			if s.Goodput != 0 || s.Failed == 0 {
				t.Errorf("goodput %d failed %d during a full outage", s.Goodput, s.Failed)
			}
		})
	}
}

func TestHonorNoRetry(t *testing.T) {
	// A tiny static limit rejects most requests; clients that honour the
	// "do not retry" of a shedding service make one attempt each.
	sc := &Scenario{
		Name: "shed", Duration: 20 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 500, Retry: Retry{MaxAttempts: 3, HonorNoRetry: true}}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
	p, _ := ParsePolicy("static:limit=5")
	r, err := Run(sc, p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Summary; s.Amplification != 1 || s.ClientRetries != 0 || s.RejectedShare < 0.8 {
		t.Errorf("amplification %.3f, retries %d, rejected %.3f", s.Amplification, s.ClientRetries, s.RejectedShare)
	}
	sc.Classes[0].Retry.HonorNoRetry = false
	r, _ = Run(sc, p, Options{Seed: 1})
	if s := r.Summary; s.Amplification < 2.5 {
		t.Errorf("naive clients: amplification %.3f, want about 3", s.Amplification)
	}
}

func TestClosedLoop(t *testing.T) {
	// N users with think time Z and response time R send N / (Z + R)
	// requests per second (the interactive response time law).
	sc := &Scenario{
		Name: "users", Duration: 100 * time.Second,
		Classes:  []Class{{Name: "u", Users: 200, Think: Exp(float64(900 * time.Millisecond))}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
	none, _ := ParsePolicy("none")
	r, err := Run(sc, none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Summary.Throughput
	if want := 200 / 1.0; math.Abs(got-want)/want > 0.03 {
		t.Errorf("throughput %.1f/s, want %.1f/s", got, want)
	}
}

func TestBalancers(t *testing.T) {
	// Replica 0's upstream is 10x slower: least in flight and power of
	// two choices send it less work than round robin does.
	share := map[Balancer]float64{}
	for _, b := range []Balancer{RoundRobin, LeastInFlight, PowerOfTwo} {
		sc := &Scenario{
			Name: "lb", Duration: 20 * time.Second,
			Classes:  []Class{{Name: "a", Rate: 1000}},
			Service:  Service{Replicas: 4, Balancer: b},
			Upstream: Upstream{Capacity: 100, ServiceTime: Const(float64(10 * time.Millisecond)), Events: []UpstreamEvent{{At: 0, For: 20 * time.Second, Slowdown: 10, Replicas: 1}}},
		}
		none, _ := ParsePolicy("none")
		e, err := newEngine(mustNormalize(t, sc), none, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		s0 := e.replicas[0].lim.Snapshot().Classes[0].Admitted
		total := uint64(0)
		for i := range e.replicas {
			total += e.replicas[i].lim.Snapshot().Classes[0].Admitted
		}
		share[b] = float64(s0) / float64(total)
	}
	if math.Abs(share[RoundRobin]-0.25) > 0.001 {
		t.Errorf("round robin gave the slow replica %.3f of the work", share[RoundRobin])
	}
	for _, b := range []Balancer{LeastInFlight, PowerOfTwo} {
		if share[b] > 0.15 {
			t.Errorf("%v gave the slow replica %.3f of the work", b, share[b])
		}
	}
}

func mustNormalize(t *testing.T, sc *Scenario) *Scenario {
	t.Helper()
	n, err := sc.normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWastedWork(t *testing.T) {
	// Service time 2 s, deadline 1 s: every job is wasted, and without a
	// limit none succeeds.
	sc := &Scenario{
		Name: "late", Duration: 30 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 100, Timeout: time.Second}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(2 * time.Second))},
	}
	none, _ := ParsePolicy("none")
	r, err := Run(sc, none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Summary; s.Wasted != 1 || s.Goodput != 0 || s.Timeouts == 0 {
		t.Errorf("wasted %.3f goodput %d timeouts %d", s.Wasted, s.Goodput, s.Timeouts)
	}
	if ideal := r.Summary.Ideal; ideal != 0 {
		t.Errorf("ideal = %v, want 0 (no job fits its deadline)", ideal)
	}
}

func TestCostReconcile(t *testing.T) {
	// Requests reserve 100 and use 10: with a cost budget of 1,000 the
	// limiter admits 10 at a time until the upstream reveals the actual
	// cost, then up to 100.
	sc := &Scenario{
		Name: "cost", Duration: 20 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 2000, Cost: Const(100), Actual: Const(0.1), Timeout: 10 * time.Second}},
		Service:  Service{MaxCost: 1000},
		Upstream: Upstream{Capacity: 50, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
	static, _ := ParsePolicy("static:limit=1000")
	r, err := Run(sc, static, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Capacity 50 jobs of 100 ms: 500/s. Without reconciliation the cost
	// budget would hold it to 10 in flight: 100/s.
	if got := r.Summary.Throughput; got < 450 {
		t.Errorf("throughput %.0f/s, want about 500/s", got)
	}
	sc.Classes[0].Actual = Dist{}
	r, _ = Run(sc, static, Options{Seed: 1})
	if got := r.Summary.Throughput; got > 110 {
		t.Errorf("without reconciliation: throughput %.0f/s, want about 100/s", got)
	}
}

func TestIdeal(t *testing.T) {
	// Constant 50 ms jobs on 10 servers: 200/s. Offered 300/s: the ideal
	// is 200 per second; during a 2x slowdown, 100.
	sc := &Scenario{
		Name: "ideal", Duration: 40 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 300}},
		Upstream: Upstream{Capacity: 10, ServiceTime: Const(float64(50 * time.Millisecond)), Events: []UpstreamEvent{{At: 20 * time.Second, For: 10 * time.Second, Slowdown: 2}}},
	}
	none, _ := ParsePolicy("none")
	r, err := Run(sc, none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Series {
		want := 200.0
		if row.Time > 20 && row.Time <= 30 {
			want = 100
		}
		if row.Ideal != want && float64(row.Offered) > want {
			t.Fatalf("t=%v: ideal %v, want %v (offered %d)", row.Time, row.Ideal, want, row.Offered)
		}
	}
}

func TestThrottle(t *testing.T) {
	// A service that admits 10 at a time, 100 ms each (100/s), offered
	// 500/s: without a throttle clients send every request and most are
	// rejected; with Google SRE throttling (K = 2) they reject locally
	// most of what the service would have rejected, and send about
	// K x accepts.
	sc := &Scenario{
		Name: "throttle", Duration: 60 * time.Second, Warmup: 20 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 500}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
	p, _ := ParsePolicy("static:limit=10")
	r, err := Run(sc, p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	plain := r.Summary
	sc.Classes[0].Retry.Throttle = &Throttle{}
	r, err = Run(sc, p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	thr := r.Summary
	t.Logf("attempts per logical request: %.3f without throttle, %.3f with; goodput %d and %d", plain.Amplification, thr.Amplification, plain.Goodput, thr.Goodput)
	if plain.Amplification != 1 {
		t.Errorf("without throttle: %.3f attempts per request", plain.Amplification)
	}
	// 100 accepted per second: the throttle lets about 2 x 100 through.
	if thr.Amplification < 0.3 || thr.Amplification > 0.5 {
		t.Errorf("with throttle: %.3f attempts per request, want about 0.4", thr.Amplification)
	}
	// It refuses some requests the service would have admitted: a few
	// percent of goodput is its price.
	if float64(thr.Goodput) < 0.85*float64(plain.Goodput) {
		t.Errorf("throttling cost goodput: %d, without %d", thr.Goodput, plain.Goodput)
	}
}

func TestForeignLimiterError(t *testing.T) {
	// A policy whose limiter has fewer classes than the scenario: the run
	// fails with an error instead of panicking.
	p := PolicyFunc("one-class", func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		l, err := shed.New(shed.Config{Limit: 10})
		return l, nil, err
	})
	sc := &Scenario{
		Name: "two", Duration: 10 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 10}, {Name: "b", Rate: 10}},
		Upstream: Upstream{Capacity: 10, ServiceTime: Const(1e6)},
	}
	if _, err := Run(sc, p, Options{Seed: 1}); err == nil || !strings.Contains(err.Error(), "unknown class") {
		t.Fatalf("err = %v", err)
	}
}

// The heavy-tailed and bimodal shapes draw their stated median and mean.
func TestParetoAndBimodalMoments(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Dist
	}{
		{"pareto 2.5", Par(10, 2.5)},
		{"pareto 1.5 clamped", Dist{Kind: Pareto, Median: 10, Alpha: 1.5, ClampMax: 1e6}},
		{"bimodal", Bimod(10, 0.3, 20, 0.1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStream(1, tc.name)
			xs := make([]float64, 200000)
			sum := 0.0
			for i := range xs {
				xs[i] = tc.d.sample(r)
				sum += xs[i]
			}
			e := newEmpirical(xs)
			if med := e.xs[len(xs)/2]; tc.d.Kind == Pareto && math.Abs(med/10-1) > 0.02 {
				t.Errorf("median %.3f, want 10", med)
			}
			if tc.d.ClampMax == 0 {
				if m := sum / float64(len(xs)); math.Abs(m/tc.d.MeanValue()-1) > 0.05 {
					t.Errorf("mean %.3f, want %.3f", m, tc.d.MeanValue())
				}
			}
		})
	}
}

// A replica retries through retrybudget.Transport, which starts no retry
// that could not take as long as the attempt before it and still end
// before the request's deadline: with 300 ms attempts and a 500 ms
// deadline, an attempt that timed out is not retried. Clients keep the
// simpler rule (the backoff must fit).
func TestServiceRetryFitsTheAttemptBeforeIt(t *testing.T) {
	retry := Retry{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	sc := &Scenario{
		Name: "slow", Duration: 10 * time.Second, Warmup: time.Second,
		Classes:  []Class{{Name: "a", Rate: 50, Timeout: 500 * time.Millisecond}},
		Service:  Service{Timeout: 300 * time.Millisecond, Retry: retry},
		Upstream: Upstream{Capacity: 1000, ServiceTime: Const(float64(time.Second))},
	}
	none, _ := ParsePolicy("none")
	r, err := Run(sc, none, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Summary.ServiceRetries; n != 0 {
		t.Errorf("%d service retries after 300 ms attempts with 200 ms left, want none", n)
	}
	sc.Classes[0].Timeout = 2 * time.Second // room for the retries
	if r, err = Run(sc, none, Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if n := r.Summary.ServiceRetries; n == 0 {
		t.Error("no service retry with room for two more attempts")
	}
}
