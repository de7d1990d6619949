package record_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Stop says that records that come afterwards are dropped and counted:
// they must show in Stats.Lost, not sit in the buffer unaccounted for.
func TestRecordsAfterStopCounted(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	before := rec.Stats()
	for i := range 5 {
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Duration(i+1) * time.Millisecond), Status: 200})
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i+1) * time.Millisecond)})
	}
	after := rec.Stats()
	if got := after.Lost - before.Lost; got != 10 {
		t.Errorf("10 records after Stop: Lost grew by %d (pending %d)", got, rec.Pending())
	}
}
