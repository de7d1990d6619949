package shedredis

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
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

// BenchmarkStoreCallRecorder is what Config.Recorder adds to each Redis
// call, measured on the guard with a call that does nothing (a real call
// takes tens of microseconds on loopback): off (no Recorder), and on
// with every call recorded (the hand-over; a call the recorder samples
// out costs one atomic add). Both read the clock twice, for the duration
// metric.
func BenchmarkStoreCallRecorder(b *testing.B) {
	p := startRedis(b)
	noop := func(context.Context) error { return nil }
	for _, on := range []bool{false, true} {
		name := "off"
		cfg := Config{Client: p.client(b), Replicas: 1}
		if on {
			name = "on"
			rec, err := record.New(record.Config{Writer: io.Discard, MaxRecordsPerSecond: -1})
			if err != nil {
				b.Fatal(err)
			}
			rec.Start()
			defer rec.Stop()
			cfg.Recorder = rec
		}
		b.Run(name, func(b *testing.B) {
			if err := cfg.validate(); err != nil {
				b.Fatal(err)
			}
			g, err := newGuard(&cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if g.do(ctx, OpAllow, noop) != "" {
					b.Fatal("failed")
				}
			}
		})
	}
}
