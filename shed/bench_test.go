package shed_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/shedkit/shedkit/shed"
)

// The limit is far above the parallelism so every acquisition succeeds:
// these measure the cost of admission, not of rejection.
const benchLimit = 1 << 20

// BenchmarkBaselineSemaphore is the reference: x/sync/semaphore, which is
// neither adaptive nor priority-aware.
func BenchmarkBaselineSemaphore(b *testing.B) {
	sem := semaphore.NewWeighted(benchLimit)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !sem.TryAcquire(1) {
				b.Fatal("semaphore full")
			}
			sem.Release(1)
		}
	})
}

// BenchmarkBaselineAtomic is the floor: one shared counter, CAS in, add out.
func BenchmarkBaselineAtomic(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for {
				v := n.Load()
				if n.CompareAndSwap(v, v+1) {
					break
				}
			}
			n.Add(-1)
		}
	})
}

// BenchmarkTryAcquireRelease is shed's hot path with a static limit, wall
// clock, default sampling.
func BenchmarkTryAcquireRelease(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
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

// BenchmarkTryAcquireReleaseClasses adds three classes with protected
// shares (no class is short, so the lock-free path still applies).
func BenchmarkTryAcquireReleaseClasses(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit, Classes: []shed.ClassConfig{
		{Name: "critical", Protected: 0.2}, {Name: "interactive", Protected: 0.5}, {Name: "batch"},
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var i int
		for pb.Next() {
			i++
			p, err := l.TryAcquire(shed.Request{Class: shed.Class(i % 3)})
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkTryAcquireRejected measures the rejection path under overload.
func BenchmarkTryAcquireRejected(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	p, _ := l.TryAcquire(shed.Request{})
	defer p.Release(shed.Ignored)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.TryAcquire(shed.Request{}); err == nil {
				b.Fatal("admitted over the limit")
			}
		}
	})
}

// BenchmarkAcquireAtReleaseAt is the explicit-time path used by sim/: every
// permit is timed from the given instants, no clock reads.
func BenchmarkAcquireAtReleaseAt(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		p, err := l.TryAcquireAt(now, shed.Request{})
		if err != nil {
			b.Fatal(err)
		}
		p.ReleaseAt(now.Add(time.Millisecond), shed.Success)
	}
}

// BenchmarkAcquireBlockingFast is Acquire (context API) when capacity is free.
func BenchmarkAcquireBlockingFast(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 10, MaxWait: time.Second}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := l.Acquire(ctx, shed.Request{})
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkTryAcquireReleaseDeadline is the hot path for a request that
// carries a deadline far in the future, as every request behind a
// deadline-propagating client does: the limiter must compare it with the
// time the work is expected to take.
func BenchmarkTryAcquireReleaseDeadline(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	req := shed.Request{Deadline: time.Now().Add(time.Hour)}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := l.TryAcquire(req)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkAcquireDeadlineFast is Acquire with a context deadline (the
// middleware's path for a request with a propagated deadline) when
// capacity is free.
func BenchmarkAcquireDeadlineFast(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 10, MaxWait: time.Second}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := l.Acquire(ctx, shed.Request{})
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkAcquireAtReleaseAtDeadline is the explicit-time path with a
// deadline, as the simulator drives it.
func BenchmarkAcquireAtReleaseAtDeadline(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		p, err := l.TryAcquireAt(now, shed.Request{Deadline: now.Add(time.Second)})
		if err != nil {
			b.Fatal(err)
		}
		p.ReleaseAt(now.Add(time.Millisecond), shed.Success)
	}
}

// benchTenants are the tenants of the tenant benchmarks: each goroutine
// takes its own, as the requests of many customers would.
var benchTenants = func() []string {
	t := make([]string, 256)
	for i := range t {
		t[i] = fmt.Sprintf("tenant-%d", i)
	}
	return t
}()

// BenchmarkTryAcquireReleaseTenant is BenchmarkTryAcquireRelease with a
// tenant per goroutine, tracked all along (each holds its own permit
// while it asks): the steady state of a tenant with work in flight.
func BenchmarkTryAcquireReleaseTenant(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := shed.Request{Tenant: benchTenants[next.Add(1)%int64(len(benchTenants))]}
		anchor, err := l.TryAcquire(req)
		if err != nil {
			b.Fatal(err)
		}
		defer anchor.Release(shed.Success)
		for pb.Next() {
			p, err := l.TryAcquire(req)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkTryAcquireReleaseNewTenant: every admission is its tenant's
// first, and its release frees the entry (which the next tenant reuses).
func BenchmarkTryAcquireReleaseNewTenant(b *testing.B) {
	l, err := shed.New(shed.Config{Limit: benchLimit})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		for pb.Next() {
			i++
			p, err := l.TryAcquire(shed.Request{Tenant: benchTenants[i%int64(len(benchTenants))]})
			if err != nil {
				b.Fatal(err)
			}
			p.Release(shed.Success)
		}
	})
}

// BenchmarkTenantFirstAdmission is the cost of a tenant's first admission
// when no idle entry can be reused: every admission is of a new tenant and
// stays in flight until the end (b.N of them, at most a million per
// limiter), so each allocates its entry.
func BenchmarkTenantFirstAdmission(b *testing.B) {
	names := make([]string, min(b.N, 1<<20))
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	b.ReportAllocs()
	for done := 0; done < b.N; {
		l, err := shed.New(shed.Config{Limit: benchLimit})
		if err != nil {
			b.Fatal(err)
		}
		n := min(b.N-done, len(names))
		held := make([]shed.Permit, n)
		for i := range n {
			if held[i], err = l.TryAcquire(shed.Request{Tenant: names[i]}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for i := range held {
			held[i].Release(shed.Success)
		}
		b.StartTimer()
		done += n
	}
}

// BenchmarkTryAcquireReleaseTenantWeight is the tenant benchmarks with a
// Config.TenantWeight, which is resolved before the admission changes
// anything: from the entry of a tracked tenant, by a call for a new one.
func BenchmarkTryAcquireReleaseTenantWeight(b *testing.B) {
	weight := func(name string) float64 { return float64(1 + len(name)%3) }
	for _, tracked := range []bool{true, false} {
		name := map[bool]string{true: "tracked", false: "new"}[tracked]
		b.Run(name, func(b *testing.B) {
			l, err := shed.New(shed.Config{Limit: benchLimit, TenantWeight: weight})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1)
				req := shed.Request{Tenant: benchTenants[i%int64(len(benchTenants))]}
				if tracked {
					anchor, err := l.TryAcquire(req)
					if err != nil {
						b.Fatal(err)
					}
					defer anchor.Release(shed.Success)
				}
				for pb.Next() {
					if !tracked {
						i++
						req.Tenant = benchTenants[i%int64(len(benchTenants))]
					}
					p, err := l.TryAcquire(req)
					if err != nil {
						b.Fatal(err)
					}
					p.Release(shed.Success)
				}
			})
		})
	}
}

// BenchmarkEnqueueAtLeave is the queue path of the explicit-time API: a
// request queued behind a full limit, then admitted by a release (grant)
// or taken out again (cancel), as the simulator drives it.
func BenchmarkEnqueueAtLeave(b *testing.B) {
	for _, leave := range []string{"grant", "cancel"} {
		b.Run(leave, func(b *testing.B) {
			l, err := shed.New(shed.Config{Limit: 1, DeadlineMargin: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 10, MaxWait: time.Hour}}})
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Unix(0, 0)
			held, err := l.TryAcquireAt(t0, shed.Request{})
			if err != nil {
				b.Fatal(err)
			}
			w := shed.NewWaiter(func(*shed.Waiter) {})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now := t0.Add(time.Duration(i) * time.Microsecond)
				if _, queued, err := l.EnqueueAt(now, shed.Request{Deadline: now.Add(time.Hour)}, w); !queued {
					b.Fatal(err)
				}
				if leave == "cancel" {
					l.CancelAt(now, w)
					continue
				}
				held.ReleaseAt(now, shed.Success)
				if held, err = w.Result(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			held.ReleaseAt(t0, shed.Ignored)
		})
	}
}
