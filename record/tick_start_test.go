package record_test

import (
	"bytes"
	"testing"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// The first tick starts the counts at zero, so that the differences from
// it count every event, the one that brought the first time included;
// when every event comes at one instant (a stopped clock), the final tick
// still closes the counts at that instant.
func TestFirstTickStartsTheCounts(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1})
	rec.Observe(shed.Event{Kind: shed.EventRejected, Time: t0, Reason: shed.ReasonLimit, Cost: 1})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, ticks := split(readAll(t, buf.Bytes()))
	if len(ticks) != 2 {
		t.Fatalf("%d ticks, want the start and the final one\n%s", len(ticks), buf.Bytes())
	}
	if first := ticks[0].Tick; first.Arrivals[0] != 0 || first.Shed[0] != 0 || !ticks[0].Time.Equal(t0) {
		t.Errorf("first tick %+v at %v, want zero counts at the first time", first, ticks[0].Time)
	}
	if last := ticks[1].Tick; last.Arrivals[0] != 2 || last.Shed[0] != 1 || !ticks[1].Time.Equal(t0) {
		t.Errorf("final tick %+v at %v, want 2 arrivals and 1 shed at the same instant", last, ticks[1].Time)
	}
}
