package sim

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestFitQuietCountsEveryArrival: in a quiet recording (requests further
// apart than ten tick periods) the recorder's Stop writes its final tick
// at the time of the tick before it, with the counts of the last request;
// the fit took that tick for the start of a new segment and dropped them
// (391 arrivals fitted as 390).
func TestFitQuietCountsEveryArrival(t *testing.T) {
	const latency = 20 * time.Millisecond
	for _, c := range []struct {
		name string
		n    int
		gap  time.Duration
		// every is the fit's interval: long enough to hold the ten
		// timed successes a fit needs.
		every time.Duration
		// observe records the limiter's events (Recorder.Observe), an
		// admission and its timed release, not whole requests: the
		// release confirms the admission's far time, so the final tick
		// comes after the one before it: the usual path, kept exact.
		observe bool
	}{
		{"15s_apart", 391, 15 * time.Second, 5 * time.Minute, false},
		{"1m_apart", 100, time.Minute, 15 * time.Minute, false},
		{"observed_15s_apart", 391, 15 * time.Second, 5 * time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"a"}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range c.n {
				at := epoch.Add(time.Duration(i) * c.gap)
				if c.observe {
					rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1, InFlight: 1})
					rec.Observe(shed.Event{Kind: shed.EventReleased, Time: at.Add(latency), Outcome: shed.Success,
						Cost: 1, Timed: true, Latency: latency})
					continue
				}
				rec.Arrive(0)
				rec.Done(0)
				rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted,
					Cost: 1, Timed: true, Latency: latency, Status: 200})
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if got := lastTick(t, buf.Bytes()).Arrivals[0]; got != uint64(c.n) {
				t.Fatalf("the recorder's last tick counts %d arrivals, want %d", got, c.n)
			}
			fit, err := FitRecording(record.NewReader(bytes.NewReader(buf.Bytes())), FitOptions{Interval: c.every})
			if err != nil {
				t.Fatal(err)
			}
			if got := fit.Classes[0].Arrivals; math.Abs(got-float64(c.n)) > 1e-6 {
				t.Errorf("fitted %.6f arrivals, the recorder counted %d", got, c.n)
			}
		})
	}
}
