package failsafesim_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shedkit/shedkit/bench/failsafesim"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loop drives a shed.Limiter backed by a Source in virtual time, as a
// closed loop with unbounded demand: every millisecond it admits up to the
// limit, and each unit of work takes latency(now). It returns the limit
// at each of the given instants.
func loop(t *testing.T, src *failsafesim.Source, l *shed.Limiter, end time.Duration, latency func(time.Duration) time.Duration, at ...time.Duration) []int {
	t.Helper()
	t0 := sim.Epoch()
	type work struct {
		p   shed.Permit
		end time.Duration
	}
	var running []*work
	var limits []int
	for now := time.Duration(0); now <= end; now += time.Millisecond {
		vt := t0.Add(now)
		kept := running[:0]
		for _, w := range running {
			if w.end <= now {
				w.p.ReleaseAt(vt, shed.Success)
			} else {
				kept = append(kept, w)
			}
		}
		running = kept
		for {
			p, err := l.TryAcquireAt(vt, shed.Request{})
			if err != nil {
				break
			}
			running = append(running, &work{p, now + latency(now)})
		}
		for _, a := range at {
			if a == now {
				limits = append(limits, l.Limit())
			}
		}
		if st := src.Stats(); st.Refused != 0 || st.Orphans != 0 || st.Held != l.InFlight() {
			t.Fatalf("at %v: failsafe-go's mirror of shed's work diverged: %+v, shed in flight %d", now, st, l.InFlight())
		}
	}
	return limits
}

func newLimiter(t *testing.T, cfg failsafesim.Config) (*failsafesim.Source, *shed.Limiter) {
	t.Helper()
	src, err := failsafesim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := shed.New(shed.Config{Source: src, Observer: src.Observer(nil), Clock: func() time.Time { return sim.Epoch() }})
	if err != nil {
		t.Fatal(err)
	}
	return src, l
}

// The limiter must see virtual time: its windows last one virtual second
// (WindowMin) and it moves the limit by about one per window. The whole
// test takes milliseconds of real time, so with the wall clock it would
// close at most one window and the limit could not move by more than a few.
func TestVirtualTimeDrivesTheLimit(t *testing.T) {
	src, l := newLimiter(t, failsafesim.Config{})
	lat := func(now time.Duration) time.Duration {
		if now < 60*time.Second {
			return 10 * time.Millisecond
		}
		return 100 * time.Millisecond // ten-fold slowdown
	}
	got := loop(t, src, l, 90*time.Second, lat, 0, 60*time.Second, 90*time.Second)
	start, healthy, slowed := got[0], got[1], got[2]
	t.Logf("limit: start %d, after 60 s at 10 ms %d, after 30 s at 100 ms %d", start, healthy, slowed)
	if start != failsafesim.DefaultInitialLimit {
		t.Errorf("initial limit %d, want %d", start, failsafesim.DefaultInitialLimit)
	}
	// Fully used and no queueing: +1 per window (about 1 s), 60 windows.
	if healthy < start+30 {
		t.Errorf("limit after 60 virtual seconds of healthy latency = %d, want >= %d: windows are not closing in virtual time", healthy, start+30)
	}
	// Ten times the baseline latency: the queue estimate exceeds beta,
	// -1 per window.
	if slowed > healthy-10 {
		t.Errorf("limit after a 30 s ten-fold slowdown = %d, want <= %d", slowed, healthy-10)
	}
}

// initial and max change the limit: the policy starts warm, grows past the
// default maximum of 200, and stops at max.
func TestPolicyInitialAndMax(t *testing.T) {
	failsafesim.Register()
	for _, tc := range []struct {
		spec           string
		start, atLeast int
		atMost         int
	}{
		{"failsafe-adaptive", 20, 21, 200},
		{"failsafe-adaptive:initial=500,max=2000", 500, 510, 2000},
		{"failsafe-adaptive:initial=1000,max=1005", 1000, 1005, 1005},
	} {
		p, err := sim.ParsePolicy(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		l, src, err := p.NewLimiter(sim.PolicyEnv{Config: shed.Config{Clock: func() time.Time { return sim.Epoch() }}})
		if err != nil {
			t.Fatal(err)
		}
		// 20 s of work that takes 10 ms, always at the limit: about +1 per
		// 1 s window.
		at := []time.Duration{0, 5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second}
		got := loop(t, src.(*failsafesim.Source), l, 20*time.Second, func(time.Duration) time.Duration { return 10 * time.Millisecond }, at...)
		t.Logf("%s: limits %v", tc.spec, got)
		if hi := slices.Max(got); got[0] != tc.start || hi < tc.atLeast || hi > tc.atMost {
			t.Errorf("%s: limits %v; want start %d, highest in [%d, %d]", tc.spec, got, tc.start, tc.atLeast, tc.atMost)
		}
	}
}

// Every outcome returns failsafe-go's permit: drops (either mapping),
// ignored work and untimed successes included.
func TestOutcomesReturnPermits(t *testing.T) {
	for _, drops := range []failsafesim.Drops{failsafesim.DropsRecord, failsafesim.DropsDrop} {
		src, l := newLimiter(t, failsafesim.Config{Drops: drops})
		now := sim.Epoch()
		var ps []shed.Permit
		for range 10 {
			p, err := l.TryAcquireAt(now, shed.Request{})
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		if st := src.Stats(); st.Held != 10 {
			t.Fatalf("held %d after 10 admissions", st.Held)
		}
		now = now.Add(time.Second)
		for i := range ps {
			ps[i].ReleaseAt(now, []shed.Outcome{shed.Success, shed.Dropped, shed.Ignored}[i%3])
		}
		// The wall-clock API does not time this one: its success reaches
		// only the observer.
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			t.Fatal(err)
		}
		p.Release(shed.Success)
		if st := src.Stats(); st != (failsafesim.Stats{}) {
			t.Errorf("drops=%d: after every release: %+v, want all zero", drops, st)
		}
		if n := l.InFlight(); n != 0 {
			t.Errorf("shed in flight %d", n)
		}
	}
}

// shortSlowdown is the built-in slowdown scenario cut to 40 s.
func shortSlowdown(t *testing.T) *sim.Scenario {
	t.Helper()
	sc, err := sim.Builtin("slowdown")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration, sc.Warmup, sc.Expect = 40*time.Second, 5*time.Second, nil
	sc.Upstream.Events = []sim.UpstreamEvent{{At: 15 * time.Second, For: 10 * time.Second, Slowdown: 10}}
	sc.Trigger = nil
	return sc
}

func table(t *testing.T, rs []*sim.Result) string {
	t.Helper()
	var b bytes.Buffer
	sums := make([]*sim.Summary, len(rs))
	for i, r := range rs {
		sums[i] = &r.Summary
	}
	if err := sim.WriteSummaryCSV(&b, sums); err != nil {
		t.Fatal(err)
	}
	if err := sim.WriteSeriesCSV(&b, rs); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The policy runs in the simulator, and deterministically: failsafe-go's
// adaptive limiter draws no random numbers, and with the clock injected it
// reads no wall-clock time in its decisions. The same seed gives
// byte-identical summaries and series, whatever the number of workers.
func TestPolicyIsDeterministic(t *testing.T) {
	failsafesim.Register()
	var policies []sim.Policy
	for _, spec := range []string{"failsafe-adaptive", "failsafe-adaptive:drops=drop"} {
		p, err := sim.ParsePolicy(spec)
		if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, p)
	}
	sc := shortSlowdown(t)
	var jobs []sim.Job
	for _, p := range policies {
		jobs = append(jobs, sim.Job{Scenario: sc, Policy: p, Seed: 7})
	}
	// The same jobs twice in one batch run concurrently: limiters built
	// at different wall-clock instants must not differ.
	jobs = append(jobs, jobs...)
	rs, err := sim.RunBatch(context.Background(), jobs, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs2, err := sim.RunBatch(context.Background(), jobs[:2], 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := table(t, rs[:2]), table(t, rs[2:]), table(t, rs2)
	if a != b || a != c {
		t.Fatalf("same seed, different results:\n%s\n---\n%s\n---\n%s", a, b, c)
	}
	for _, r := range rs[:2] {
		s := r.Summary
		t.Logf("%s: goodput %.3f, mean limit %.1f", r.Policy, s.GoodputRatio, s.MeanLimit)
		if s.GoodputRatio <= 0.2 || s.MeanLimit < 1 {
			t.Errorf("%s: goodput %.3f, mean limit %.1f: the policy did not admit work", r.Policy, s.GoodputRatio, s.MeanLimit)
		}
	}
	if rs[0].Policy != "failsafe-adaptive" || rs[1].Policy != "failsafe-adaptive:drops=drop" {
		t.Errorf("policy names %q, %q", rs[0].Policy, rs[1].Policy)
	}
	if table(t, rs[:1]) == table(t, rs[1:2]) {
		t.Error("drops=drop gave the same run as drops=record: the parameter has no effect")
	}
}

func TestParsePolicy(t *testing.T) {
	failsafesim.Register()
	for _, tc := range []struct {
		spec, name, err string
	}{
		{spec: "failsafe-adaptive", name: "failsafe-adaptive"},
		{spec: "failsafe-adaptive:quantile=0.5,max=100", name: "failsafe-adaptive:max=100,quantile=0.5"},
		{spec: "failsafe-adaptive:window=2s,window_max=10s,min_samples=20,baseline=5,correlation=20,max_factor=2,min=2,initial=10", name: "failsafe-adaptive:baseline=5,correlation=20,initial=10,max_factor=2,min=2,min_samples=20,window=2s,window_max=10s"},
		{spec: "failsafe-adaptive:drops=maybe", err: "drops"},
		{spec: "failsafe-adaptive:quantile=1", err: "Quantile"},
		{spec: "failsafe-adaptive:min=0", err: "min"},
		{spec: "failsafe-adaptive:min=50,max=10", err: "parameter min: failsafesim: invalid config: MinLimit"},
		{spec: "failsafe-adaptive:max_factor=0.5", err: "MaxLimitFactor"},
		{spec: "failsafe-adaptive:window=-1s", err: "window"},
		{spec: "failsafe-adaptive:window=10s,window_max=1s", err: "WindowMax"},
		{spec: "failsafe-adaptive:bogus=1", err: "unknown parameter"},
		{spec: "failsafe-adaptive:initial=500,max=2000", name: "failsafe-adaptive:initial=500,max=2000"},
		{spec: "failsafe-adaptive:initial=500", name: "failsafe-adaptive:initial=500"}, // max raised to 500
		{spec: "failsafe-adaptive:initial=0", err: "parameter initial"},
		{spec: "failsafe-adaptive:initial=300,max=250", err: "parameter initial"},
		{spec: "failsafe-adaptive:min=50,initial=40", err: "parameter initial"},
		{spec: "failsafe-adaptive:max=100000000", err: "parameter max"},
		{spec: "failsafe-adaptive:initial=100000000", err: "parameter initial"},
		{spec: "failsafe-adaptive:max_factor=0.5", err: "parameter max_factor"},
	} {
		p, err := sim.ParsePolicy(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if p.Name() != tc.name {
			t.Errorf("%s: name %q, want %q", tc.spec, p.Name(), tc.name)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   failsafesim.Config
		field string
	}{
		{failsafesim.Config{MaxLimit: shed.MaxLimit + 1}, "MaxLimit"},
		{failsafesim.Config{MinLimit: 10, MaxLimit: 5}, "MinLimit"},
		{failsafesim.Config{MinLimit: 10, MaxLimit: 50, InitialLimit: 5}, "InitialLimit"},
		{failsafesim.Config{MaxLimitFactor: 0.9}, "MaxLimitFactor"},
		{failsafesim.Config{Quantile: 1}, "Quantile"},
		{failsafesim.Config{WindowMin: -time.Second}, "WindowMin"},
		{failsafesim.Config{WindowMin: 2 * time.Second, WindowMax: time.Second}, "WindowMax"},
		{failsafesim.Config{Drops: 7}, "Drops"},
	} {
		_, err := failsafesim.New(tc.cfg)
		if !errors.Is(err, failsafesim.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
	// Defaults: a MaxLimit above shed's is an error even when it is a
	// default raised to InitialLimit; the error then names InitialLimit.
	if _, err := failsafesim.New(failsafesim.Config{InitialLimit: shed.MaxLimit + 1}); !errors.Is(err, failsafesim.ErrInvalidConfig) || !strings.Contains(err.Error(), "InitialLimit") {
		t.Errorf("InitialLimit above shed.MaxLimit: %v", err)
	}
	// Defaults: a default MaxLimit is raised to a warm InitialLimit.
	if src, err := failsafesim.New(failsafesim.Config{InitialLimit: 500}); err != nil || src.Limit() != 500 {
		t.Errorf("InitialLimit 500 without MaxLimit: %v", err)
	}
	// Defaults: an initial limit above a small MaxLimit is brought down.
	src, err := failsafesim.New(failsafesim.Config{MaxLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Limit(); got != 5 {
		t.Errorf("limit %d, want 5", got)
	}
}

// In scenarios with classes, protected shares, queues and a cost budget
// (mixed, llm), failsafe-go's semaphore mirrors shed's in-flight work
// exactly: no admission refused by it, no release without a permit, and
// at the end as many permits held as shed has work in flight.
func TestMirrorMatchesShed(t *testing.T) {
	type replica struct {
		src *failsafesim.Source
		lim *shed.Limiter
	}
	var replicas []replica
	base, err := failsafesim.NewPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	capture := sim.PolicyFunc("capture", func(env sim.PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		l, src, err := base.NewLimiter(env)
		if err == nil {
			replicas = append(replicas, replica{src.(*failsafesim.Source), l})
		}
		return l, src, err
	})
	for _, name := range []string{"mixed", "llm"} {
		sc, err := sim.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		sc.Duration, sc.Warmup, sc.Trigger, sc.Expect = 60*time.Second, 10*time.Second, nil, nil
		replicas = nil
		if _, err := sim.RunBatch(context.Background(), []sim.Job{{Scenario: sc, Policy: capture, Seed: 3}}, 1, nil); err != nil {
			t.Fatal(err)
		}
		if len(replicas) == 0 {
			t.Fatalf("%s: no replica built", name)
		}
		for i, r := range replicas {
			st := r.src.Stats()
			if st.Refused != 0 || st.Orphans != 0 || st.Held != r.lim.InFlight() {
				t.Errorf("%s replica %d: %+v, shed in flight %d", name, i, st, r.lim.InFlight())
			}
			if r.src.MaxInflight() == 0 {
				t.Errorf("%s replica %d: failsafe-go closed no window", name, i)
			}
		}
	}
}
