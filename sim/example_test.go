package sim_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

// A scenario in Go: an upstream of 50 servers slows down five-fold for 10 s
// while clients keep sending 600 requests per second.
func ExampleRun() {
	sc := &sim.Scenario{
		Name:     "brownout",
		Duration: 40 * time.Second,
		Classes:  []sim.Class{{Name: "api", Rate: 600, Timeout: time.Second}},
		Upstream: sim.Upstream{
			Capacity:    50,
			ServiceTime: sim.LogNorm(float64(40*time.Millisecond), 0.5),
			Degradation: 0.5,
			Events:      []sim.UpstreamEvent{{At: 15 * time.Second, For: 10 * time.Second, Slowdown: 5}},
		},
	}
	for _, name := range []string{"none", "static:limit=50"} {
		p, err := sim.ParsePolicy(name)
		if err != nil {
			panic(err)
		}
		r, err := sim.Run(sc, p, sim.Options{Seed: 1})
		if err != nil {
			panic(err)
		}
		s := r.Summary
		fmt.Printf("%-16s goodput %.0f%% of ideal, during the slowdown %.0f%%, recovered: %v\n",
			s.Policy, 100*s.GoodputRatio, 100*s.TriggerGoodputRatio, s.Recovery < 5)
	}
	// Output:
	// none             goodput 22% of ideal, during the slowdown 7%, recovered: false
	// static:limit=50  goodput 100% of ideal, during the slowdown 100%, recovered: true
}

// Scenarios are usually YAML files; errors name the line and the field.
func ExampleParseScenario() {
	_, err := sim.ParseScenario("my.yaml", []byte(`name: x
duration: 60s
classes:
  - name: a
    rate: 100
    timout: 1s
`))
	fmt.Println(err)
	// Output:
	// my.yaml:6:5: classes[0].timout: unknown field "timout" (known: actual, attempt_timeout, cost, key_concurrency, keys, lifo, max_wait, name, protected, queue, rate, rate_limit, retry, schedule, think, timeout, users)
}

// A policy of one's own: here shedkit's Gradient with a latency ceiling.
// RegisterPolicy would make it known to ParsePolicy and shedsim.
func ExamplePolicyFunc() {
	p := sim.PolicyFunc("gradient-ceiling", func(env sim.PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		g, err := limits.NewGradient(limits.GradientConfig{LatencyCeiling: 300 * time.Millisecond})
		if err != nil {
			return nil, nil, err
		}
		cfg := env.Config
		cfg.Source = g
		l, err := shed.New(cfg)
		return l, g, err
	})
	sc, err := sim.Builtin("steady")
	if err != nil {
		panic(err)
	}
	sc.Duration = 30 * time.Second
	r, err := sim.Run(sc, p, sim.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %.1f%% of the ideal goodput\n", r.Policy, 100*r.Summary.GoodputRatio)
	// Output:
	// gradient-ceiling: 100.0% of the ideal goodput
}

// Compare policies on built-in scenarios and print the table.
func ExampleRunBatch() {
	sc, err := sim.Builtin("spike")
	if err != nil {
		panic(err)
	}
	var jobs []sim.Job
	for _, name := range []string{"none", "static", "shedkit-aimd"} {
		p, _ := sim.ParsePolicy(name)
		jobs = append(jobs, sim.Job{Scenario: sc, Policy: p, Seed: 1})
	}
	results, err := sim.RunBatch(context.Background(), jobs, 0, nil)
	if err != nil {
		panic(err)
	}
	var sums []*sim.Summary
	for _, r := range results {
		sums = append(sums, &r.Summary)
	}
	sim.WriteTable(os.Stdout, sums)
	// Output:
	// scenario  policy        goodput  trigger  recovery   p50    p99  adm p99  trig p99   amp  wasted  rejected  limit  classes (goodput/offered)
	// spike     none            30.9%     1.2%     never  50ms  187ms   80.53s    27.65s  1.00   75.3%      0.0%      -
	// spike     static          99.6%    98.8%        0s  50ms  161ms    161ms     157ms  1.00    0.0%     19.1%    100
	// spike     shedkit-aimd    96.9%    90.4%        0s  56ms  174ms    174ms     191ms  1.00    0.0%     21.3%    118
}

// Rank the configurations of a grid by an objective.
func ExampleRank() {
	sc, _ := sim.Builtin("spike")
	sc.Duration = 50 * time.Second
	sc.Trigger = &sim.Span{At: 20 * time.Second, For: 20 * time.Second}
	sc.Classes[0].Schedule = []sim.RateChange{{At: 20 * time.Second, Factor: 3, For: 20 * time.Second}}
	grid, _ := sim.ParseGrid("limit=50,100,200")
	configs, _ := grid.Expand([]string{"static"})
	obj, _ := sim.ParseObjective("max:trigger_goodput,trigger_p99<=200ms")
	var byConfig [][]*sim.Result
	for _, p := range configs {
		r, err := sim.Run(sc, p, sim.Options{Seed: 1})
		if err != nil {
			panic(err)
		}
		byConfig = append(byConfig, []*sim.Result{r})
	}
	for i, rk := range sim.Rank(byConfig, obj) {
		fmt.Printf("%d. %-16s trigger goodput %.2f feasible=%v\n", i+1, rk.Policy, rk.Score, rk.Feasible)
	}
	// Output:
	// 1. static:limit=100 trigger goodput 0.99 feasible=true
	// 2. static:limit=50  trigger goodput 0.50 feasible=true
	// 3. static:limit=200 trigger goodput 0.68 feasible=false
}

// A per-tenant quota of 20 requests per second, with one tenant sending
// most of the traffic, on four replicas: kept in each replica's memory it
// lets the heavy tenant through at four times its quota; shared by the
// fleet (shedredis) it holds; while the store is out, each replica
// enforces its quarter of it.
func ExampleKeys() {
	none, _ := sim.ParsePolicy("none")
	for _, store := range []string{"per replica", "shared", "shared, store out"} {
		sc := &sim.Scenario{
			Name: "tenants", Duration: 40 * time.Second, Warmup: 5 * time.Second,
			Classes: []sim.Class{{Name: "api", Rate: 200,
				Keys:      &sim.Keys{Count: 100, Zipf: 1.5},
				RateLimit: &sim.RateLimit{RPS: 20, Burst: 20, Shared: store != "per replica"}}},
			Service:  sim.Service{Replicas: 4},
			Upstream: sim.Upstream{Capacity: 1000, ServiceTime: sim.Const(float64(10 * time.Millisecond))},
		}
		if store == "shared, store out" {
			sc.Service.StoreOutages = []sim.Span{{At: 5 * time.Second, For: 35 * time.Second}}
		}
		r, err := sim.Run(sc, none, sim.Options{Seed: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		c := r.Summary.Classes[0]
		fmt.Printf("%-18s heaviest tenant %3.0f%% served, the others %3.0f%%\n", store+":", 100*c.HotKeyGoodputShare, 100*c.OtherKeysGoodputShare)
	}
	// Output:
	// per replica:       heaviest tenant  95% served, the others 100%
	// shared:            heaviest tenant  24% served, the others  93%
	// shared, store out: heaviest tenant  24% served, the others  93%
}

// One tenant of fifty floods a fleet of four replicas with slow requests
// (100 ms each): ten times its share for 20 s. No limiter, so that only
// the cap acts. Without a cap every tenant's requests wait behind the
// flood past their 1 s deadline; with a cap of 8 requests in flight per
// tenant for the whole fleet, as shedredis.ConcurrencyMiddleware keeps
// it in Redis, the flooding tenant is held to about 80 requests per
// second and the others are served, also while the store is out for
// 5 s and each replica keeps to its share (8/4). A rate limit would have
// to know how slow the requests are to do as much.
func ExampleKeyConcurrency() {
	const flood = `name: flood
duration: 40s
warmup: 5s
trigger: {at: 10s, for: 20s}
classes:
  - name: api
    rate: 200
    keys: {count: 50, zipf: 1, surge: {at: 10s, for: 20s, factor: 10}}
    key_concurrency: {limit: 8, shared: true}
service: {replicas: 4}
upstream: {capacity: 10, service_time: 100ms}
`
	none, _ := sim.ParsePolicy("none")
	for _, run := range []string{"no cap", "cap of 8 per tenant", "cap, store out 5 s"} {
		sc, err := sim.ParseScenario("flood.yaml", []byte(flood))
		if err != nil {
			fmt.Println(err)
			return
		}
		switch run {
		case "no cap":
			sc.Classes[0].KeyConcurrency = nil
		case "cap, store out 5 s":
			sc.Service.StoreOutages = []sim.Span{{At: 15 * time.Second, For: 5 * time.Second}}
		}
		r, err := sim.Run(sc, none, sim.Options{Seed: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		c := r.Summary.Classes[0]
		fmt.Printf("%-20s during the flood the other tenants %3.0f%% served; the flooding one %3.0f%% over the run\n",
			run+":", 100*c.TriggerOtherKeysGoodputShare, 100*c.HotKeyGoodputShare)
	}
	// Output:
	// no cap:              during the flood the other tenants   9% served; the flooding one  10% over the run
	// cap of 8 per tenant: during the flood the other tenants 100% served; the flooding one  23% over the run
	// cap, store out 5 s:  during the flood the other tenants  99% served; the flooding one  22% over the run
}
