package sim

import (
	"math"
	"math/bits"
)

// hist is a log-linear histogram of non-negative durations in
// nanoseconds: 32 buckets per power of two (values below 64 ns are exact),
// so a quantile is off by at most 1.6% (the bucket's half-width). Values
// above maxHistValue (about 73 minutes) land in the last bucket.
type hist struct {
	n      int64
	sum    float64
	counts [histBuckets]uint32
}

const (
	histSub      = 5 // log2 of the buckets per power of two
	histMaxShift = 36
	histBuckets  = (histMaxShift+1)<<histSub + 1<<histSub
	maxHistValue = 1<<(histMaxShift+histSub+1) - 1
)

func histIndex(v int64) int {
	if v < 1<<(histSub+1) {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	if v > maxHistValue {
		v = maxHistValue
	}
	shift := bits.Len64(uint64(v)) - histSub - 1
	return shift<<histSub + int(v>>shift)
}

// histValue returns the midpoint of bucket i.
func histValue(i int) float64 {
	if i < 1<<(histSub+1) {
		return float64(i)
	}
	shift := i>>histSub - 1
	m := i&(1<<histSub-1) + 1<<histSub
	lo := float64(int64(m) << shift)
	return lo + float64(int64(1)<<shift)/2
}

func (h *hist) add(v int64) {
	h.n++
	h.sum += float64(v)
	h.counts[histIndex(v)]++
}

func (h *hist) reset() {
	if h.n != 0 {
		*h = hist{}
	}
}

// quantile returns the q-quantile in nanoseconds, NaN when empty.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if seen >= rank {
			return histValue(i)
		}
	}
	return histValue(histBuckets - 1)
}
