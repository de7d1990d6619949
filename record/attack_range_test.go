package record_test

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Times that Unix nanoseconds cannot hold (after 2262, before 1678) wrapped
// around into a garbage "t": such records must be ignored, and must not
// move the ticks.
func TestTimesOutsideUnixNanoIgnored(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0.AddDate(300, 0, 0), Status: 201})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0.AddDate(-400, 0, 0), Status: 202})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.AddDate(300, 0, 0), Cost: 3})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, r := range readAll(t, buf.Bytes()) {
		if r.Time.Sub(t0).Abs() > time.Hour {
			t.Errorf("%s record at %v (status %d, cost %d) written", r.Kind, r.Time, r.Status, r.Cost)
		}
	}
}

// A disk that is full (/dev/full answers ENOSPC): the first write error is
// kept and returned, nothing more is written, the rest is counted as lost.
func TestDiskFull(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	rec := newRec(t, record.Config{Writer: f, MaxRecordsPerSecond: -1, Buffer: 16})
	for i := range 100 {
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Duration(i) * time.Millisecond), Status: 200})
		if rec.Pending() > 8 {
			_ = rec.Flush()
		}
	}
	err = rec.Stop()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Stop: %v, want ENOSPC", err)
	}
	st := rec.Stats()
	if !errors.Is(st.Err, syscall.ENOSPC) || st.Written+st.Lost < 100 {
		t.Errorf("stats %+v: want the error and every record accounted for", st)
	}
}
