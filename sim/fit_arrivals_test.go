package sim

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// lastTick returns the last tick of a recording: its last line, which
// Stop writes, read under its header (the first line).
func lastTick(t *testing.T, data []byte) *record.Tick {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	r, err := record.NewReader(bytes.NewReader(bytes.Join([][]byte{lines[0], lines[len(lines)-1]}, []byte("\n")))).Next()
	if err != nil || r.Tick == nil {
		t.Fatalf("the last line is not a tick (%v): %s", err, lines[len(lines)-1])
	}
	return r.Tick
}

// TestFitCountsEveryArrival: the fit's arrivals are the recorder's, to
// the request, in a recording of the limiter's decisions (sim.RecordPolicy)
// and in one of whole requests (the middleware's): the arrivals counted
// before the recorder's first tick were lost (1,938 of 1,939).
func TestFitCountsEveryArrival(t *testing.T) {
	sc := &Scenario{Name: "small", Duration: 10 * time.Second, Classes: []Class{{Name: "a", Rate: 200}},
		Upstream: Upstream{Capacity: 50, ServiceTime: Exp(float64(10 * time.Millisecond))}}
	observed := recordRun(t, sc, "none")

	var requests bytes.Buffer
	rec, err := record.New(record.Config{Writer: &requests, MaxRecordsPerSecond: -1, Classes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	at := epoch
	for i := range 2000 {
		// Each request is counted when it arrives and added when it ends,
		// 30 ms later, as the middleware does: the first tick comes at
		// the first end, after a few arrivals.
		rec.Arrive(0)
		at = at.Add(5 * time.Millisecond)
		if i >= 6 {
			rec.Done(0)
			rec.Add(record.Record{Kind: record.KindRequest, Time: at.Add(-30 * time.Millisecond), Decision: record.Admitted,
				Cost: 1, Timed: true, Latency: 30 * time.Millisecond, Outcome: 0, Status: 200})
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"observer": observed, "requests": requests.Bytes()} {
		want := lastTick(t, data).Arrivals[0]
		fit, err := FitRecording(record.NewReader(bytes.NewReader(data)), FitOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := fit.Classes[0].Arrivals; math.Abs(got-float64(want)) > 1e-6 {
			t.Errorf("%s: fitted %.6f arrivals, the recorder counted %d", name, got, want)
		}
	}
}
