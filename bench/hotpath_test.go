package bench_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"
	"golang.org/x/sync/semaphore"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// The hot path of every implementation, measured in one process and one
// run, so that the ratios are not skewed by the machine's drift. Run with
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 -count 5 | go run ./cmd/hotpath
//
// BenchmarkHotPath acquires and releases one unit of work with a limit far
// above the parallelism (RunParallel runs GOMAXPROCS goroutines, so at most
// 2 units are in flight here): it measures the overhead of admission, not
// rejection. Adaptive limits get a floor of 256 so that benchmark noise in
// their latency samples can never shrink them into the way.
// BenchmarkRejected measures the other path: the limit is reached and every
// attempt is refused.

// bigLimit never binds.
const bigLimit = 1 << 20

// floor keeps adaptive limits far above the parallelism.
const floor = 256

func BenchmarkHotPath(b *testing.B) {
	for _, c := range hotCases() {
		b.Run(c.name, func(b *testing.B) {
			run := c.build(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !run() {
						b.Error("rejected below the limit")
						return
					}
				}
			})
		})
	}
}

func BenchmarkRejected(b *testing.B) {
	for _, c := range rejectCases() {
		b.Run(c.name, func(b *testing.B) {
			try, cleanup := c.build(b)
			defer cleanup()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if try() {
						b.Error("admitted over the limit")
						return
					}
				}
			})
		})
	}
}

type hotCase struct {
	name string
	// build returns one acquire + release, reporting whether the acquire
	// succeeded.
	build func(b testing.TB) func() bool
}

func newShed(b testing.TB, cfg shed.Config) *shed.Limiter {
	b.Helper()
	l, err := shed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func newGradient(b testing.TB, cfg limits.GradientConfig) *limits.Gradient {
	b.Helper()
	g, err := limits.NewGradient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func shedRun(l *shed.Limiter) func() bool {
	return func() bool {
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			return false
		}
		p.Release(shed.Success)
		return true
	}
}

// newGCL is go-concurrency-limits' DefaultLimiter with its Gradient2 limit
// and the limiter's default windows (1 s, at least 100 samples). With
// minRTT 100 µs (its default), samples faster than that are discarded:
// in this benchmark, all of them.
func newGCL(minRTT int64) *limiter.DefaultLimiter {
	g := limit.NewDefaultGradient2Limit("bench", nil, nil)
	l, err := limiter.NewDefaultLimiter(g, 1e9, 1e9, minRTT, 100, strategy.NewSimpleStrategy(g.EstimatedLimit()), nil, nil)
	if err != nil {
		panic(err)
	}
	return l
}

// gclRun is one acquire + release of a go-concurrency-limits limiter.
func gclRun(l *limiter.DefaultLimiter) func() bool {
	ctx := context.Background()
	return func() bool {
		ls, ok := l.Acquire(ctx)
		if !ok {
			return false
		}
		ls.OnSuccess()
		return true
	}
}

func hotCases() []hotCase {
	return []hotCase{
		{"atomic", func(b testing.TB) func() bool {
			// The floor: one shared counter, CAS in, add out.
			var n atomic.Int64
			return func() bool {
				for {
					v := n.Load()
					if v >= bigLimit {
						return false
					}
					if n.CompareAndSwap(v, v+1) {
						break
					}
				}
				n.Add(-1)
				return true
			}
		}},
		{"semaphore", func(b testing.TB) func() bool {
			// The reference: golang.org/x/sync/semaphore, not adaptive.
			sem := semaphore.NewWeighted(bigLimit)
			return func() bool {
				if !sem.TryAcquire(1) {
					return false
				}
				sem.Release(1)
				return true
			}
		}},
		{"shed-static", func(b testing.TB) func() bool {
			return shedRun(newShed(b, shed.Config{Limit: bigLimit}))
		}},
		{"shed-gradient", func(b testing.TB) func() bool {
			// Adaptive, wall clock, default sampling: at most ~1,000
			// permits a second are timed (two clock reads each).
			g := newGradient(b, limits.GradientConfig{MinLimit: floor, MaxLimit: bigLimit})
			return shedRun(newShed(b, shed.Config{Source: g}))
		}},
		{"shed-gradient-timeall", func(b testing.TB) func() bool {
			// Every permit timed, as failsafe-go and go-concurrency-limits
			// do: two clock reads and a sample per unit of work.
			g := newGradient(b, limits.GradientConfig{MinLimit: floor, MaxLimit: bigLimit})
			return shedRun(newShed(b, shed.Config{Source: g, MaxSamplesPerSecond: -1}))
		}},
		{"gcl-gradient2", func(b testing.TB) func() bool {
			return gclRun(newGCL(1e5))
		}},
		{"gcl-gradient2-allrtt", func(b testing.TB) func() bool {
			// minRTT threshold 0: every sample reaches the window, as it
			// would in a service whose calls take more than 100 µs.
			return gclRun(newGCL(0))
		}},
		{"failsafe-adaptive", func(b testing.TB) func() bool {
			// failsafe-go's adaptivelimiter (default tuning but a floor
			// of 256), TryAcquirePermit + Record: every permit is timed.
			l := adaptivelimiter.NewBuilder[any]().WithLimits(floor, bigLimit, 1024).Build()
			return func() bool {
				p, ok := l.TryAcquirePermit()
				if !ok {
					return false
				}
				p.Record()
				return true
			}
		}},
	}
}

type rejectCase struct {
	name string
	// build fills the limit and returns an attempt that should be refused
	// (it reports whether it was admitted) and a cleanup.
	build func(b testing.TB) (try func() bool, cleanup func())
}

// fill admits until the first refusal (at most 10,000 units) and returns
// the releases.
func fill(b testing.TB, try func() (func(), bool)) func() {
	var held []func()
	for range 10000 {
		rel, ok := try()
		if !ok {
			return func() {
				for _, r := range held {
					r()
				}
			}
		}
		held = append(held, rel)
	}
	b.Fatal("the limit was never reached")
	return nil
}

func shedReject(b testing.TB, l *shed.Limiter) (func() bool, func()) {
	cleanup := fill(b, func() (func(), bool) {
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			return nil, false
		}
		return func() { p.Release(shed.Ignored) }, true
	})
	return func() bool {
		p, err := l.TryAcquire(shed.Request{})
		if err != nil {
			return false
		}
		p.Release(shed.Ignored)
		return true
	}, cleanup
}

func gclReject(b testing.TB, l *limiter.DefaultLimiter) (func() bool, func()) {
	ctx := context.Background()
	cleanup := fill(b, func() (func(), bool) {
		ls, ok := l.Acquire(ctx)
		if !ok {
			return nil, false
		}
		return func() { ls.OnIgnore() }, true
	})
	return func() bool {
		ls, ok := l.Acquire(ctx)
		if ok {
			ls.OnIgnore()
		}
		return ok
	}, cleanup
}

func rejectCases() []rejectCase {
	return []rejectCase{
		{"semaphore", func(b testing.TB) (func() bool, func()) {
			sem := semaphore.NewWeighted(1)
			cleanup := fill(b, func() (func(), bool) {
				if !sem.TryAcquire(1) {
					return nil, false
				}
				return func() { sem.Release(1) }, true
			})
			return func() bool {
				if sem.TryAcquire(1) {
					sem.Release(1)
					return true
				}
				return false
			}, cleanup
		}},
		{"shed-static", func(b testing.TB) (func() bool, func()) {
			return shedReject(b, newShed(b, shed.Config{Limit: 1}))
		}},
		{"shed-gradient", func(b testing.TB) (func() bool, func()) {
			// Default Gradient: limit 20 until a window closes.
			g := newGradient(b, limits.GradientConfig{})
			return shedReject(b, newShed(b, shed.Config{Source: g}))
		}},
		{"gcl-gradient2", func(b testing.TB) (func() bool, func()) {
			return gclReject(b, newGCL(1e5))
		}},
		{"failsafe-adaptive", func(b testing.TB) (func() bool, func()) {
			l := adaptivelimiter.NewWithDefaults[any]()
			cleanup := fill(b, func() (func(), bool) {
				p, ok := l.TryAcquirePermit()
				if !ok {
					return nil, false
				}
				return p.Drop, true
			})
			return func() bool {
				p, ok := l.TryAcquirePermit()
				if ok {
					p.Drop()
				}
				return ok
			}, cleanup
		}},
	}
}

// TestBenchmarkCases runs every case a few times, so that `go test` catches
// a case that refuses below its limit or admits at it (the benchmarks
// themselves are never run as tests, and nothing here is timed).
func TestBenchmarkCases(t *testing.T) {
	for _, c := range hotCases() {
		run := c.build(t)
		for range 100 {
			if !run() {
				t.Fatalf("hot path %s: refused below the limit", c.name)
			}
		}
	}
	for _, c := range rejectCases() {
		try, cleanup := c.build(t)
		for range 100 {
			if try() {
				t.Fatalf("rejection %s: admitted at the limit", c.name)
			}
		}
		cleanup()
		if !try() {
			t.Fatalf("rejection %s: still refused after the held work was released", c.name)
		}
	}
}
