package sim

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// refusedRecording records 30 s of 200 requests a second, as the
// middleware does, a tenth of them over the limiter's cost budget and a
// tenth over the body maximum, and returns it with how many of each and
// how many were served.
func refusedRecording(t *testing.T, maxRPS float64) (data []byte, served, costly, bodies int) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: maxRPS, Classes: []string{"api"}})
	if err != nil {
		t.Fatal(err)
	}
	rng := newStream(5, "test")
	for at := epoch; at.Before(epoch.Add(30 * time.Second)); {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(5*time.Millisecond)))
		switch u := rng.Float64(); {
		case u < 0.1: // a cost over the budget: the limiter rejects it
			costly++
			if rec.Arrive(0) {
				rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Rejected, Reason: shed.ReasonCostTooLarge,
					Cost: 1_000_000, Status: 413})
			}
			rec.Shed(0)
		case u < 0.2: // a body over the maximum: refused before admission
			bodies++
			if rec.Refuse(0) {
				rec.Add(record.Record{Kind: record.KindRefused, Time: at, Status: 413})
			}
		default:
			served++
			sampled := rec.Arrive(0)
			rec.Done(0)
			if sampled {
				rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted, Cost: 10, Actual: 10,
					Timed: true, Latency: time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)), Status: 200})
			}
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), served, costly, bodies
}

// TestFitRefusedOnSight: the requests a service answered 413, a body over
// the middleware's maximum (refused before admission) or a cost over the
// limiter's whole budget (its rejection, cost_too_large), were no work and
// never could be. The fitted scenario has neither limit, and would serve
// them: they must be left out of its arrivals and costs, and reported;
// exactly when every record was written, within a few percent when they
// were sampled.
func TestFitRefusedOnSight(t *testing.T) {
	for _, c := range []struct {
		maxRPS, tol float64
	}{{-1, 1e-9}, {40, 0.05}} {
		data, served, costly, bodies := refusedRecording(t, c.maxRPS)
		fit := fitBytes(t, data)
		cf := fit.Classes[0]
		if math.Abs(cf.Arrivals/float64(served)-1) > c.tol || cf.Shed > c.tol*float64(costly) {
			t.Errorf("max %v records/s: %.3f arrivals, %.3f shed: want the %d served and none shed (%d over the budget left out)",
				c.maxRPS, cf.Arrivals, cf.Shed, served, costly)
		}
		if want := float64(costly + bodies); math.Abs(cf.Refused/want-1) > c.tol {
			t.Errorf("max %v records/s: %.3f refused on sight, want %d over the budget and %d bodies", c.maxRPS, cf.Refused, costly, bodies)
		}
		if cf.Cost.Mean != 10 {
			t.Errorf("max %v records/s: cost from %d samples of mean %v, want the served requests' 10", c.maxRPS, cf.Cost.N, cf.Cost.Mean)
		}
	}
}
