package shedredis

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// A short key spelled like the digest of a long key must not share the long
// key's bucket: a tenant that names itself "sha256:<digest>" would spend
// another tenant's quota (or use it).
func TestDigestKeyCollision(t *testing.T) {
	p := startRedis(t)
	s, err := NewStore(Config{Client: p.client(t), Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("victim-", 40)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:16])
	lim := shedhttp.RateLimit{Rate: 0.001, Burst: 1}
	now := time.Now()
	if d := s.Decide(t.Context(), now, 0, forged, lim, 1); !d.Allowed || d.FellBack {
		t.Fatalf("forged key's first request: %+v", d)
	}
	if d := s.Decide(t.Context(), now, 0, long, lim, 1); !d.Allowed {
		t.Fatalf("the long key's first request was refused after a forged key spent its bucket: %+v", d)
	}
	c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), forged, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l2, err := c.Acquire(t.Context(), long, 1); err != nil {
		t.Fatalf("the long key's lease was refused while a forged key held one: %v", err)
	} else {
		l2.Release()
	}
}

// Tiny but valid rates ("one per century": a quota that is in effect only
// its burst) must still enforce the burst. The emission interval 1/Rate
// overflowed time.Duration below about 1e-9 per second and became
// negative, which let redis_rate admit everything.
func TestExtremeRates(t *testing.T) {
	p := startRedis(t)
	s, err := NewStore(Config{Client: p.client(t), Replicas: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, r := range []rate.Limit{1e-300, 1e-12, 1e-10, 1e-9} {
		lim := shedhttp.RateLimit{Rate: r, Burst: 3}
		key := "r" + strconv.Itoa(i)
		var allowed int
		for range 10 {
			d := s.Decide(t.Context(), now, 0, key, lim, 1)
			if d.FellBack {
				t.Errorf("rate %g: fell back (%s)", float64(r), d.Cause)
			}
			if d.Allowed {
				allowed++
			}
		}
		if d := s.Decide(t.Context(), now, 0, key, lim, 1); d.Allowed || d.RetryAfter < time.Hour {
			t.Errorf("rate %g, burst spent: %+v, want a refusal for a long time", float64(r), d)
		}
		if allowed == 0 {
			t.Errorf("rate %g burst 3: nothing allowed on a new key", float64(r))
		}
		if allowed > 3 {
			t.Errorf("rate %g burst 3: %d allowed at once", float64(r), allowed)
		}
	}
}

// The same forgery while Redis is down: the local share
// (shedhttp.MemoryStore) digests long keys into the same "sha256:<hex>"
// spelling, so the forged key shared the long key's local bucket too.
func TestDigestKeyCollisionFallback(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer dead.Close()
	s, err := NewStore(Config{Client: dead, Replicas: 1, Timeout: 20 * time.Millisecond, BreakerOpen: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("victim-", 40)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:16])
	lim := shedhttp.RateLimit{Rate: 0.001, Burst: 1}
	now := time.Now()
	if d := s.Decide(t.Context(), now, 0, forged, lim, 1); !d.Allowed || !d.FellBack {
		t.Fatalf("forged key's first request with Redis down: %+v", d)
	}
	if d := s.Decide(t.Context(), now, 0, long, lim, 1); !d.Allowed {
		t.Fatalf("Redis down: the long key's first request was refused after a forged key spent its bucket: %+v", d)
	}
}

// While Redis is down, a cost larger than the local share's burst (within
// the fleet's) must take the share's rate: charged as one full share
// bucket, it admitted the whole cost, and each replica admitted up to
// Replicas times its share of the cost rate (the fleet Replicas times the
// quota).
func TestFallbackLargeCostsOverAdmit(t *testing.T) {

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
	for i := range 1000 { // 10 s, every 10 ms, a request of cost 8
		if ok, _ := s.AllowNAt(now.Add(time.Duration(i)*10*time.Millisecond), 0, "t", lim, 8); ok {
			tokens += 8
		}
	}
	// This replica's share over 10 s: its burst 2 plus 2/s, about 22
	// tokens (a whole request of 8 may round it up to 24 or 32).
	if tokens > 32 {
		t.Errorf("one of %d replicas admitted %d tokens in 10 s; its share is about 22 (the fleet's quota 88)", replicas, tokens)
	}
}

// A Redis that answers reads but holds writes (CLIENT PAUSE WRITE, as
// during a failover): every decision and lease falls back within the
// budget instead of waiting, and decisions go back to Redis once it
// resumes.
func TestClientPauseWrite(t *testing.T) {
	p := startRedis(t)
	client := p.client(t)
	cfg := Config{Client: client, Replicas: 2, Timeout: 30 * time.Millisecond, BreakerFailures: 3, BreakerOpen: 100 * time.Millisecond}
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConcurrency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lim := shedhttp.RateLimit{Rate: 100, Burst: 10}
	if d := s.Decide(t.Context(), time.Now(), 0, "k", lim, 1); d.FellBack {
		t.Fatalf("before the pause: %+v", d)
	}
	if err := client.Do(t.Context(), "CLIENT", "PAUSE", "600", "WRITE").Err(); err != nil {
		t.Skipf("CLIENT PAUSE WRITE: %v", err)
	}
	for i := range 10 {
		start := time.Now()
		d := s.Decide(t.Context(), time.Now(), 0, "k", lim, 1)
		l, err := c.Acquire(t.Context(), "k", 4)
		if took := time.Since(start); took > 200*time.Millisecond {
			t.Errorf("decision %d with writes paused took %v", i, took)
		}
		if !d.FellBack || err != nil || !l.FellBack() {
			t.Errorf("decision %d with writes paused: %+v, lease %v %v; want both on the local share", i, d, l, err)
		}
		l.Release()
	}
	time.Sleep(700 * time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for s.Decide(t.Context(), time.Now(), 0, "k", lim, 1).FellBack {
		if time.Now().After(deadline) {
			t.Fatal("decisions still fall back a second after the pause ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
