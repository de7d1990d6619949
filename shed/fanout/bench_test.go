package fanout_test

import (
	"context"
	"iter"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// The per-item overhead of a fan-out against errgroup.Group with SetLimit,
// the usual hand-rolled alternative, on a trivial task: 1,000 items, bound
// 8. Both create one goroutine per item; fanout adds result delivery on
// the caller's goroutine (errgroup's tasks write into shared state
// instead). Read ns/item; divide allocs/op by 1,000 for allocs/item.
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 ./shed/fanout/

const (
	benchItems = 1000
	benchBound = 8
)

func benchSeq(yield func(int) bool) {
	for i := range benchItems {
		if !yield(i) {
			return
		}
	}
}

func double(_ context.Context, in int) (int, error) { return 2 * in, nil }

func perItem(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchItems), "ns/item")
}

func benchFanout(b *testing.B, cfg fanout.Config[int], task func(context.Context, int) (int, error)) {
	ctx := context.Background()
	var items iter.Seq[int] = benchSeq
	b.ReportAllocs()
	for b.Loop() {
		sum := 0
		err := fanout.Run(ctx, items, task, cfg, func(r fanout.Result[int]) error {
			sum += r.Value
			return nil
		})
		if err != nil || sum != benchItems*(benchItems-1) {
			b.Fatalf("Run = %v, sum %d", err, sum)
		}
	}
	perItem(b)
}

func BenchmarkFanout(b *testing.B) {
	b.Run("unordered", func(b *testing.B) {
		benchFanout(b, fanout.Config[int]{Bound: benchBound}, double)
	})
	b.Run("ordered", func(b *testing.B) {
		benchFanout(b, fanout.Config[int]{Bound: benchBound, Ordered: true}, double)
	})
	b.Run("limiter", func(b *testing.B) {
		l, err := shed.New(shed.Config{Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		benchFanout(b, fanout.Config[int]{Bound: benchBound, Limiter: l}, double)
	})
	// Each item reserves an estimate and reconciles it with its actual
	// cost, as an LLM call does with tokens.
	b.Run("reconcile", func(b *testing.B) {
		l, err := shed.New(shed.Config{Limit: 1000, MaxCost: 100_000})
		if err != nil {
			b.Fatal(err)
		}
		estimate := func(int) shed.Request { return shed.Request{Cost: 100} }
		benchFanout(b, fanout.Config[int]{Bound: benchBound, Limiter: l, Request: estimate},
			func(ctx context.Context, in int) (int, error) {
				if !fanout.Reconcile(ctx, 40) {
					b.Error("Reconcile = false")
				}
				return 2 * in, nil
			})
	})
}

func BenchmarkErrgroupSetLimit(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var sum atomic.Int64
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(benchBound)
		for in := range benchSeq {
			g.Go(func() error {
				v, err := double(gctx, in)
				sum.Add(int64(v))
				return err
			})
		}
		if err := g.Wait(); err != nil || sum.Load() != benchItems*(benchItems-1) {
			b.Fatalf("Wait = %v, sum %d", err, sum.Load())
		}
	}
	perItem(b)
}
