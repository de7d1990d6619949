package sim

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// skewedRecording records 40 s of one class at 200/s, exponential
// service times of mean 40 ms, through a recorder that writes in batches
// as its writer does. With skew, the n requests that arrive first after
// 20 s are dated skew later (a caller's clock ahead, a bad timestamp);
// every other record is the same.
func skewedRecording(t *testing.T, skew time.Duration, n int) []byte {
	t.Helper()
	return skewedRecordingAfter(t, skew, n, 20*time.Second)
}

// skewedRecordingAfter is skewedRecording with the skewed requests the
// first n that arrive after after (0: the first n of the recording).
func skewedRecordingAfter(t *testing.T, skew time.Duration, n int, after time.Duration) []byte {
	t.Helper()
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"chat"}})
	if err != nil {
		t.Fatal(err)
	}
	rng := newStream(11, "test")
	service := Exp(float64(40 * time.Millisecond))
	at, skewed := epoch, 0
	for at.Before(epoch.Add(40 * time.Second)) {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(5*time.Millisecond)))
		r := record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted, Cost: 1, Actual: 1,
			Timed: true, Latency: time.Duration(service.sample(rng)), Status: 200}
		if skew != 0 && skewed < n && at.After(epoch.Add(after)) {
			r.Time, skewed = at.Add(skew), skewed+1
		}
		rec.Arrive(0)
		rec.Done(0)
		rec.Add(r)
		if rec.Pending() > 500 {
			if err := rec.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFitSetsAsideSkewedRecord: one record dated an hour ahead of the
// rest fits the same scenario as the recording without it, and the
// report says one record was set aside. The fit used to stretch its
// timeline to the far date (an hour of near-empty intervals) and count
// the exposure of the intervals before it twice. Records dated 15 s back
// (two in a row: the recorder no longer ticks at one lone bad time) make
// the recorder tick back there, and the fit counted those 15 s twice too,
// halving their rate: that tick is set aside; one such record, which the
// recorder no longer ticks at, sets nothing aside.
func TestFitSetsAsideSkewedRecord(t *testing.T) {
	want := fitBytes(t, skewedRecording(t, 0, 0))
	for _, tc := range []struct {
		skew time.Duration
		n    int
		note string
	}{{time.Hour, 1, "set aside 1 record and"}, {-15 * time.Second, 2, "set aside 0 records and 1 tick"}, {-15 * time.Second, 1, ""}} {
		t.Run(fmt.Sprintf("%v*%d", tc.skew, tc.n), func(t *testing.T) {
			got := fitBytes(t, skewedRecording(t, tc.skew, tc.n))
			sameFit(t, got, want)
			var rep strings.Builder
			WriteFitReport(&rep, got)
			if has := strings.Contains(rep.String(), "set aside"); tc.note == "" && has {
				t.Errorf("the report sets records aside:\n%s", rep.String())
			} else if !strings.Contains(rep.String(), tc.note) {
				t.Errorf("the report does not say %q:\n%s", tc.note, rep.String())
			}
		})
	}
	var rep strings.Builder
	WriteFitReport(&rep, want)
	if strings.Contains(rep.String(), "set aside") {
		t.Errorf("a recording without skew has records set aside:\n%s", rep.String())
	}
}

// sameFit checks that got fits the scenario want does, within tolerance.
func sameFit(t *testing.T, got, want *Fit) {
	t.Helper()
	if got.Span != want.Span || got.Intervals != want.Intervals || got.Scenario.Duration != want.Scenario.Duration {
		t.Errorf("span %v (%d intervals, duration %v), want %v (%d, %v) as without the skewed record",
			got.Span, got.Intervals, got.Scenario.Duration, want.Span, want.Intervals, want.Scenario.Duration)
	}
	g, w := got.Scenario.Classes[0], want.Scenario.Classes[0]
	if math.Abs(g.Rate/w.Rate-1) > 0.02 || len(g.Schedule) != len(w.Schedule) {
		t.Errorf("rate %.1f/s, schedule %v; want %.1f/s, %v within 2%%", g.Rate, g.Schedule, w.Rate, w.Schedule)
	}
	for i := range min(len(g.Schedule), len(w.Schedule)) {
		if gs, ws := g.Schedule[i], w.Schedule[i]; gs.At != ws.At || math.Abs(gs.Rate/ws.Rate-1) > 0.02 {
			t.Errorf("schedule[%d] %+v, want %+v within 2%%", i, gs, ws)
		}
	}
	if gm, wm := distMedian(got.Scenario.Upstream.ServiceTime), distMedian(want.Scenario.Upstream.ServiceTime); math.Abs(gm/wm-1) > 0.02 {
		t.Errorf("median service time %v, want %v within 2%%", time.Duration(gm), time.Duration(wm))
	}
	if gc, wc := got.Capacity.Servers, want.Capacity.Servers; math.Abs(gc/wc-1) > 0.05 {
		t.Errorf("capacity %.1f, want %.1f within 5%%", gc, wc)
	}
}

// TestFitSetsAsideSkewedFirstRecord: a recording whose very first record
// is dated far ahead of (or behind) the rest fits the scenario the
// recording without the skew fits, and the report says what was set
// aside. The first record used to start the fit's timeline unchecked:
// dated an hour ahead, every later record fell before the fit's start.
func TestFitSetsAsideSkewedFirstRecord(t *testing.T) {
	want := fitBytes(t, skewedRecordingAfter(t, 0, 0, 0))
	for _, skew := range []time.Duration{time.Hour, -time.Hour, 48 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			got := fitBytes(t, skewedRecordingAfter(t, skew, 1, 0))
			sameFit(t, got, want)
			var rep strings.Builder
			WriteFitReport(&rep, got)
			if !strings.Contains(rep.String(), "set aside 1 record") {
				t.Errorf("the report does not say the first record was set aside:\n%s", rep.String())
			}
		})
	}
}
