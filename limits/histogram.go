package limits

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The latency histogram is log-bucketed: values below 16 ns have a bucket
// each, and every power of two above is split into 16 equal buckets, so a
// bucket spans at most 1/16 of its lower bound and its midpoint is within
// 3.2% of any value in it. Values of 2^41 ns (about 36 minutes) and more
// share the last bucket. 608 buckets of 8 bytes: under 5 KiB per window.
const (
	histSubBits = 4
	histSub     = 1 << histSubBits // buckets per power of two
	histMaxExp  = 41               // first power of two that is clamped
	histBuckets = (histMaxExp - histSubBits + 1) * histSub
)

// histogram counts latencies with atomic counters: recording is one atomic
// add, no lock and no allocation. Counts are cumulative; a window takes the
// difference between two snapshots.
type histogram struct {
	counts [histBuckets]atomic.Uint64
}

// histIndex returns the bucket of a latency in nanoseconds (v >= 0).
func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
	if e >= histMaxExp {
		return histBuckets - 1
	}
	sub := int(v>>(uint(e)-histSubBits)) & (histSub - 1)
	return (e-histSubBits+1)*histSub + sub
}

// histLower returns the smallest value of bucket i and the bucket's width.
func histLower(i int) (lower, width uint64) {
	if i < histSub {
		return uint64(i), 1
	}
	e := uint(i/histSub + histSubBits - 1)
	sub := uint64(i % histSub)
	return (histSub + sub) << (e - histSubBits), 1 << (e - histSubBits)
}

// histValue is the value reported for bucket i: its midpoint.
func histValue(i int) time.Duration {
	lo, w := histLower(i)
	return time.Duration(lo + w/2)
}

func (h *histogram) add(v uint64) { h.counts[histIndex(v)].Add(1) }

// delta returns the counts added since prev, and their total, and
// advances prev to the current counts. A value added concurrently lands in
// this window or the next one, never in both.
func (h *histogram) delta(prev *[histBuckets]uint64) (d [histBuckets]uint64, n uint64) {
	for i := range h.counts {
		c := h.counts[i].Load()
		d[i] = c - prev[i]
		prev[i] = c
		n += d[i]
	}
	return d, n
}

// quantiles returns the qs-quantiles (ascending) of the n values counted
// in d, nearest rank: the smallest value with at least q*n values at or
// below it.
func quantiles(d *[histBuckets]uint64, n uint64, qs []float64, out []time.Duration) {
	var seen uint64
	i := 0
	for k, q := range qs {
		rank := max(uint64(math.Ceil(q*float64(n))), 1)
		for ; i < histBuckets-1 && seen+d[i] < rank; i++ {
			seen += d[i]
		}
		out[k] = histValue(i)
	}
}
