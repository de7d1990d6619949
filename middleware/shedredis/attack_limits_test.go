package shedredis

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// limitStep is one call of a scenario: n tokens from (class, key) under
// limit, all at about the same instant.
type limitStep struct {
	limit shedhttp.RateLimit
	n     int
	times int
}

// runSteps plays steps against allow and returns how many calls of each
// step were admitted, and the longest Retry-After of each.
func runSteps(steps []limitStep, allow func(shedhttp.RateLimit, int) (bool, time.Duration)) (admitted []int, waits []time.Duration) {
	for _, st := range steps {
		ok, longest := 0, time.Duration(0)
		for range st.times {
			a, w := allow(st.limit, st.n)
			if a {
				ok++
			}
			longest = max(longest, w)
		}
		admitted, waits = append(admitted, ok), append(waits, longest)
	}
	return admitted, waits
}

// Two limits on one (class, key) must not share one GCRA timestamp. They
// meet when a handler charges a token quota (ExampleStore_Decide, class
// 0) on the store the middleware rate-limits class 0 with, when two
// middlewares sharing a store give a class different RateLimits, and
// during a rolling deploy that changes a limit. redis_rate keeps one TAT
// per key: a step of the token quota pushed it seconds ahead, and the
// request limit then refused the tenant for seconds, with a Retry-After
// longer than its whole window; a raised limit refused what the old one
// had spent. shedhttp.MemoryStore keeps a bucket per limit; the Redis
// store (one replica, so no share) must decide the same.
func TestSameKeyDifferentLimits(t *testing.T) {
	p := startRedis(t)
	s, err := NewStore(Config{Client: p.client(t), Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tokensPerMinute := shedhttp.RateLimit{Rate: 100_000.0 / 60, Burst: 100_000}
	requests := shedhttp.RateLimit{Rate: 10, Burst: 20}
	for _, tc := range []struct {
		name  string
		steps []limitStep
	}{
		{"token quota beside request limit", []limitStep{{tokensPerMinute, 4000, 3}, {requests, 1, 20}}},
		{"request limit beside token quota", []limitStep{{requests, 1, 20}, {tokensPerMinute, 4000, 25}}},
		{"strict beside loose", []limitStep{{shedhttp.RateLimit{Rate: 1, Burst: 1}, 1, 1}, {shedhttp.RateLimit{Rate: 100, Burst: 100}, 1, 100}}},
		{"limit raised in a deploy", []limitStep{{shedhttp.RateLimit{Rate: 1, Burst: 5}, 1, 5}, {shedhttp.RateLimit{Rate: 1000, Burst: 100}, 1, 100}}},
	} {
		mem, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		now, key := time.Now(), "tenant-"+tc.name
		want, _ := runSteps(tc.steps, func(l shedhttp.RateLimit, n int) (bool, time.Duration) {
			return mem.AllowNAt(now, 0, key, l, n)
		})
		got, waits := runSteps(tc.steps, func(l shedhttp.RateLimit, n int) (bool, time.Duration) {
			d := s.Decide(t.Context(), time.Now(), 0, key, l, n)
			if d.FellBack {
				t.Fatalf("%s: fell back (%s)", tc.name, d.Cause)
			}
			return d.Allowed, d.RetryAfter
		})
		for i, st := range tc.steps {
			// Redis's clock moves during the calls: a token or two refills.
			if got[i] < want[i] || got[i] > want[i]+2 {
				t.Errorf("%s, step %d (%d × cost %d at %+v): Redis admitted %d, the memory store %d",
					tc.name, i, st.times, st.n, st.limit, got[i], want[i])
			}
			window := time.Duration(float64(st.n) / float64(st.limit.Rate) * float64(time.Second))
			if waits[i] > window+10*time.Millisecond {
				t.Errorf("%s, step %d: Retry-After %v, longer than the limit's %v for a cost of %d",
					tc.name, i, waits[i], window, st.n)
			}
		}
	}
}

// While Redis is down, the local share must hold a key to the share's
// rate whatever mix of costs it sends. The share's bucket grows to a cost
// larger than it, and since the memory store keeps a bucket per limit,
// each such cost got its own full bucket: costs of 3, 4, ..., 8 against a
// share of 2 per second admitted six times the share.
func TestFallbackMixedCostsOverAdmit(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer dead.Close()
	const replicas = 4
	s, err := NewStore(Config{Client: dead, Replicas: replicas, Timeout: 20 * time.Millisecond, BreakerOpen: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lim := shedhttp.RateLimit{Rate: 8, Burst: 8} // share: 2/s, burst 2
	now := time.Now()
	var tokens int
	for i := range 1000 { // 10 s, every 10 ms, costs 3, 4, ..., 8 in turn
		n := 3 + i%6
		if ok, _ := s.AllowNAt(now.Add(time.Duration(i)*10*time.Millisecond), 0, "t", lim, n); ok {
			tokens += n
		}
	}
	// The share over 10 s is about 22 tokens; a whole request of up to 8
	// (the cost the bucket must grow to) may round it up.
	if tokens > 22+2*8 {
		t.Errorf("one of %d replicas admitted %d tokens in 10 s of mixed costs; its share is about 22 (the fleet's quota 88)", replicas, tokens)
	}
}
