package record_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Add takes a Record from its caller: one whose fields the format cannot
// hold (a status outside 0-999, negative costs or durations, unknown
// decision, reason or outcome) must not be written as a line that the
// Reader refuses, which stops every reader of the recording there.
func TestAddOutOfRangeKeepsRecordingReadable(t *testing.T) {
	bad := []record.Record{
		{Status: 1000},
		{Status: 70000}, // int16: -- wrapped to a negative status
		{Status: -1},
		{Cost: -1},
		{Actual: -5},
		{Wait: -time.Second},
		{Latency: -time.Second, Timed: true},
		{Decision: 9},
		{Reason: shed.Reason(200)},
		{Outcome: shed.Outcome(9)},
		{InFlight: -3},
		{InFlight: 1 << 40},
	}
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	for i, r := range bad {
		r.Kind, r.Time = record.KindRequest, t0.Add(time.Duration(i)*time.Millisecond)
		rec.Add(r)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0.Add(time.Second / 2), Status: 200, Cost: 7})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	if len(recs) == 0 || recs[len(recs)-1].Cost != 7 {
		t.Errorf("the valid record after the bad ones was not read back: %+v (ticks %d)", recs, len(ticks))
	}
}

// The same for the events a hand-written Observer passes on: shed's own
// events are in range, but Observe is public.
func TestObserveOutOfRangeKeepsRecordingReadable(t *testing.T) {
	bad := []shed.Event{
		{Kind: shed.EventAdmitted, Cost: -1},
		{Kind: shed.EventAdmitted, Wait: -time.Second, Queued: true},
		{Kind: shed.EventRejected, Reason: shed.Reason(200)},
		{Kind: shed.EventReleased, Latency: -time.Second, Timed: true},
		{Kind: shed.EventReleased, Outcome: shed.Outcome(9)},
		{Kind: shed.EventReleased, Cost: -3},
		{Kind: shed.EventAdmitted, InFlight: -2},
		{Kind: shed.EventAdmitted, InFlight: 1 << 40},
	}
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	for i, ev := range bad {
		ev.Time = t0.Add(time.Duration(i) * time.Millisecond)
		rec.Observe(ev)
	}
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Second / 2), Cost: 7})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, _ := split(readAll(t, buf.Bytes()))
	if len(recs) == 0 || recs[len(recs)-1].Cost != 7 {
		t.Errorf("the valid record after the bad ones was not read back: %+v", recs)
	}
	for _, r := range recs {
		if r.InFlight != 0 {
			t.Errorf("in flight %d written for an event whose count did not fit", r.InFlight)
		}
	}
}
