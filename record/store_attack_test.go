package record_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// TestStoreSampling: store calls are sampled as the requests are (1 in
// N, neither all nor none) and count toward MaxRecordsPerSecond. A
// service whose every request makes three store calls (Store's allow,
// Concurrency's acquire and release) wrote four times the cap: the
// sampling was chosen from the requests alone.
func TestStoreSampling(t *testing.T) {
	var buf bytes.Buffer
	const limit = 100
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: limit, Buffer: 1 << 16})
	const seconds = 10
	stored := 0
	for ms := range seconds * 1000 {
		for range 2 { // 2,000 requests per second, 6,000 store calls
			at := t0.Add(time.Duration(ms) * time.Millisecond)
			for range 3 {
				if rec.StoreCall() {
					rec.Add(record.Record{Kind: record.KindStore, Time: at, Op: record.StoreAllow, Timed: true, Latency: time.Millisecond})
					stored++
				}
			}
			if rec.Arrive(0) {
				rec.Add(record.Record{Kind: record.KindRequest, Time: at, Timed: true, Latency: time.Millisecond})
			}
			rec.Done(0)
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	every := ticks[len(ticks)-1].Tick.SampleEvery
	if stored == 0 || stored == seconds*6000 {
		t.Fatalf("%d of %d store calls sampled", stored, seconds*6000)
	}
	// The first second is recorded whole, before any tick chose a rate.
	if perSecond := float64(len(recs)-8000) / (seconds - 1); perSecond > 1.5*limit {
		t.Errorf("%.0f records per second (sampled 1 in %d, %d store calls), cap %d", perSecond, every, stored, limit)
	}
}

// TestStoreCallsNeverBlock: store calls added from many goroutines while
// the writer is stalled (nobody flushes), or after Stop, are dropped and
// counted, never waited for.
func TestStoreCallsNeverBlock(t *testing.T) {
	rec := newRec(t, record.Config{Writer: &bytes.Buffer{}, MaxRecordsPerSecond: -1, Buffer: 16})
	var wg sync.WaitGroup
	const goroutines, each = 8, 500
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if rec.StoreCall() {
					rec.Add(record.Record{Kind: record.KindStore, Time: t0.Add(time.Duration(g*each+i) * time.Microsecond), Op: record.StoreAcquire,
						Result: record.StoreTimeout, Timed: true, Latency: time.Millisecond})
				}
			}
		})
	}
	wg.Wait()
	if lost := rec.Stats().Lost; lost < goroutines*each-16 {
		t.Errorf("lost %d of %d store calls into a buffer of 16", lost, goroutines*each)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	before := rec.Stats().Lost
	rec.Add(record.Record{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Timed: true})
	if got := rec.Stats().Lost; got != before+1 {
		t.Errorf("a store call after Stop: lost %d, want %d", got, before+1)
	}
}

// TestStoreLinesMalformed: each malformed store line is an ErrFormat
// naming what is wrong; a store line before the header too; extreme but
// well-formed durations read back as written; store lines alone (no
// request) read back.
func TestStoreLinesMalformed(t *testing.T) {
	const header = `{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1}` + "\n"
	for _, c := range []struct{ in, err string }{
		{header + `{"k":"store","op":"allow","lat":1,"res":"ok"}`, "no time"},
		{header + `{"k":"store","t":1,"op":"allow","res":"ok"}`, "no duration"},
		{header + `{"k":"store","t":1,"op":"allow","lat":-1,"res":"ok"}`, "negative"},
		{header + `{"k":"store","t":1,"op":"allow","lat":1.5,"res":"ok"}`, "not a JSON object"},
		{header + `{"k":"store","t":1,"op":"allow","lat":1e30,"res":"ok"}`, "not a JSON object"},
		{header + `{"k":"store","t":1,"op":"allow","lat":"NaN","res":"ok"}`, "not a JSON object"},
		{header + `{"k":"store","t":1,"lat":1,"res":"ok"}`, "no operation"},
		{header + `{"k":"store","t":1,"op":"allow","lat":1}`, "no operation"},
		{`{"k":"store","t":1,"op":"allow","lat":1,"res":"ok"}` + "\n" + header, "before the header"},
	} {
		_, err := readStream(c.in + "\n") // a last line cut short is no error
		if !errors.Is(err, record.ErrFormat) || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want ErrFormat saying %q", c.in, err, c.err)
		}
	}
	recs, err := readStream(header + `{"k":"store","t":1,"op":"allow","lat":9223372036854775807,"res":"timeout","c":7,"key":"ab"}` + "\n" +
		`{"k":"store","t":2,"op":"renew","lat":0,"res":"breaker_open"}`)
	if err != nil || len(recs) != 2 || recs[0].Latency != time.Duration(math.MaxInt64) || recs[0].Class != 0 || recs[0].Key != 0 || recs[1].Op != record.StoreRenew {
		t.Errorf("store lines alone: %+v, %v", recs, err)
	}
}

// readStream reads every record of s, up to the first error.
func readStream(s string) ([]record.Record, error) {
	rd := record.NewReader(strings.NewReader(s))
	var out []record.Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

// TestStoreLinesRotate: store lines fill files up to MaxFileBytes and
// rotate as the others do: every file starts with its header and reads
// back, none is over the cap.
func TestStoreLinesRotate(t *testing.T) {
	dir := t.TempDir()
	rec := newRec(t, record.Config{Dir: dir, MaxFileBytes: 2000, MaxFiles: 3, MaxRecordsPerSecond: -1})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Timed: true})
	for i := range 200 {
		rec.Add(record.Record{Kind: record.KindStore, Time: t0.Add(time.Duration(i) * time.Millisecond), Op: record.StoreRelease,
			Result: record.StoreError, Timed: true, Latency: time.Duration(i) * time.Microsecond})
		if i%50 == 0 {
			rec.Flush()
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(names) != 3 {
		t.Fatalf("files %v, want 3", names)
	}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil || len(data) > 2000 || !bytes.HasPrefix(data, []byte(`{"k":"header"`)) {
			t.Errorf("%s: %d bytes, %v:\n%.200s", n, len(data), err, data)
		}
	}
	recs, err := record.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	for i := len(recs) - 1; i >= 0 && last.Kind != record.KindStore; i-- {
		last = recs[i]
	}
	if last.Kind != record.KindStore || last.Latency != 199*time.Microsecond || last.Result != record.StoreError {
		t.Errorf("last store call read back as %+v", last)
	}
}
