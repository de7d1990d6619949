package shedredis

import (
	"strconv"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// BenchmarkAllowAt is the latency a rate-limit decision adds to a request:
// Redis on loopback beside the in-memory shedhttp.MemoryStore, in the same
// run. p50-ns and p99-ns are per-call latencies (each call timed, which
// adds a clock read to ns/op).
func BenchmarkAllowAt(b *testing.B) {
	lim := shedhttp.RateLimit{Rate: 1e5, Burst: 1e6} // never refuses within a run
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	run := func(b *testing.B, s shedhttp.KeyStore) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if ok, _ := s.AllowAt(start, 0, keys[i%len(keys)], lim); !ok {
				b.Fatal("refused")
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), "p99-ns")
	}
	b.Run("memory", func(b *testing.B) {
		s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{})
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
	})
	b.Run("redis", func(b *testing.B) {
		p := startRedis(b)
		s, err := NewStore(Config{Client: p.client(b), Replicas: 1, Timeout: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
		if fb := s.Stats().FellBack; fb > 0 {
			b.Logf("%d decisions fell back", fb)
		}
	})
}

// BenchmarkLease is Acquire + Release of a fleet concurrency lease on
// loopback Redis: two script calls.
func BenchmarkLease(b *testing.B) {
	p := startRedis(b)
	c, err := NewConcurrency(Config{Client: p.client(b), Replicas: 1, Timeout: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, err := c.Acquire(b.Context(), "tenant", 1000)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), "p99-ns")
}
