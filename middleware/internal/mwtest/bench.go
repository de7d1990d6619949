package mwtest

import (
	"testing"
	"time"
)

// BenchPair measures with beside base in one run: b.N calls of each,
// alternately in chunks, so that both share whatever else the machine
// does. It reports with's time per call as a ratio to base's ("x-base"),
// its time per call ("ns/with"), and the allocations with adds to base
// per call ("allocs-over-base", from testing.AllocsPerRun). An op is a
// call of each. between, when set, runs outside the timings every 2^15
// calls (to empty a recorder's buffer, say). It asserts nothing.
func BenchPair(b *testing.B, base, with, between func()) {
	allocs := testing.AllocsPerRun(100, with) - testing.AllocsPerRun(100, base)
	const chunk = 256
	var tBase, tWith time.Duration
	n := 0
	b.ResetTimer()
	for n < b.N {
		if between != nil && n&(1<<15-1) == 0 {
			b.StopTimer()
			between()
			b.StartTimer()
		}
		t0 := time.Now()
		for range chunk {
			base()
		}
		t1 := time.Now()
		for range chunk {
			with()
		}
		tBase, tWith = tBase+t1.Sub(t0), tWith+time.Since(t1)
		n += chunk
	}
	b.StopTimer()
	b.ReportMetric(float64(tWith)/float64(tBase), "x-base")
	b.ReportMetric(float64(tWith.Nanoseconds())/float64(n), "ns/with")
	b.ReportMetric(allocs, "allocs-over-base")
}
