package shedredis

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// fleetServer is one replica: the shedkit middleware over a handler, its
// rate limits kept by a Store of the shared Redis.
func fleetServer(t *testing.T, p *redisProc, limit shedhttp.RateLimit, timeout time.Duration) (*httptest.Server, *Store) {
	t.Helper()
	store, err := NewStore(Config{Client: p.client(t), Replicas: 3, Timeout: timeout, MeterProvider: fleetMP})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := shed.New(shed.Config{Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:    lim,
			KeyHeader:  "X-Tenant",
			RateLimits: map[string]shedhttp.RateLimit{"default": limit},
			KeyStore:   store,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(srv.Close)
	return srv, store
}

// The fleet's stores report to one meter provider, as the replicas of a
// service report to one backend.
var (
	fleetReader = sdkmetric.NewManualReader()
	fleetMP     = sdkmetric.NewMeterProvider(sdkmetric.WithReader(fleetReader))
)

type tally struct{ sent, ok, limited, failed atomic.Int64 }

// offer sends rate requests per second of tenant, round robin over urls,
// from start until end, each on its own goroutine (an open loop: the
// server's latency does not slow the offered rate).
func offer(client *http.Client, urls []string, tenant string, rate float64, start, end time.Time, n *tally, wg *sync.WaitGroup) {
	defer wg.Done()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(end) {
			return
		}
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func(u string) {
			defer wg.Done()
			n.sent.Add(1)
			req, _ := http.NewRequest("GET", u, nil)
			req.Header.Set("X-Tenant", tenant)
			resp, err := client.Do(req)
			if err != nil {
				n.failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				n.ok.Add(1)
			case http.StatusTooManyRequests:
				n.limited.Add(1)
			default:
				n.failed.Add(1)
			}
		}(urls[i%len(urls)])
	}
}

// Three replicas share a tenant quota of 200 requests/s through Redis: a
// noisy tenant offering 600/s over the three gets 200/s in all, and ten
// quiet tenants at 20/s each are all admitted.
func TestFleetQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s of loopback traffic")
	}
	p := startRedis(t)
	limit := shedhttp.RateLimit{Rate: 200, Burst: 20}
	// A budget generous enough that the shared accounting is measured,
	// not the fallback: on a loaded 2-core machine under the race
	// detector a loopback call took up to 477 ms (the fallback has tests
	// of its own: TestRedisKilled, TestRedisPaused).
	const budget = time.Second
	var urls []string
	var stores []*Store
	for range 3 {
		srv, st := fleetServer(t, p, limit, budget)
		urls = append(urls, srv.URL)
		stores = append(stores, st)
	}
	const d = 10 * time.Second
	noisy, quiet := offerFleet(urls, d)

	var fallbacks uint64
	for _, st := range stores {
		fallbacks += st.Stats().FellBack
	}
	rate := float64(noisy.ok.Load()) / d.Seconds()
	t.Logf("noisy tenant: offered %d, admitted %d (%.1f/s, quota 200/s + burst 20), limited %d, failed %d",
		noisy.sent.Load(), noisy.ok.Load(), rate, noisy.limited.Load(), noisy.failed.Load())
	// A decision falls back only when its Redis call took over the 1 s
	// budget: the machine was starved, and the replicas then also count
	// on their local shares, which add to the shared quota (278/s, a
	// Redis call of 3.3 s and 7 client timeouts in a run of make test's
	// kind on a loaded machine). The ± 5% and the absence of failed
	// requests measure the shared accounting and are enforced when it is
	// what decided; that the noisy tenant is held near its quota (at most
	// twice, against the 600/s it offers) and that the quiet tenants'
	// answered requests are admitted (99%, half when starved) is enforced
	// always.
	starved := fallbacks > 0
	enforce := func(format string, args ...any) {
		t.Helper()
		if starved {
			t.Logf("starved (%d decisions fell back), not enforced: "+format, append([]any{fallbacks}, args...)...)
			return
		}
		t.Errorf(format, args...)
	}
	if rate < 190 || rate > 210 {
		enforce("noisy tenant admitted %.1f/s, want 200/s ± 5%%", rate)
	}
	if rate > 2*200 {
		t.Errorf("noisy tenant admitted %.1f/s, over twice its quota of 200/s", rate)
	}
	if noisy.failed.Load() > 0 {
		enforce("%d noisy requests failed", noisy.failed.Load())
	}
	minShare := checkQuietTenants(t, quiet, enforce)
	logRedisCalls(t, budget)
	t.Logf("quiet tenants: lowest admitted share %.2f%%; decisions that fell back: %d of the 3 stores' decisions", 100*minShare, fallbacks)
}

// offerFleet sends, for d, a noisy tenant's 600 requests/s and ten quiet
// tenants' 20/s each, spread over urls, and returns their tallies.
func offerFleet(urls []string, d time.Duration) (noisy *tally, quiet []*tally) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	start := time.Now().Add(100 * time.Millisecond)
	end := start.Add(d)
	var wg sync.WaitGroup
	noisy, quiet = new(tally), make([]*tally, 10)
	wg.Add(1)
	go offer(client, urls, "noisy", 600, start, end, noisy, &wg)
	for i := range quiet {
		quiet[i] = new(tally)
		wg.Add(1)
		go offer(client, urls, fmt.Sprintf("quiet-%d", i), 20, start, end, quiet[i], &wg)
	}
	wg.Wait()
	return noisy, quiet
}

// checkQuietTenants fails t if a quiet tenant had under 90% of its
// answered requests admitted, and, through enforce, under 99% or any
// failed; it returns the lowest admitted share.
func checkQuietTenants(t *testing.T, quiet []*tally, enforce func(string, ...any)) float64 {
	t.Helper()
	minShare := 1.0
	for i, q := range quiet {
		answered := q.sent.Load() - q.failed.Load()
		share := float64(q.ok.Load()) / float64(max(answered, 1))
		minShare = min(minShare, share)
		switch {
		case share < 0.5:
			t.Errorf("quiet tenant %d: %d of %d answered requests admitted", i, q.ok.Load(), answered)
		case share < 0.99:
			// Starved, the open loop sends what it fell behind on at once,
			// beyond a replica's local share of the burst: with Redis
			// calls of seconds, 73% of a quiet tenant's answered requests
			// were admitted in one run under -race beside a fuzzer.
			enforce("quiet tenant %d: %d of %d answered requests admitted, want 99%%", i, q.ok.Load(), answered)
		}
		if q.failed.Load() > 0 {
			enforce("quiet tenant %d: %d of %d requests failed", i, q.failed.Load(), q.sent.Load())
		}
	}
	return minShare
}

// logRedisCalls logs how many Redis calls the fleet's stores made, and
// the slowest, from their MetricDuration histogram.
func logRedisCalls(t *testing.T, budget time.Duration) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := fleetReader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == MetricDuration {
				for _, p := range d.DataPoints {
					if mx, ok := p.Max.Value(); ok {
						t.Logf("Redis calls: %d, slowest %.1f ms (budget %v)", p.Count, mx*1000, budget)
					}
				}
			}
		}
	}
}

// A tenant limited to 10 concurrent requests never has more than 10 in
// flight across three replicas; the leases of a replica that stops
// renewing (it crashed) stop counting within the TTL, while those of a
// live replica are renewed past it.
func TestFleetConcurrency(t *testing.T) {
	p := startRedis(t)
	const ttl = time.Second
	cs := fleetConcurrency(t, p, ttl)

	n := runLeaseLoad(t, cs)
	t.Logf("30 workers on 3 replicas, limit 10: admitted %d, refused %d, fell back %d, max in flight %d (sampled %d)",
		n.admitted.Load(), n.refused.Load(), n.fellBack.Load(), n.maxSeen.Load(), n.maxSampled.Load())
	// A lease falls back to the replica's local share only when its
	// Redis call took over the 250 ms budget: the machine was starved (a
	// Redis call of 12.8 s in one run beside a fuzzer), and the local
	// shares then add to the shared count. The bound measures the shared
	// count, so it is enforced when that is what decided, as in
	// TestFleetQuota.
	if fell := n.fellBack.Load(); 10*fell > n.admitted.Load() {
		t.Errorf("%d of %d leases fell back with Redis up: the shared count barely decided", fell, n.admitted.Load())
	} else if fell > 0 {
		t.Logf("starved (%d leases fell back with Redis up), not enforced: max in flight %d (sampled %d), want <= 10",
			fell, n.maxSeen.Load(), n.maxSampled.Load())
	} else if n.maxSeen.Load() > 10 || n.maxSampled.Load() > 10 {
		t.Errorf("max in flight %d (sampled %d), want <= 10", n.maxSeen.Load(), n.maxSampled.Load())
	}
	if n.admitted.Load() < 100 {
		t.Errorf("only %d leases admitted in 3 s", n.admitted.Load())
	}

	// A live replica's leases outlive the TTL: they are renewed.
	held := acquireLeases(t, cs[2], "renewed", 10)
	// A "killed" replica: it takes 10 leases, then stops renewing them
	// without releasing them.
	acquireLeases(t, cs[0], "crashed", 10)
	killed := time.Now()
	cs[0].Close()
	if _, err := cs[1].Acquire(t.Context(), "crashed", 10); err == nil {
		t.Fatal("an 11th lease granted while the crashed replica's leases are live")
	}
	freed := waitCrashedFreed(t, cs[1], killed, ttl)
	t.Logf("crashed replica's leases stopped counting %v after it stopped renewing (TTL %v)", freed.Round(time.Millisecond), ttl)
	if freed > ttl+200*time.Millisecond {
		t.Errorf("leases freed after %v, want within the TTL %v", freed, ttl)
	}
	if since := time.Since(killed); since < ttl {
		time.Sleep(ttl - since + 300*time.Millisecond)
	}
	checkRenewed(t, cs[1], held)
}

// fleetConcurrency is three replicas' Concurrency on p, closed when t ends.
func fleetConcurrency(t *testing.T, p *redisProc, ttl time.Duration) []*Concurrency {
	t.Helper()
	var cs []*Concurrency
	for range 3 {
		// A generous budget (see TestFleetQuota): this measures the
		// shared count, not the fallback.
		c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 3, Timeout: 250 * time.Millisecond, LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// leaseLoad is what workers holding leases of one tenant saw.
type leaseLoad struct {
	inFlight, maxSeen, maxSampled, admitted, refused, fellBack atomic.Int64
}

// runLeaseLoad runs 30 workers, round robin over cs, for 3 s, with a
// sampler of the in-flight count beside them.
func runLeaseLoad(t *testing.T, cs []*Concurrency) *leaseLoad {
	n := new(leaseLoad)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		n.sample(ctx)
	}()
	for w := range 30 {
		wg.Add(1)
		go func(c *Concurrency, seed int) {
			defer wg.Done()
			n.work(ctx, c, seed)
		}(cs[w%3], w)
	}
	wg.Wait()
	<-sampler
	return n
}

// sample records the highest in-flight count it sees until ctx is done: a
// second witness beside the workers' own maximum.
func (n *leaseLoad) sample(ctx context.Context) {
	for ctx.Err() == nil {
		if v := n.inFlight.Load(); v > n.maxSampled.Load() {
			n.maxSampled.Store(v)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// work acquires leases of "tenant" (limit 10) on c until ctx is done,
// holding each for 1 to 10 ms.
func (n *leaseLoad) work(ctx context.Context, c *Concurrency, seed int) {
	for i := 0; ctx.Err() == nil; i++ {
		l, err := c.Acquire(ctx, "tenant", 10)
		if err != nil {
			n.refused.Add(1)
			time.Sleep(2 * time.Millisecond)
			continue
		}
		if l.FellBack() {
			n.fellBack.Add(1)
		}
		n.admitted.Add(1)
		v := n.inFlight.Add(1)
		for m := n.maxSeen.Load(); v > m && !n.maxSeen.CompareAndSwap(m, v); m = n.maxSeen.Load() {
		}
		time.Sleep(time.Duration(1+(seed+i)%10) * time.Millisecond)
		n.inFlight.Add(-1)
		l.Release()
	}
}

// acquireLeases takes the tenant's whole limit of n leases of key on c.
func acquireLeases(t *testing.T, c *Concurrency, key string, n int) []*Lease {
	t.Helper()
	held := make([]*Lease, 0, n)
	for range n {
		l, err := c.Acquire(t.Context(), key, n)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}

// waitCrashedFreed polls c until a lease of "crashed" is granted again and
// returns how long after killed that was; it fails t after 3 TTLs.
func waitCrashedFreed(t *testing.T, c *Concurrency, killed time.Time, ttl time.Duration) time.Duration {
	t.Helper()
	for {
		l, err := c.Acquire(t.Context(), "crashed", 10)
		if err == nil {
			freed := time.Since(killed)
			l.Release()
			return freed
		}
		if time.Since(killed) > 3*ttl {
			t.Fatal("the crashed replica's leases still count after 3 TTLs")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkRenewed checks, past the TTL, that the live replica's held leases
// of "renewed" still fill the limit on c, and no longer once released.
func checkRenewed(t *testing.T, c *Concurrency, held []*Lease) {
	t.Helper()
	if _, err := c.Acquire(t.Context(), "renewed", 10); err == nil {
		t.Error("the live replica's leases expired: they were not renewed")
	}
	for _, l := range held {
		l.Release()
		l.Release() // twice is harmless
	}
	l, err := c.Acquire(t.Context(), "renewed", 10)
	if err != nil {
		t.Errorf("after release: %v", err)
	} else {
		l.Release()
	}
}

// The HTTP middleware answers 429 with Retry-After when the tenant is at
// its fleet limit, and releases the lease when the handler returns.
func TestConcurrencyMiddleware(t *testing.T) {
	p := startRedis(t)
	c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 2, Timeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mw, err := ConcurrencyMiddleware(MiddlewareConfig{
		Concurrency: c,
		Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Limit:       1,
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-unblock
		}
	}))
	var seq atomic.Int64
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	req := func(path, tenant string) *httptest.ResponseRecorder {
		ctx, span := tp.Tracer("test").Start(context.Background(), path+" "+tenant+" "+strconv.Itoa(int(seq.Add(1))))
		defer span.End()
		r := httptest.NewRequest("GET", path, nil).WithContext(ctx)
		r.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan struct{})
	go func() { defer close(done); req("/block", "a") }()
	<-entered
	w := req("/", "a")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("Shedkit-No-Retry") != "overloaded" {
		t.Errorf("at the limit: %d, Retry-After %q, Shedkit-No-Retry %q; want 429, 1, overloaded", w.Code, w.Header().Get("Retry-After"), w.Header().Get("Shedkit-No-Retry"))
	}
	if w := req("/", "b"); w.Code != http.StatusOK {
		t.Errorf("another tenant: %d, want 200", w.Code)
	}
	if w := req("/", ""); w.Code != http.StatusOK {
		t.Errorf("no tenant: %d, want 200", w.Code)
	}
	close(unblock)
	<-done
	if w := req("/", "a"); w.Code != http.StatusOK {
		t.Errorf("after the blocking request ended: %d, want 200", w.Code)
	}
	attrs := map[string]map[string]string{}
	for _, sp := range spans.Ended() {
		m := map[string]string{}
		for _, kv := range sp.Attributes() {
			m[string(kv.Key)] = kv.Value.String()
		}
		attrs[sp.Name()] = m
	}
	if got := attrs["/ a 2"]; got[shedhttp.AttrDecision] != shedhttp.DecisionRejected || got[shedhttp.AttrReason] != ReasonConcurrencyLimited || got[AttrFallback] != "false" {
		t.Errorf("span of the rejected request: %v", got)
	}
	if got := attrs["/ b 3"]; got[AttrFallback] != "false" || got[shedhttp.AttrDecision] != "" {
		t.Errorf("span of an admitted request: %v", got)
	}
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
