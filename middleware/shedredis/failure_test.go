package shedredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// sharedAllowed asks stores in turn for n tokens of key (burst 10, one
// per second) and returns how many were allowed and how many fell back.
func sharedAllowed(t *testing.T, stores []*Store, key string, n int) (allowed, fellBack int) {
	t.Helper()
	lim := shedhttp.RateLimit{Rate: 1, Burst: 10}
	for i := range n {
		d := stores[i%len(stores)].Decide(t.Context(), time.Now(), 0, key, lim, 1)
		if d.Allowed {
			allowed++
		}
		if d.FellBack {
			fellBack++
		}
	}
	return allowed, fellBack
}

// sharedBurst checks that stores share one bucket: 30 requests of a fresh
// key (burst 10, 1/s) over them allow 10 (11 if a second passed). A
// decision that fell back (a call over the 5 ms budget on a loaded
// machine) spoils the count: then it tries another key, up to 5 times.
func sharedBurst(t *testing.T, stores []*Store, key string) (used string) {
	t.Helper()
	var a, fb int
	for i := range 5 {
		used = fmt.Sprintf("%s-%d", key, i)
		a, fb = sharedAllowed(t, stores, used, 30)
		if fb == 0 {
			break
		}
	}
	if a < 10 || a > 11 || fb != 0 {
		t.Errorf("%s: %d allowed (%d fell back) of 30 over %d stores, want the shared burst 10 (0)", key, a, fb, len(stores))
	}
	return used
}

// load runs workers that decide on generous quotas (every decision should
// allow) until stop is closed, and records each decision's latency.
type load struct {
	mu        sync.Mutex
	lat       []time.Duration
	decisions atomic.Int64
	refused   atomic.Int64
	fellBack  atomic.Int64
	errs      atomic.Int64
}

func (l *load) run(stores []*Store, c *Concurrency, workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	lim := shedhttp.RateLimit{Rate: 1e6, Burst: 1e6}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("tenant-%d", i%20)
				start := time.Now()
				d := s.Decide(context.Background(), start, 0, key, lim, 1)
				el := time.Since(start)
				l.mu.Lock()
				l.lat = append(l.lat, el)
				l.mu.Unlock()
				l.decisions.Add(1)
				if !d.Allowed {
					l.refused.Add(1)
				}
				if d.FellBack {
					l.fellBack.Add(1)
				}
				if c != nil && i%4 == 0 {
					lease, err := c.Acquire(context.Background(), key, 1000)
					if err != nil {
						l.errs.Add(1)
					} else {
						lease.Release()
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return &wg
}

func (l *load) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lat := l.lat
	l.lat = nil
	return lat
}

// Redis killed mid-test: every decision is still answered, on the local
// share, within the time budget; once Redis is back (empty), the stores
// and leases are shared again.
func TestRedisKilled(t *testing.T) {
	p := startRedis(t)
	// 20 ms, not the 5 of TestRedisPaused: the setup needs Redis to
	// answer within the budget, and a race-detector run on a starved
	// 2-core machine (CI builds Jaeger beside the tests) missed 5 ms often
	// enough to open the breaker before Redis was even killed.
	const budget = 20 * time.Millisecond
	stores, c1, c2 := killedFleet(t, p, budget)

	used := sharedBurst(t, stores, "before")
	// Two leases live through the outage.
	held := acquireLeases(t, c1, "held", 2)

	var ld load
	killed, down := loadThroughKill(p, &ld, stores, c1)
	p99, worst := percentile(down, 0.99), percentile(down, 1)
	t.Logf("Redis down: %d decisions, %d fell back, %d refused, %d lease errors; latency p50 %v p99 %v max %v (budget %v)",
		len(down), ld.fellBack.Load(), ld.refused.Load(), ld.errs.Load(), percentile(down, 0.5), p99, worst, budget)
	if ld.refused.Load() > 0 || ld.errs.Load() > 0 {
		t.Errorf("Redis down: %d decisions refused, %d leases failed, want none on generous quotas", ld.refused.Load(), ld.errs.Load())
	}
	// A refused connection fails at once; what the bound catches is a
	// decision that waits on Redis past its budget (go-redis retries a
	// dead server after 8 ms, then 16, 32...). 25 ms over the budget
	// leaves room for a race-detector run on a starved 2-core machine.
	if p99 > budget+25*time.Millisecond {
		t.Errorf("Redis down: p99 decision latency %v, want within the budget %v + 25 ms", p99, budget)
	}
	// The local share: burst 10 over 2 replicas is 5 on each.
	if a, fb := sharedAllowed(t, stores[:1], "down", 30); a != 5 || fb != 30 {
		t.Errorf("Redis down: one store allowed %d (%d fell back) of 30, want its share 5 (30)", a, fb)
	}
	// A key whose share this replica used while Redis was up gets no
	// fresh burst (a token refilled per second since, at most 3).
	if a, _ := sharedAllowed(t, stores[:1], used, 30); a > 3 {
		t.Errorf("Redis down: a key whose share was used got %d more, want at most the 3 refilled", a)
	}

	p.restart()
	restarted := time.Now()
	waitStoresShared(t, stores, restarted)
	t.Logf("Redis killed for %v; shared decisions again %v after its restart",
		restarted.Sub(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	sharedBurst(t, stores, "after")
	// The leases held through the outage are registered again by the
	// renewer: another replica sees the tenant at its limit of 2.
	waitHeldCounted(t, c2)
	for _, l := range held {
		l.Release()
	}
}

// killedFleet is two replicas on p, each with a Store and a Concurrency
// (closed when t ends), whose Redis calls time out after budget.
func killedFleet(t *testing.T, p *redisProc, budget time.Duration) (stores []*Store, c1, c2 *Concurrency) {
	t.Helper()
	cfg := func() Config {
		return Config{Client: p.client(t), Replicas: 2, Timeout: budget, BreakerOpen: 300 * time.Millisecond, LeaseTTL: 600 * time.Millisecond}
	}
	for range 2 {
		s, err := NewStore(cfg())
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	newConcurrency := func() *Concurrency {
		c, err := NewConcurrency(cfg())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1 = newConcurrency()
	c2 = newConcurrency()
	return stores, c1, c2
}

// loadThroughKill runs ld on stores and c, kills Redis after 300 ms, and
// returns when it did and the latencies of the 2 s that followed.
func loadThroughKill(p *redisProc, ld *load, stores []*Store, c *Concurrency) (killed time.Time, down []time.Duration) {
	stop := make(chan struct{})
	wg := ld.run(stores, c, 4, stop)
	time.Sleep(300 * time.Millisecond)
	p.kill()
	killed = time.Now()
	ld.take()
	time.Sleep(2 * time.Second)
	down = ld.take()
	close(stop)
	wg.Wait()
	return killed, down
}

// waitStoresShared polls both stores until neither falls back; it fails t
// 5 s after restarted.
func waitStoresShared(t *testing.T, stores []*Store, restarted time.Time) {
	t.Helper()
	for {
		d := stores[0].Decide(t.Context(), time.Now(), 0, "probe", shedhttp.RateLimit{Rate: 1e6, Burst: 1e6}, 1)
		d2 := stores[1].Decide(t.Context(), time.Now(), 0, "probe", shedhttp.RateLimit{Rate: 1e6, Burst: 1e6}, 1)
		if !d.FellBack && !d2.FellBack {
			return
		}
		if time.Since(restarted) > 5*time.Second {
			t.Fatal("the stores still fall back 5 s after Redis restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHeldCounted polls c until Redis refuses a lease of "held" (limit 2);
// it fails t after 2 s.
func waitHeldCounted(t *testing.T, c *Concurrency) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		l, err := c.Acquire(t.Context(), "held", 2)
		if errors.Is(err, ErrConcurrencyLimit) && !err.(*LimitError).FellBack {
			return
		}
		if l != nil {
			l.Release()
		}
		if time.Now().After(deadline) {
			t.Fatal("leases held through the outage not counted again 2 s after Redis restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Redis paused (SIGSTOP) for 5 s: calls time out within the budget, the
// breaker stops calling it, decisions fall back; p99 latency stays within
// the budget. After SIGCONT decisions are shared again.
func TestRedisPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis for 5 s")
	}
	p := startRedis(t)
	const (
		budget      = 5 * time.Millisecond
		breakerOpen = 500 * time.Millisecond
		// How long decisions must stay shared after SIGCONT: over 3 s one
		// opening of the breaker (a few calls over the budget in a row)
		// is a sixth of the decisions, against half of a 1 s window.
		afterWindow = 3 * time.Second
	)
	s, err := NewStore(Config{Client: p.client(t), Replicas: 3, Timeout: budget, BreakerOpen: breakerOpen})
	if err != nil {
		t.Fatal(err)
	}
	var ld load
	stop := make(chan struct{})
	wg := ld.run([]*Store{s}, nil, 4, stop)
	time.Sleep(time.Second)
	healthy := ld.take()
	fb0 := ld.fellBack.Load()
	p.pause()
	time.Sleep(5 * time.Second)
	paused := ld.take()
	fbPaused := ld.fellBack.Load() - fb0
	p.resume()
	resumed := time.Now()
	for s.Decide(t.Context(), time.Now(), 0, "probe", shedhttp.RateLimit{Rate: 1e6, Burst: 1e6}, 1).FellBack {
		if time.Since(resumed) > 5*time.Second {
			t.Fatal("decisions still fall back 5 s after SIGCONT")
		}
		time.Sleep(10 * time.Millisecond)
	}
	back := time.Since(resumed)
	ld.take()
	fb1 := ld.fellBack.Load()
	time.Sleep(afterWindow)
	after := ld.take()
	fbAfter := ld.fellBack.Load() - fb1
	close(stop)
	wg.Wait()
	t.Logf("healthy: %d decisions, latency p50 %v p99 %v", len(healthy), percentile(healthy, 0.5), percentile(healthy, 0.99))
	t.Logf("paused 5 s: %d decisions, %d fell back; latency p50 %v p99 %v max %v (budget %v)",
		len(paused), fbPaused, percentile(paused, 0.5), percentile(paused, 0.99), percentile(paused, 1), budget)
	t.Logf("after SIGCONT: shared again after %v; then %d decisions in %v, %d fell back, p99 %v", back.Round(time.Millisecond), len(after), afterWindow, fbAfter, percentile(after, 0.99))
	if ld.refused.Load() > 0 {
		t.Errorf("%d decisions refused on a generous quota", ld.refused.Load())
	}
	// Without the budget a call would wait out go-redis's 3 s read
	// timeout; 25 ms over it is room for a starved machine.
	if p99 := percentile(paused, 0.99); p99 > budget+25*time.Millisecond {
		t.Errorf("paused: p99 latency %v, want within the budget %v + 25 ms", p99, budget)
	}
	if fbPaused < int64(len(paused))*9/10 {
		t.Errorf("paused: only %d of %d decisions fell back", fbPaused, len(paused))
	}
	checkRecovered(t, float64(fb0)/float64(max(len(healthy), 1)), fbAfter, len(after), afterWindow)
}

// checkRecovered fails t if fellBack of the n decisions made in the
// window after Redis was shared again fell back: under half is enforced
// unless a share healthyFB of 10% or more fell back before the pause,
// more than 90% always.
//
// A rare call over the budget on a loaded machine falls back too (and a
// few in a row open the breaker). On a machine that could not keep the
// calls within the 5 ms budget even before the pause (two CPU hogs, the
// race detector, mostly GOMAXPROCS 1), stalls open the breaker again and
// again: over half, up to 70%, of the decisions after SIGCONT fell back
// in 8 stressed runs of 29, with the connection pool dialling no more
// than in the runs that passed. That is the machine, not a failed
// recovery: the "under half" is then reported, not enforced. A store
// stuck in fallback fails either way.
func checkRecovered(t *testing.T, healthyFB float64, fellBack int64, n int, window time.Duration) {
	t.Helper()
	afterFB := float64(fellBack) / float64(max(n, 1))
	switch {
	case afterFB < 0.5:
	case healthyFB >= 0.1:
		t.Logf("starved: %.0f%% of the decisions fell back before the pause: %d of %d in the %v after Redis was shared again, not enforced",
			100*healthyFB, fellBack, n, window)
	default:
		t.Errorf("%d of %d decisions fell back in the %v after Redis was shared again (%.0f%% before the pause), want under half",
			fellBack, n, window, 100*healthyFB)
	}
	if afterFB > 0.9 {
		t.Errorf("%d of %d decisions fell back in the %v after Redis was shared again: stuck in fallback", fellBack, n, window)
	}
}

// Acquires that time out on a paused Redis may still run there once it
// resumes. The lease granted on the local share is renewed and released
// like any other; a member whose acquire timed out and was then refused
// locally (an orphan) is removed by the next renewal instead of blocking
// the tenant for a whole TTL.
func TestTimedOutAcquiresCleanedUp(t *testing.T) {
	p := startRedis(t)
	const ttl = 3 * time.Second
	client := p.client(t)
	c, err := NewConcurrency(Config{Client: client, Replicas: 1, Timeout: 20 * time.Millisecond, LeaseTTL: ttl, BreakerFailures: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.pause()
	held, err := c.Acquire(t.Context(), "t", 1)
	if err != nil || !held.FellBack() {
		t.Fatalf("paused: Acquire = %v, %v; want a lease on the local share", held, err)
	}
	if _, err := c.Acquire(t.Context(), "t", 1); !errors.Is(err, ErrConcurrencyLimit) {
		t.Fatalf("paused, local share taken: Acquire error %v, want ErrConcurrencyLimit", err)
	}
	c.mu.Lock()
	orphans := len(c.orphans)
	c.mu.Unlock()
	if orphans != 1 {
		t.Errorf("%d orphans after a timed-out acquire refused locally, want 1", orphans)
	}
	p.resume()
	rkey := c.key("t")
	// Whether the timed-out scripts ran once Redis resumed depends on
	// what go-redis had sent; make sure an orphan is there to remove.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := client.ZAdd(ctx, rkey, redis.Z{Score: 1e15, Member: "phantom"}).Err(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.addOrphan(rkey, "phantom")
	c.mu.Unlock()
	members := func() []string {
		v, err := client.ZRange(ctx, rkey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	deadline := time.Now().Add(ttl/3*2 + 500*time.Millisecond)
	for {
		m := members()
		if len(m) == 1 && m[0] == held.member {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %v two renewals after it resumed, want only the held lease %s", m, held.member)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The held lease's own acquire timed out as well, and its script may
	// reach Redis after the release's removal: the release leaves its
	// member to the next renewal too. (Closed first, so that no renewal
	// takes the orphans before they are read.)
	c.Close()
	held.Release()
	if m := members(); len(m) != 0 {
		t.Errorf("after release Redis holds %v, want nothing", m)
	}
	c.mu.Lock()
	left := slices.Contains(c.orphans, orphan{rkey, held.member})
	c.mu.Unlock()
	if !left {
		t.Errorf("orphans %v after releasing a lease whose acquire timed out, want its member %s", c.orphans, held.member)
	}
}
