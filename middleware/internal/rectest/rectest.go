// Package rectest holds the test helpers that the middleware's recorder
// tests share (nethttp and echo through mwtest, and grpc): reading a
// recording back, a recorder that samples nothing, and a benchmark of a
// recorder beside the same middleware without one.
package rectest

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// ReadRecording reads a whole recording back: its header, its request
// records and its last tick.
func ReadRecording(t testing.TB, b []byte) (record.Header, []record.Record, *record.Tick) {
	t.Helper()
	rd := record.NewReader(bytes.NewReader(b))
	var reqs []record.Record
	var last *record.Tick
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the recording back: %v\n%s", err, b)
		}
		if r.Tick != nil {
			last = r.Tick
		} else {
			reqs = append(reqs, r)
		}
	}
	h, _ := rd.Header()
	return h, reqs, last
}

// SparseStart is the record time of a SparseRecorder's first record.
var SparseStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// SparseRecorder returns a recorder, writing to w, that records none of
// the next thousands of requests of any class: it was shown, in record
// time, 65,536 arrivals in a second with a cap of one record a second,
// so it samples one request in 2^17 (two records, at SparseStart and a
// second later). It still counts every request; a record added later
// than that ticks the counts.
func SparseRecorder(t testing.TB, w io.Writer) *record.Recorder {
	t.Helper()
	rec, err := record.New(record.Config{Writer: w, MaxRecordsPerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	t0 := SparseStart
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0}) // the first tick
	for range 1 << 16 {
		rec.Arrive(0)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Second)}) // the tick that sets the sampling
	return rec
}

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

// CheckUnsampled checks that work the recorder does not sample reads no
// clock and is counted all the same: build returns one unit of work (a
// request, a call) of class 1 through middleware recording to rec, whose
// Clock is clock; CheckUnsampled runs it 20 times on a SparseRecorder.
func CheckUnsampled(t *testing.T, build func(rec *record.Recorder, clock func() time.Time) func()) {
	t.Helper()
	var buf bytes.Buffer
	rec := SparseRecorder(t, &buf)
	var reads atomic.Int64
	serve := build(rec, func() time.Time { reads.Add(1); return time.Now() })
	const n = 20
	for range n {
		serve()
	}
	if got := reads.Load(); got != 0 {
		t.Errorf("%d unsampled requests read the clock %d times", n, got)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: SparseStart.Add(2 * time.Second)}) // a tick with the counts
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, reqs, last := ReadRecording(t, buf.Bytes())
	if len(reqs) != 3 || last == nil || last.Arrivals[1] != n || last.Done[1] != n {
		t.Errorf("%d records (want only the 3 the test added), last tick %+v", len(reqs), last)
	}
}
