package record_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// One record dated far ahead (a skewed caller, a wall clock stepped back
// after it) must not stop the ticks: the recorder took its next tick only
// once time reached the far date, so it wrote no tick and never re-chose
// the sampling, recording every event above MaxRecordsPerSecond.
func TestSkewedTimeDoesNotFreezeTicks(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: 100})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0.AddDate(100, 0, 0)})
	const events = 100_000 // 1,000 a second for 100 s
	for i := range events {
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * time.Millisecond)})
		if rec.Pending() > 1000 {
			_ = rec.Flush()
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	if len(ticks) < 50 {
		t.Errorf("%d ticks over 100 s of events after one skewed record, want about 100", len(ticks))
	}
	if len(recs) > events/4 {
		t.Errorf("%d of %d events recorded at 1,000/s with MaxRecordsPerSecond 100", len(recs), events)
	}
}
