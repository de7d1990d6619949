package shedredis

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
)

// fakeClock advances by step at every reading, so that each Redis call
// (two readings) takes step.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestStoreRecordsCalls: with Config.Recorder, the Redis calls of a Store
// and of a Concurrency are recorded (record.KindStore): their start and
// duration by the store's clock, their operation, and how they ended:
// ok, timeout (Redis paused), error (Redis gone), breaker_open (the
// breaker then skips the call). Recordings used to time no store call,
// so shedsim fit could not infer the store.
func TestStoreRecordsCalls(t *testing.T) {
	p := startRedis(t)
	rec, buf := unsampledRecorder(t)
	cfg := Config{Client: p.client(t), Replicas: 1, Timeout: 50 * time.Millisecond, BreakerFailures: 2, BreakerOpen: time.Hour,
		Recorder: rec, Prefix: "storerec:"}
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConcurrency(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: at, step: 600 * time.Microsecond}
	s.g.now, c.g.now = clk.now, clk.now
	lim := shedhttp.RateLimit{Rate: 100, Burst: 100}
	s.Decide(t.Context(), at, 0, "tenant", lim, 1)
	l, err := c.Acquire(t.Context(), "tenant", 10)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	results := map[string]record.StoreResult{CauseTimeout: record.StoreTimeout, CauseError: record.StoreError}
	p.pause()
	timedOut := s.Decide(t.Context(), at, 0, "tenant", lim, 1) // times out
	p.resume()
	p.kill()
	failed := s.Decide(t.Context(), at, 0, "tenant", lim, 1) // fails, and opens the breaker
	if timedOut.Cause != CauseTimeout || failed.Cause == "" || failed.Cause == CauseBreakerOpen {
		t.Fatalf("causes %q and %q, want a timeout, then a failure", timedOut.Cause, failed.Cause)
	}
	skipped := s.Decide(t.Context(), at, 0, "tenant", lim, 1)
	if skipped.Cause != CauseBreakerOpen {
		t.Fatalf("cause %q, want the breaker open", skipped.Cause)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		op  record.StoreOp
		res record.StoreResult
		lat time.Duration
	}{
		{record.StoreAllow, record.StoreOK, clk.step}, {record.StoreAcquire, record.StoreOK, clk.step},
		{record.StoreRelease, record.StoreOK, clk.step}, {record.StoreAllow, record.StoreTimeout, clk.step},
		{record.StoreAllow, results[failed.Cause], clk.step}, {record.StoreAllow, record.StoreBreakerOpen, 0},
	}
	var got []record.Record
	_, recs, _ := rectest.ReadRecording(t, buf.Bytes())
	for _, r := range recs {
		if r.Kind == record.KindStore {
			got = append(got, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d store calls recorded, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Op != w.op || g.Result != w.res || g.Latency != w.lat || g.Time.Before(at) || g.Time.After(clk.t) {
			t.Errorf("call %d: %v %v in %v at %v, want %v %v in %v", i, g.Op, g.Result, g.Latency, g.Time, w.op, w.res, w.lat)
		}
	}
}

// unsampledRecorder returns a recorder that keeps every record (no
// per-second cap), writing to the buffer it returns.
func unsampledRecorder(t *testing.T) (*record.Recorder, *bytes.Buffer) {
	t.Helper()
	buf := new(bytes.Buffer)
	rec, err := record.New(record.Config{Writer: buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	return rec, buf
}
