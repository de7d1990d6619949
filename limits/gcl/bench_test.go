package gcl_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"

	"github.com/shedkit/shedkit/limits/gcl"
	"github.com/shedkit/shedkit/shed"
)

// The gcl counterparts of limits' BenchmarkObserve and BenchmarkHotPath
// (they moved here with the module split, so that the library module does
// not require go-concurrency-limits); compare them in one run with
// `go test -bench . ./limits/ && (cd limits/gcl && go test -bench .)`.

// Recording a sample through the adapter, each goroutine on its own
// virtual clock, 1 µs per sample.
func BenchmarkObserve(b *testing.B) {
	adapter, err := gcl.NewGradient2(gcl.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("gcl-gradient2", func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := time.Unix(0, 0).Add(time.Duration(seq.Add(1)) * time.Nanosecond)
			i := 0
			for pb.Next() {
				i++
				now = now.Add(time.Microsecond)
				adapter.Observe(shed.Sample{InFlight: i & 63, Now: now, Timed: true, Latency: time.Duration(i&1023) * time.Microsecond})
			}
		})
	})
}

// Reading the limit, as a shed.Limiter does on every admission: it must
// stay one atomic load, without locks or allocations.
func BenchmarkLimit(b *testing.B) {
	s, err := gcl.NewGradient2(gcl.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var sum atomic.Int64 // keeps the reads from being optimized away
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += s.Limit()
		}
		sum.Add(int64(n))
	})
	if sum.Load() < int64(b.N) {
		b.Fatalf("limits summed to %d over %d reads", sum.Load(), b.N)
	}
}

// The whole hot path, TryAcquire + Release, through the adapter, and
// go-concurrency-limits' own limiter with its Gradient2, for scale.
func BenchmarkHotPath(b *testing.B) {
	b.Run("shed+gcl-gradient2", func(b *testing.B) {
		// The adapter around go-concurrency-limits' Gradient2 (floor 20).
		s, err := gcl.NewGradient2(gcl.Config{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := shed.New(shed.Config{Source: s})
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
	})
	b.Run("gcl-defaultlimiter+gradient2", func(b *testing.B) {
		g := limit.NewDefaultGradient2Limit("bench", nil, nil)
		l, err := limiter.NewDefaultLimiter(g, 1e9, 1e9, 1e5, 100, strategy.NewSimpleStrategy(g.EstimatedLimit()), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ls, ok := l.Acquire(ctx)
				if !ok {
					b.Fatal("rejected")
				}
				ls.OnSuccess()
			}
		})
	})
}
