package record_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newRec(t testing.TB, cfg record.Config) *record.Recorder {
	t.Helper()
	r, err := record.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readAll(t testing.TB, data []byte) []record.Record {
	t.Helper()
	rd := record.NewReader(bytes.NewReader(data))
	var out []record.Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		out = append(out, rec)
	}
}

func TestConfigErrors(t *testing.T) {
	var buf bytes.Buffer
	for _, c := range []struct {
		cfg   record.Config
		field string
	}{
		{record.Config{}, "Dir"},
		{record.Config{Dir: t.TempDir(), Writer: &buf}, "Writer"},
		{record.Config{Writer: &buf, MaxFileBytes: -1}, "MaxFileBytes"},
		{record.Config{Writer: &buf, MaxFiles: -1}, "MaxFiles"},
		{record.Config{Writer: &buf, Buffer: -1}, "Buffer"},
		{record.Config{Writer: &buf, TickEvery: -1}, "TickEvery"},
		{record.Config{Writer: &buf, FlushEvery: -1}, "FlushEvery"},
		{record.Config{Writer: &buf, Classes: make([]string, 17)}, "Classes"},
		{record.Config{Dir: filepath.Join(writeFile(t, "x"), "sub")}, "Dir"},
	} {
		_, err := record.New(c.cfg)
		if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%+v: got %v, want an ErrInvalidConfig naming %s", c.cfg, err, c.field)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestObserverRoundTrip drives a limiter in explicit time with the
// recorder as its Observer, and reads back what it wrote.
func TestObserverRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	lim, err := shed.New(shed.Config{Limit: 2, Observer: rec, Clock: func() time.Time { return t0 },
		Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch", QueueDepth: 1, MaxWait: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	rec.Watch(lim)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p1, _ := lim.TryAcquireAt(at(1), shed.Request{Class: 0, Cost: 5})
	p2, _ := lim.TryAcquireAt(at(2), shed.Request{Class: 1})
	if _, err := lim.TryAcquireAt(at(3), shed.Request{Class: 0}); err == nil {
		t.Fatal("admitted over the limit")
	}
	w := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, _ := lim.EnqueueAt(at(4), shed.Request{Class: 1}, w); !queued {
		t.Fatal("not queued")
	}
	p1.ReconcileAt(at(5), 3)
	p1.ReleaseAt(at(1005), shed.Success) // admits the waiter, and ticks
	p2.ReleaseAt(at(1010), shed.Dropped)
	p3, _ := w.Result()
	p3.ReleaseAt(at(1020), shed.Success)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	got, ticks := split(readAll(t, buf.Bytes()))
	var kinds []string
	for _, r := range got {
		kinds = append(kinds, r.Kind.String())
	}
	want := "admit admit reject admit release release release"
	if strings.Join(kinds, " ") != want || len(ticks) != 3 {
		t.Fatalf("kinds %v and %d ticks, want %s and 3\n%s", kinds, len(ticks), want, buf.Bytes())
	}
	if r := got[0]; r.ClassName != "interactive" || r.Cost != 5 || !r.Time.Equal(at(1)) || r.InFlight != 1 {
		t.Errorf("first admission: %+v", r)
	}
	if r := got[2]; r.Reason != shed.ReasonLimit || r.Class != 0 {
		t.Errorf("rejection: %+v", r)
	}
	if r := got[4]; r.Actual != 3 || r.Latency != 1004*time.Millisecond || !r.Timed || r.Outcome != shed.Success {
		t.Errorf("release: %+v", r)
	}
	if r := got[3]; !r.Queued || r.Wait != 1001*time.Millisecond || r.ClassName != "batch" {
		t.Errorf("admission after waiting: %+v", r)
	}
	// Ticks: at the first event, at the first after 1 s (the release at
	// 1005 ms, before it counts), and at Stop.
	if tk := ticks[1].Tick; !ticks[1].Time.Equal(at(1005)) || tk.Limit != 2 || tk.Arrivals[0] != 2 || tk.Arrivals[1] != 2 || tk.Shed[0] != 1 || tk.Done[0] != 0 {
		t.Errorf("tick: %+v %+v", ticks[1], tk)
	}
	if tk := ticks[2].Tick; !ticks[2].Time.Equal(at(1020)) || tk.Done[0] != 1 || tk.Done[1] != 2 || tk.InFlight != 0 {
		t.Errorf("last tick: %+v", tk)
	}
	if h, ok := record.NewReader(bytes.NewReader(buf.Bytes())), true; ok {
		h.Next()
		hd, _ := h.Header()
		if !hd.Epoch.Equal(t0) || strings.Join(hd.Classes, ",") != "interactive,batch" || hd.TickEvery != time.Second {
			t.Errorf("header %+v", hd)
		}
	}
}

// TestRequestRecord writes a whole request, as the middleware does.
func TestRequestRecord(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, Classes: []string{"a", "b"}})
	in := record.Record{Kind: record.KindRequest, Time: t0.Add(1500 * time.Millisecond), Class: 1, Decision: record.Admitted,
		Cost: 1500, Actual: 900, Queued: true, Wait: 3 * time.Millisecond, Latency: 48 * time.Millisecond, Timed: true,
		Outcome: shed.Dropped, Status: 504, InFlight: 37}
	if !rec.Arrive(1) {
		t.Fatal("first arrival not sampled")
	}
	rec.Done(1)
	rec.Add(in)
	rej := record.Record{Kind: record.KindRequest, Time: t0.Add(2 * time.Second), Decision: record.Rejected, Reason: shed.ReasonRateLimited, Status: 429}
	rec.Arrive(0)
	rec.Shed(0)
	rec.Add(rej)
	rec.Add(record.Record{Kind: record.KindTick, Time: t0}) // ignored
	rec.Add(record.Record{Kind: record.KindRequest})        // no time: ignored
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	got, ticks := split(readAll(t, buf.Bytes()))
	if len(got) != 2 || len(ticks) != 2 {
		t.Fatalf("got %d records and %d ticks\n%s", len(got), len(ticks), buf.Bytes())
	}
	out := got[0]
	in.ClassName = "b"
	if out != in {
		t.Errorf("read back\n%+v\nwant\n%+v", out, in)
	}
	if r := got[1]; r.Decision != record.Rejected || r.Reason != shed.ReasonRateLimited || r.Status != 429 || r.ClassName != "a" {
		t.Errorf("rejection read back as %+v", r)
	}
	if tk := ticks[1].Tick; tk.Arrivals[0] != 1 || tk.Arrivals[1] != 1 || tk.Shed[0] != 1 || tk.Done[1] != 1 {
		t.Errorf("tick %+v", tk)
	}
}

// TestSampling checks that above MaxRecordsPerSecond only a power-of-two
// share of the requests is recorded while the tick counters stay exact.
func TestSampling(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: 100, Buffer: 1 << 16})
	n := 0
	for ms := 0; ms < 5000; ms++ {
		for range 2 { // 2,000 per second: sampled 1 in 32
			at := t0.Add(time.Duration(ms) * time.Millisecond)
			if rec.Arrive(0) {
				rec.Add(record.Record{Kind: record.KindRequest, Time: at, Timed: true, Latency: time.Millisecond})
				n++
			}
			rec.Done(0)
		}
	}
	rec.Stop()
	var ticks []*record.Tick
	for _, r := range readAll(t, buf.Bytes()) {
		if r.Tick != nil {
			ticks = append(ticks, r.Tick)
		}
	}
	last := ticks[len(ticks)-1]
	if last.SampleEvery != 32 || n > 2000+4*2000/32+10 {
		t.Errorf("sampling every %d, %d records", last.SampleEvery, n)
	}
	if last.Arrivals[0] != 10000 || last.Done[0] != 10000 {
		t.Errorf("counters %v %v", last.Arrivals, last.Done)
	}
}

// TestRotation writes a directory of small files and reads it back.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	rec := newRec(t, record.Config{Dir: dir, MaxFileBytes: 2000, MaxFiles: 3, MaxRecordsPerSecond: -1})
	for i := range 200 {
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Duration(i) * time.Millisecond), Timed: true, Latency: time.Duration(i)})
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
		fi, _ := os.Stat(n)
		if fi.Size() > 2000 {
			t.Errorf("%s: %d bytes, over the cap", n, fi.Size())
		}
	}
	recs, err := record.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ = split(recs)
	last := recs[len(recs)-1]
	if last.Kind != record.KindRequest || last.Latency != 199 {
		t.Errorf("last record %+v", last)
	}
	// A new recorder continues the numbering.
	rec2 := newRec(t, record.Config{Dir: dir, MaxFiles: 10})
	rec2.Add(record.Record{Kind: record.KindRequest, Time: t0})
	rec2.Stop()
	if st := rec2.Stats(); st.Files != 1 || st.Written != 2 { // the record and the last tick
		t.Errorf("stats %+v", st)
	}
	names2, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(names2) != 4 || names2[3] <= names[2] {
		t.Errorf("files after a restart: %v", names2)
	}
}

func TestStreamCapAndWriteError(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxFileBytes: 500})
	for i := range 20 {
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Duration(i))})
	}
	rec.Stop()
	if st := rec.Stats(); buf.Len() > 500 || st.Lost == 0 || st.Written == 0 || st.Written+st.Lost != 22 { // and two ticks
		t.Errorf("%d bytes, stats %+v", buf.Len(), st)
	}
	fail := errors.New("disk full")
	rec = newRec(t, record.Config{Writer: failWriter{fail}})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	if err := rec.Flush(); !errors.Is(err, fail) {
		t.Errorf("Flush: %v", err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	if err := rec.Stop(); !errors.Is(err, fail) || rec.Stats().Lost == 0 {
		t.Errorf("Stop: %v, stats %+v", err, rec.Stats())
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestStartStop(t *testing.T) {
	var buf syncBuffer
	rec := newRec(t, record.Config{Writer: &buf, FlushEvery: time.Millisecond})
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); !errors.Is(err, record.ErrRunning) {
		t.Errorf("second Start: %v", err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	deadline := time.Now().Add(10 * time.Second)
	for rec.Stats().Written == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := rec.Start(); !errors.Is(err, record.ErrStopped) {
		t.Errorf("Start after Stop: %v", err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	rec.Flush()
	if st := rec.Stats(); st.Written != 2 || st.Lost != 1 || !strings.Contains(buf.String(), `"k":"req"`) {
		t.Errorf("stats %+v, output %s", st, buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUntimedEvents: the wall-clock API leaves most events untimed; they
// take the latest time seen, and are not recorded before any.
func TestUntimedEvents(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Second)})
	rec.Observe(shed.Event{Kind: shed.EventRejected, Reason: shed.ReasonLimit})
	rec.Stop()
	got, _ := split(readAll(t, buf.Bytes()))
	if st := rec.Stats(); st.Untimed != 1 || len(got) != 2 || !got[1].Time.Equal(t0.Add(time.Second)) {
		t.Errorf("stats %+v, records %+v", st, got)
	}
}

// split separates the ticks from the other records.
func split(all []record.Record) (recs, ticks []record.Record) {
	for _, r := range all {
		if r.Kind == record.KindTick {
			ticks = append(ticks, r)
		} else {
			recs = append(recs, r)
		}
	}
	return recs, ticks
}
