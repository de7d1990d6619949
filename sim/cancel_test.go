package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// cancelScenario is one replica in front of one upstream server whose
// jobs take 1 s: a user of class "short" (300 ms deadline) and, when two,
// one of class "long" (3 s), both sending their first request at 1 ms,
// "short" first, and the next 1 ms after each answer.
func cancelScenario(two bool, d Discipline) *Scenario {
	think := Const(float64(time.Millisecond))
	sc := &Scenario{
		Name: "cancel", Duration: 2500 * time.Millisecond, Interval: 500 * time.Millisecond,
		Classes:  []Class{{Name: "short", Users: 1, Think: think, Timeout: 300 * time.Millisecond}},
		Service:  Service{StaticLimit: 10},
		Upstream: Upstream{Capacity: 1, Discipline: d, ServiceTime: Const(float64(time.Second))},
	}
	if two {
		sc.Classes = append(sc.Classes, Class{Name: "long", Users: 1, Think: think, Timeout: 3 * time.Second})
	}
	return sc
}

// cancelRun runs sc under "static" and returns the instants at which the
// replica's limiter's in-flight fell, the instants and classes of the
// jobs whose work was done, and the limiter's releases by outcome. It
// checks after every event that the recorder counts the jobs present.
func cancelRun(t *testing.T, sc *Scenario) (falls []time.Duration, jobs []string, released [3]uint64) {
	t.Helper()
	e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "static"), 1)
	if err != nil {
		t.Fatal(err)
	}
	last := 0
	e.afterEvent = func() {
		if n := e.replicas[0].lim.InFlight(); n < last {
			falls = append(falls, time.Duration(e.now))
			last = n
		} else {
			last = n
		}
		if p := e.ups[0].present(); p != e.rec.upPresent {
			t.Fatalf("at %v: %d jobs present, the recorder counts %d", time.Duration(e.now), p, e.rec.upPresent)
		}
	}
	e.onJob = func(j *task) {
		jobs = append(jobs, time.Duration(e.now).String()+" "+e.sc.Classes[j.class].Name)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	cs := e.replicas[0].lim.Snapshot().Classes[0]
	copy(released[:], cs.Released[:])
	return falls, jobs, released
}

// TestCancelAtDeadline: a replica that passes the request's context to its
// upstream call stops waiting at the 300 ms deadline it sees (301 ms: the
// request arrived at 1 ms) and releases its permit then, as Dropped; one
// that waits releases it when the upstream answers, at 1001 ms. The
// upstream finishes the abandoned job anyway, at 1001 ms, and its late
// answer changes nothing.
func TestCancelAtDeadline(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		sc := cancelScenario(false, FIFO)
		sc.Service.CancelAtDeadline = cancel
		falls, jobs, released := cancelRun(t, sc)
		want := 1001 * time.Millisecond
		if cancel {
			want = 301 * time.Millisecond
		}
		if len(falls) == 0 || falls[0] != want {
			t.Errorf("cancel %v: in-flight fell at %v, want first at %v", cancel, falls, want)
		}
		if len(jobs) == 0 || jobs[0] != "1.001s short" {
			t.Errorf("cancel %v: jobs done %v, want the first at 1.001s", cancel, jobs)
		}
		if released[shed.Success] != 0 || released[shed.Dropped] == 0 {
			t.Errorf("cancel %v: releases %v, want all Dropped (each answer comes past the deadline)", cancel, released)
		}
	}
}

// TestCancelAtDeadlineRetry: a replica's retry after its timeout at the
// deadline does not start (no time is left), whatever its retry policy.
func TestCancelAtDeadlineRetry(t *testing.T) {
	sc := cancelScenario(false, FIFO)
	sc.Service.CancelAtDeadline = true
	sc.Service.Retry = Retry{MaxAttempts: 3}
	r, err := Run(sc, mustPolicy(t, "static"), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Summary.ServiceRetries; n != 0 {
		t.Errorf("%d service retries past the deadline", n)
	}
}

// TestUpstreamAbandon: with upstream.abandon, the upstream stops the job of
// the "short" request when the replica stops waiting at 301 ms: the
// "long" job waiting behind it starts then and is done at 1301 ms; without
// it the server finishes the abandoned job at 1001 ms and the "long" job
// waits until then. Under processor sharing the "long" job has half the
// server while a "short" job is present (300 ms of each 301, the short
// user sending again 1 ms after each timeout) and all of it for the 1 ms
// between: 150 + 1 ms of work per 301 ms, so 1 s of work is done at
// 1995 ms, rounded up to the nanosecond. Without abandon the short jobs
// pile up on the server and none is done by the end, at 2.5 s.
func TestUpstreamAbandon(t *testing.T) {
	cases := []struct {
		d       Discipline
		abandon bool
		want    string
	}{
		{FIFO, false, "1.001s short"},
		{FIFO, true, "1.301s long"},
		{PS, false, ""},
		{PS, true, "1.995000001s long"},
	}
	for _, c := range cases {
		sc := cancelScenario(true, c.d)
		sc.Service.CancelAtDeadline = true
		sc.Upstream.Abandon = c.abandon
		_, jobs, _ := cancelRun(t, sc)
		if first(jobs) != c.want {
			t.Errorf("%v abandon %v: jobs done %v, want the first %q", c.d, c.abandon, jobs, c.want)
		}
	}
}

// first returns the first of jobs, "" for none.
func first(jobs []string) string {
	if len(jobs) == 0 {
		return ""
	}
	return jobs[0]
}

// TestUpstreamAbandonTimeout: service.timeout stops the wait as well, and
// the upstream then abandons the job in the same way.
func TestUpstreamAbandonTimeout(t *testing.T) {
	for _, abandon := range []bool{false, true} {
		sc := cancelScenario(true, FIFO)
		sc.Service.Timeout = 100 * time.Millisecond
		sc.Upstream.Abandon = abandon
		_, jobs, _ := cancelRun(t, sc)
		want := "1.001s short"
		if abandon {
			// The short job stops at 101 ms, the long one then starts,
			// stops at 201 ms, and so on: no job finishes its second.
			want = ""
		}
		if first(jobs) != want {
			t.Errorf("abandon %v: jobs done %v, want the first %q", abandon, jobs, want)
		}
	}
}

// deadlineModelScenario sets many features at once: classes with
// retries, budgets and queues, a gateway, replicas with a timeout and
// retries, an upstream that degrades, refuses past MaxInFlight and goes
// through a slowdown and errors; under discipline d.
func deadlineModelScenario(d Discipline) *Scenario {
	return &Scenario{
		Name: "models", Duration: 20 * time.Second, Warmup: 2 * time.Second, Trigger: &Span{At: 8 * time.Second, For: 5 * time.Second},
		Classes: []Class{
			{Name: "a", Rate: 300, Timeout: 400 * time.Millisecond, Cost: Unif(1, 3),
				Retry: Retry{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Budget: &Budget{}},
				Queue: 20, MaxWait: 50 * time.Millisecond},
			{Name: "b", Users: 60, Think: Exp(float64(50 * time.Millisecond)), Timeout: 2 * time.Second, Protected: 0.3},
		},
		Gateway: &Gateway{Timeout: time.Second, Retry: Retry{MaxAttempts: 2}},
		Service: Service{Replicas: 3, Balancer: PowerOfTwo, Timeout: 700 * time.Millisecond,
			Retry: Retry{MaxAttempts: 2, Backoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}},
		Upstream: Upstream{Capacity: 8, Discipline: d, MaxInFlight: 60, ServiceTime: LogNorm(float64(40*time.Millisecond), 0.8),
			Degradation: 0.3, Events: []UpstreamEvent{{At: 8 * time.Second, For: 5 * time.Second, Slowdown: 3, Errors: 0.05}}},
	}
}

// TestDeadlineModelDefaultUnchanged: without CancelAtDeadline and Abandon
// a run is what it was before they existed, byte for byte (the summaries
// taken at commit 78cc8ae, before the fields existed; FIFO Gradient's
// again whenever the limit changed, not the engine).
func TestDeadlineModelDefaultUnchanged(t *testing.T) {
	want := map[string]string{
		"FIFO static":           "{Scenario:models Policy:static Seed:3 Logical:23034 Goodput:6101 Timeouts:92 Failed:16845 Attempts:42821 Admitted:6200 Rejected:36623 RateLimited:0 ClientRetries:758 GatewayRetries:19029 ServiceRetries:21 Jobs:6221 Ideal:6391.157338520945 GoodputRatio:0.954600188486661 TriggerGoodputRatio:1.0058252680708692 Throughput:338.94444444444446 HealthyThroughput:419.1666666666667 Recovery:0 P50:0.072351744 P99:0.348127232 AdmittedP50:0.06815744 AdmittedP99:0.415236096 HealthyP99:0.281018368 TriggerP99:0.729808896 Amplification:1.8590344707823219 UpstreamAmplification:0.27007901363202225 Wasted:0.09871820634619514 RejectedShare:0.8552579341911679 MeanLimit:24 MeanInFlight:23.867137063333335 UpstreamMeanJobs:24.01071011827778 UpstreamThroughput:345.6111111111111 UpstreamSojourn:0.0694106860199325 Classes:[{Name:a Offered:5450 Goodput:4420 Timeouts:88 Failed:944 RateLimited:0 GoodputShare:0.8110091743119267 TriggerGoodputShare:0.32623626373626374 P50:0.082837504 P99:0.348127232 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0} {Name:b Offered:17584 Goodput:1681 Timeouts:4 Failed:15901 RateLimited:0 GoodputShare:0.09559827115559599 TriggerGoodputShare:0.037562437562437566 P50:0.046661632 P99:0.35651584 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0}]}",
		"FIFO shedkit-gradient": "{Scenario:models Policy:shedkit-gradient Seed:3 Logical:20546 Goodput:4579 Timeouts:405 Failed:15611 Attempts:40415 Admitted:4961 Rejected:35453 RateLimited:0 ClientRetries:1191 GatewayRetries:18678 ServiceRetries:10 Jobs:5061 Ideal:6391.157338520945 GoodputRatio:0.7164586564629438 TriggerGoodputRatio:0.6523451964863858 Throughput:254.38888888888889 HealthyThroughput:302.5 Recovery:1 P50:0.174063616 P99:0.507510784 AdmittedP50:0.153092096 AdmittedP99:0.729808896 HealthyP99:0.696254464 TriggerP99:0.746586112 Amplification:1.9670495473571499 UpstreamAmplification:0.2463253187968461 Wasted:0.26628996686709505 RejectedShare:0.8772238030434245 MeanLimit:45.5 MeanInFlight:45.614629799944446 UpstreamMeanJobs:47.40983465722222 UpstreamThroughput:281.1666666666667 UpstreamSojourn:0.1756318184682869 Classes:[{Name:a Offered:5450 Goodput:3184 Timeouts:382 Failed:1909 RateLimited:0 GoodputShare:0.5842201834862385 TriggerGoodputShare:0.1978021978021978 P50:0.186646528 P99:0.381681664 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0} {Name:b Offered:15096 Goodput:1395 Timeouts:23 Failed:13702 RateLimited:0 GoodputShare:0.09240858505564388 TriggerGoodputShare:0.032613688562241616 P50:0.128974848 P99:0.645922816 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0}]}",
		"PS static":             "{Scenario:models Policy:static Seed:3 Logical:23039 Goodput:6095 Timeouts:88 Failed:16852 Attempts:43044 Admitted:6188 Rejected:36851 RateLimited:0 ClientRetries:812 GatewayRetries:19193 ServiceRetries:27 Jobs:6215 Ideal:6391.157338520945 GoodputRatio:0.9536613913827566 TriggerGoodputRatio:1.0027911043662814 Throughput:338.6111111111111 HealthyThroughput:419.6666666666667 Recovery:0 P50:0.072351744 P99:0.348127232 AdmittedP50:0.070254592 AdmittedP99:0.432013312 HealthyP99:0.281018368 TriggerP99:0.71303168 Amplification:1.8683102565215504 UpstreamAmplification:0.26975997222101655 Wasted:0.09565005199172161 RejectedShare:0.8561239661741474 MeanLimit:24 MeanInFlight:23.85862305322222 UpstreamMeanJobs:24.02721781877778 UpstreamThroughput:345.27777777777777 UpstreamSojourn:0.06952265676331457 Classes:[{Name:a Offered:5450 Goodput:4415 Timeouts:86 Failed:945 RateLimited:0 GoodputShare:0.810091743119266 TriggerGoodputShare:0.3289835164835165 P50:0.082837504 P99:0.348127232 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0} {Name:b Offered:17589 Goodput:1680 Timeouts:2 Failed:15907 RateLimited:0 GoodputShare:0.09551424185570527 TriggerGoodputShare:0.03634911124425804 P50:0.047710208 P99:0.364904448 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0}]}",
		"PS shedkit-gradient":   "{Scenario:models Policy:shedkit-gradient Seed:3 Logical:22126 Goodput:4703 Timeouts:327 Failed:17155 Attempts:43409 Admitted:5005 Rejected:38411 RateLimited:0 ClientRetries:1174 GatewayRetries:20109 ServiceRetries:10 Jobs:5125 Ideal:6391.157338520945 GoodputRatio:0.7358604632769654 TriggerGoodputRatio:0.6766185061230885 Throughput:261.27777777777777 HealthyThroughput:317.1666666666667 Recovery:0 P50:0.126877696 P99:0.465567744 AdmittedP50:0.103809024 AdmittedP99:0.746586112 HealthyP99:0.746586112 TriggerP99:0.746586112 Amplification:1.9619000271174185 UpstreamAmplification:0.23162794901925338 Wasted:0.28064308545624955 RejectedShare:0.8848625860996567 MeanLimit:33.44444444444444 MeanInFlight:33.757503505833334 UpstreamMeanJobs:36.51702614672222 UpstreamThroughput:284.72222222222223 UpstreamSojourn:0.13956774215336584 Classes:[{Name:a Offered:5450 Goodput:3473 Timeouts:316 Failed:1695 RateLimited:0 GoodputShare:0.6372477064220183 TriggerGoodputShare:0.21978021978021978 P50:0.13631488 P99:0.381681664 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0} {Name:b Offered:16676 Goodput:1230 Timeouts:11 Failed:15460 RateLimited:0 GoodputShare:0.07375869513072679 TriggerGoodputShare:0.025735294117647058 P50:0.0786432 P99:0.612368384 Keys:1 HotKeyOffered:0 HotKeyGoodput:0 HotKeyGoodputShare:0 OtherKeysGoodputShare:0 TriggerOtherKeysGoodputShare:0}]}",
	}
	for _, d := range []Discipline{FIFO, PS} {
		for _, p := range []string{"static", "shedkit-gradient"} {
			r, err := Run(deadlineModelScenario(d), mustPolicy(t, p), Options{Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			k := strings.ToUpper(d.String()) + " " + p
			if got := fmt.Sprintf("%+v", r.Summary); got != want[k] {
				t.Errorf("%s: summary changed:\n got %s\nwant %s", k, got, want[k])
			}
		}
	}
}

// TestDeadlineModelsInvariants runs the busy scenario under both
// disciplines and both new models and checks after every event that the
// recorder counts the jobs present, that no upstream has more jobs in
// service than servers nor a negative count of abandoned jobs waiting,
// that each processor-sharing heap is a heap, and that each limiter holds
// the permits its replica counts. The new models change the run.
func TestDeadlineModelsInvariants(t *testing.T) {
	for _, d := range []Discipline{FIFO, PS} {
		base, err := Run(deadlineModelScenario(d), mustPolicy(t, "shedkit-gradient"), Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []DeadlineModel{DeadlineWait, DeadlineCancel, DeadlineAbandon} {
			sc := deadlineModelScenario(d)
			m.Apply(sc)
			e, err := newEngine(mustNormalize(t, sc), mustPolicy(t, "shedkit-gradient"), 3)
			if err != nil {
				t.Fatal(err)
			}
			e.afterEvent = func() {
				if msg := deadlineInvariants(e); msg != "" {
					t.Fatalf("%v %v at %v: %s", d, m, time.Duration(e.now), msg)
				}
			}
			if err := e.run(); err != nil {
				t.Fatal(err)
			}
			s := e.result("shedkit-gradient", 3).Summary
			if changed := s.Goodput != base.Summary.Goodput || s.Wasted != base.Summary.Wasted; changed != (m != DeadlineWait) {
				t.Errorf("%v %v: the same goodput and waste as the default: %d, %v", d, m, s.Goodput, s.Wasted)
			}
		}
	}
}

// deadlineInvariants returns what is wrong with e's upstreams and
// replicas, "" for nothing.
func deadlineInvariants(e *engine) string {
	present := 0
	for _, u := range e.ups {
		present += u.present()
		if u.busy > u.servers || u.gone < 0 || u.gone > u.queue.n {
			return fmt.Sprintf("busy %d of %d servers, %d gone of %d queued", u.busy, u.servers, u.gone, u.queue.n)
		}
		a := u.ps.jobs.a
		for i := 1; i < len(a); i++ {
			if a[(i-1)/2].finish > a[i].finish {
				return fmt.Sprintf("PS heap out of order at %d", i)
			}
		}
	}
	if present != e.rec.upPresent {
		return fmt.Sprintf("%d jobs present, the recorder counts %d", present, e.rec.upPresent)
	}
	held := make([]int, len(e.replicas))
	for _, t := range e.tasks {
		if t.kind == layerService && (t.state == stActive || t.state == stBackoff) && t.permit.Valid() {
			held[t.replica]++
		}
	}
	for i := range e.replicas {
		if r := &e.replicas[i]; held[i] != r.inFlight {
			return fmt.Sprintf("replica %d: its requests hold %d permits, it counts %d", i, held[i], r.inFlight)
		}
	}
	return ""
}

// TestClosedLimitDrainsWorkNobodyWaitsFor: two instances of the healthy
// family (seed 1) whose replicas stop waiting at the deadline while a
// thrashing upstream keeps the work. Past its capacity, its backlog of
// work nobody waits for grows faster than it completes it, even at a
// limit of one: no limit at all serves nothing, and shedkit's limits did
// the same until a limit at its floor could close. A closed limit admits
// a probe per window, the backlog drains, and the first success reopens
// it.
func TestClosedLimitDrainsWorkNobodyWaitsFor(t *testing.T) {
	res, err := RunFamily(FamilyRun{Family: "healthy", Seed: 1, Only: []int{130, 166}, DeadlineModel: DeadlineCancel,
		Policies: []string{"none", "static", "shedkit-gradient", "shedkit-aimd"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range res.Instances {
		if none := res.Summaries[i][0].GoodputRatio; none > 0.01 {
			t.Fatalf("#%d: no limit served %.1f%% of the ideal; the instance no longer collapses, and proves nothing", in.Index, 100*none)
		}
		for p := 2; p < 4; p++ {
			if rel := res.Relative(p)[i]; rel < 0.25 {
				t.Errorf("#%d, %s: %.1f%% of the reference's goodput, want >= 25%% (it served nothing when it could not close)",
					in.Index, res.Policies[p], 100*rel)
			}
		}
	}
}
