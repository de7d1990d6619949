package limits_test

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// The same benchmarks with go-concurrency-limits (the gcl adapter and that
// library's own limiter) are in module limits/gcl, so that the library
// module does not require go-concurrency-limits.

// Recording a sample. Every goroutine plays its own virtual clock, 1 µs
// per sample, so windows close (once per virtual second per goroutine)
// and the per-window update is part of the measurement.
func BenchmarkObserve(b *testing.B) {
	newGradient := func(q float64) shed.LimitSource {
		g, err := limits.NewGradient(limits.GradientConfig{Window: limits.WindowConfig{Quantile: q}})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	aimd, err := limits.NewAIMD(limits.AIMDConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		src   shed.LimitSource
		timed bool
	}{
		{"gradient/mean", newGradient(0), true},
		{"gradient/p90", newGradient(0.9), true},
		{"aimd", aimd, true},
		// What shed sends for the releases it does not time: no clock.
		{"gradient/untimed", newGradient(0), false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				now := time.Unix(0, 0).Add(time.Duration(seq.Add(1)) * time.Nanosecond)
				i := 0
				for pb.Next() {
					i++
					s := shed.Sample{InFlight: i & 63}
					if bc.timed {
						now = now.Add(time.Microsecond)
						s.Now, s.Timed, s.Latency = now, true, time.Duration(i&1023)*time.Microsecond
					}
					bc.src.Observe(s)
				}
			})
		})
	}
}

// The reference for recording: one shared atomic add.
func BenchmarkObserveBaselineAtomicAdd(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}

// The whole hot path: TryAcquire + Release on a shed.Limiter, wall clock,
// default latency sampling: shed times every 2^k-th admission of a class,
// with k re-chosen every 100 ms so that at most 1,000 permits a second are
// timed; the other releases reach the limit untimed and cost it one atomic
// load. The limit is kept above the parallelism so that every acquisition
// succeeds: this measures admission, not rejection.
func BenchmarkHotPath(b *testing.B) {
	b.Run("semaphore", func(b *testing.B) {
		sem := semaphore.NewWeighted(1 << 20)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !sem.TryAcquire(1) {
					b.Fatal("semaphore full")
				}
				sem.Release(1)
			}
		})
	})
	shedWith := func(b *testing.B, src shed.LimitSource) {
		l, err := shed.New(shed.Config{Source: src})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := l.TryAcquire(shed.Request{})
				if err != nil {
					b.Fatal(err)
				}
				p.Release(shed.Success)
			}
		})
	}
	b.Run("shed+fixed", func(b *testing.B) {
		f, err := limits.NewFixed(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		shedWith(b, f)
	})
	b.Run("shed+gradient", func(b *testing.B) {
		// MinLimit above the parallelism: a benchmark's latency noise may
		// cut the limit, and a rejection would end the benchmark.
		g, err := limits.NewGradient(limits.GradientConfig{MinLimit: 256})
		if err != nil {
			b.Fatal(err)
		}
		shedWith(b, g)
	})
}
