package sim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// psScenario is queueScenario with a processor-sharing upstream and the
// given service time distribution.
func psScenario(lambda float64, c int, svc Dist, d time.Duration) *Scenario {
	sc := queueScenario(lambda, c, 0, d)
	sc.Name = "ps"
	sc.Upstream.Discipline = PS
	sc.Upstream.ServiceTime = svc
	return sc
}

// TestPSTheory checks the PS upstream against queueing theory. M/G/1-PS:
// the mean time in system is 1/(mu - lambda) whatever the shape of the
// service time (1 ms mean: 2 ms at rho 0.5, 3.33 ms at rho 0.7), where
// FIFO's grows with its variance (Pollaczek-Khinchine). M/M/c-PS: the
// number present is the same birth-death process as M/M/c FIFO's (total
// service rate min(n, c) mu), so the mean time in system is Erlang C's,
// and egalitarian PS is insensitive there too.
func TestPSTheory(t *testing.T) {
	none, err := ParsePolicy("none")
	if err != nil {
		t.Fatal(err)
	}
	const mean = 1e6 // 1 ms: mu = 1000/s per server
	mu := 1e9 / mean
	sigma := 1.0
	logn := LogNorm(mean/math.Exp(sigma*sigma/2), sigma) // mean 1 ms, CV 1.31
	tests := []struct {
		name   string
		lambda float64
		c      int
		svc    Dist
		d      time.Duration
	}{
		{"M/M/1-PS rho=0.5", 500, 1, Exp(mean), 300 * time.Second},
		{"M/M/1-PS rho=0.7", 700, 1, Exp(mean), 300 * time.Second},
		{"M/D/1-PS rho=0.7", 700, 1, Const(mean), 300 * time.Second},
		{"M/LogN/1-PS rho=0.7", 700, 1, logn, 300 * time.Second},
		{"M/M/4-PS rho=0.7", 2800, 4, Exp(mean), 60 * time.Second},
		{"M/LogN/4-PS rho=0.7", 2800, 4, logn, 60 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.d
			if raceEnabled {
				d = (d / 4).Truncate(time.Second)
			}
			r, err := Run(psScenario(tc.lambda, tc.c, tc.svc, d), none, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			s := r.Summary
			a := tc.lambda / mu
			want := erlangC(tc.c, a)/(float64(tc.c)*mu-tc.lambda) + 1/mu // 1/(mu - lambda) for c = 1
			got := s.UpstreamSojourn
			if rel := math.Abs(got-want) / want; rel > 0.05 {
				t.Errorf("mean time in system %.4gs, theory %.4gs (off by %.1f%%, want <= 5%%)", got, want, 100*rel)
			}
			l, lw := s.UpstreamMeanJobs, s.UpstreamThroughput*s.UpstreamSojourn
			if rel := math.Abs(l-lw) / l; rel > 0.01 {
				t.Errorf("Little's law: L = %.4g, lambda W = %.4g (off by %.2f%%, want <= 1%%)", l, lw, 100*rel)
			}
			t.Logf("W = %.4gs (theory %.4gs), L = %.4g, %d jobs", got, want, l, s.Jobs)
		})
	}
}

// TestPSSlowJobsDoNotBlock: under PS a short job's time in system does not
// depend on a long job present with it, as it does under FIFO: one server,
// a 1 s job at t=0 and 1 ms jobs every 10 ms after it. Under FIFO the
// first short jobs wait for the long one; under PS each shares the server
// with it only, and takes 2 ms.
func TestPSSlowJobsDoNotBlock(t *testing.T) {
	sc := &Scenario{
		Name: "ps-block", Duration: 2 * time.Second, Warmup: time.Second / 2,
		Classes:  []Class{{Name: "c", Rate: 100, Timeout: time.Hour}},
		Upstream: Upstream{Capacity: 1, Discipline: PS, ServiceTime: Const(1e6)},
	}
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
	if err != nil {
		t.Fatal(err)
	}
	u := e.ups[0]
	long := e.newTask(layerJob)
	long.arrival = 0
	u.ps.jobs.push(psJob{finish: 1e9, t: long}) // 1 s of work, present from t=0
	e.rec.upPresent++
	u.psReschedule(e)
	if got := u.ps.jobs.top().finish; got != 1e9 {
		t.Fatalf("finish %v", got)
	}
	// A short job alone with the long one progresses at 1/2.
	j := e.newTask(layerJob)
	j.replica = 0
	u.ps.advance(5e8, 1)
	e.now = 5e8
	v0 := u.ps.v
	if math.Abs(v0-5e8) > 1 {
		t.Fatalf("virtual time %v after 0.5 s alone, want 5e8", v0)
	}
	u.ps.jobs.push(psJob{finish: v0 + 1e6, t: j})
	u.psReschedule(e)
	ev := e.h.next()
	for ev.kind != evPSDone || ev.gen != u.ps.gen {
		ev = e.h.next()
	}
	if ev.at-e.now != 2e6+1 {
		t.Errorf("the short job finishes %v after it arrived, want 2ms (+1ns rounding)", time.Duration(ev.at-e.now))
	}
}

func mustPolicy(t *testing.T, spec string) Policy {
	t.Helper()
	p, err := ParsePolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// psIncident is a PS scenario with everything that touches the upstream:
// a slowdown, a capacity loss overlapping it, an error burst, a bound on
// the jobs present, retries, two classes and an adaptive limit.
func psIncident(rate float64, c, maxInFlight int, d time.Duration) *Scenario {
	return &Scenario{
		Name: "ps-incident", Duration: d, Warmup: d / 6,
		Classes: []Class{
			{Name: "interactive", Rate: rate, Timeout: time.Second, Protected: 0.8, Queue: 50, MaxWait: 100 * time.Millisecond},
			{Name: "batch", Rate: rate / 2, Timeout: 3 * time.Second},
		},
		Service: Service{Timeout: 800 * time.Millisecond, Retry: Retry{MaxAttempts: 3, Budget: &Budget{}}},
		Upstream: Upstream{Capacity: c, Discipline: PS, MaxInFlight: maxInFlight, ServiceTime: LogNorm(4e7, 0.5),
			Events: []UpstreamEvent{
				{At: d / 3, For: d / 3, Slowdown: 4},
				{At: d / 2, For: d / 6, Capacity: 0.5},
				{At: d / 2, For: d / 12, Errors: 0.2},
			}},
	}
}

// TestPSDeterminism: the same scenario, policy and seed give the same
// outputs byte for byte; another seed gives others.
func TestPSDeterminism(t *testing.T) {
	sc := psIncident(300, 20, 200, 30*time.Second)
	p := mustPolicy(t, "shedkit-gradient")
	run := func(seed uint64) []byte {
		r, err := Run(sc, p, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return outputs(t, []*Result{r})
	}
	a, b, c := run(7), run(7), run(8)
	if !bytes.Equal(a, b) {
		t.Error("two runs with seed 7 differ")
	}
	if bytes.Equal(a, c) {
		t.Error("seeds 7 and 8 gave the same outputs")
	}
}

// TestPSWorkConserved is a property test: on random PS scenarios (load
// from light to 3x overload, capacity changes, slowdowns, errors, bounds
// on the jobs present), the service the upstream delivered (the integral
// of min(n, c) over time) equals the work of the jobs it completed plus
// the part done of those still present, to the rounding of each
// completion to a whole nanosecond.
func TestPSWorkConserved(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 12
	if testing.Short() || raceEnabled {
		n = 4
	}
	none, grad := mustPolicy(t, "none"), mustPolicy(t, "shedkit-gradient")
	for i := range n {
		c := 1 + rng.IntN(30)
		rate := float64(c) * 25 * (0.2 + 2.8*rng.Float64()) // service 40 ms: capacity 25/s per server
		maxIn := 0
		if rng.IntN(2) == 0 {
			maxIn = c * (1 + rng.IntN(10))
		}
		sc := psIncident(rate, c, maxIn, 12*time.Second)
		p := none
		if i%2 == 1 {
			p = grad
		}
		e, err := newEngine(mustNormalize(t, sc), p, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		var done float64
		var completed, maxPresent int
		e.onJob = func(j *task) {
			done += float64(j.work)
			completed++
			maxPresent = max(maxPresent, e.ups[0].present())
		}
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		q := &e.ups[0].ps
		partial := 0.0
		for _, j := range q.jobs.a {
			partial += float64(j.t.work) - (j.finish - q.v)
		}
		diff := q.served - (done + partial)
		if math.Abs(diff) > 1.5*float64(completed)+1e-9*q.served {
			t.Errorf("case %d (c %d, rate %.0f, max %d, %s): delivered %.6g ns, completed %.6g + present %.6g: off by %.3g ns over %d jobs",
				i, c, rate, maxIn, p.Name(), q.served, done, partial, diff, completed)
		}
		if completed == 0 {
			t.Errorf("case %d: no job completed", i)
		}
		if m := maxPresent; maxIn > 0 && m > maxIn {
			t.Errorf("case %d: %d jobs present, bound %d", i, m, maxIn)
		}
	}
}

// TestFIFOIsDefault: the zero Discipline is FIFO, and it names itself.
func TestFIFOIsDefault(t *testing.T) {
	var u Upstream
	if u.Discipline != FIFO || FIFO.String() != "fifo" || PS.String() != "ps" || Discipline(9).String() != "unknown" {
		t.Errorf("disciplines: zero %v, names %q %q", u.Discipline, FIFO, PS)
	}
	sc := psScenario(100, 2, Exp(1e6), 10*time.Second)
	sc.Upstream.Discipline = 7
	if err := sc.Validate(); err == nil {
		t.Error("discipline 7 accepted")
	}
}

// TestMaxInFlight: under either discipline, an upstream bounded to 3 jobs
// present at 4x overload never holds more, and the jobs it refuses fail
// (clients see errors, not timeouts alone).
func TestMaxInFlight(t *testing.T) {
	for _, d := range []Discipline{FIFO, PS} {
		sc := &Scenario{
			Name: "bounded", Duration: 10 * time.Second,
			Classes:  []Class{{Name: "c", Rate: 400, Timeout: time.Second}},
			Upstream: Upstream{Capacity: 1, Discipline: d, MaxInFlight: 3, ServiceTime: Exp(1e7)},
		}
		e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "none"), 1)
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		e.onJob = func(*task) { most = max(most, e.ups[0].present()) }
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		s := e.result("none", 1).Summary
		if most > 3 || most == 0 {
			t.Errorf("%v: %d jobs present at most, want 1 to 3", d, most)
		}
		// The upstream serves 100/s of the 400/s offered: the rest fails.
		if f := float64(s.Failed) / float64(s.Logical); f < 0.6 || s.Goodput == 0 {
			t.Errorf("%v: %d of %d failed, %d good: want most refused and some served", d, s.Failed, s.Logical, s.Goodput)
		}
	}
}
