package sim

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// keyConcScenario: two classes spread over tenants; api caps each
// tenant's requests in flight at 3 (its heaviest tenants run about 4
// at once, so they are refused often), batch caps nothing.
func keyConcScenario() *Scenario {
	return &Scenario{
		Name: "fit-keyconc", Duration: 30 * time.Second,
		Classes: []Class{
			{Name: "api", Rate: 300, Keys: &Keys{Count: 20, Zipf: 1}, KeyConcurrency: &KeyConcurrency{Limit: 3}},
			{Name: "batch", Rate: 50, Keys: &Keys{Count: 5}},
		},
		Upstream: Upstream{Capacity: 200, ServiceTime: Exp(float64(50 * time.Millisecond))},
	}
}

// TestFitKeyConcurrencyRoundTrip: the 429s of a cap on each tenant's
// requests in flight (shedredis.ConcurrencyMiddleware, key_concurrency in
// a scenario), recorded as the middleware records them, reach the fit:
// it reports how many each class had, counts them among the class's
// arrivals (they were offered) and infers the cap into the scenario. The
// recording used to hold none of them, and the report said the cap was
// not observed.
func TestFitKeyConcurrencyRoundTrip(t *testing.T) {
	fit := fitBytes(t, recordRun(t, keyConcScenario(), "none"))
	var rep strings.Builder
	WriteFitReport(&rep, fit)
	api, batch := fit.Scenario.Classes[0], fit.Scenario.Classes[1]
	if api.KeyConcurrency == nil || api.KeyConcurrency.Limit != 3 {
		t.Errorf("api: key_concurrency %+v, want limit 3 (the recorded cap)", api.KeyConcurrency)
	}
	if batch.KeyConcurrency != nil {
		t.Errorf("batch: key_concurrency %+v, want none (it capped nothing)", batch.KeyConcurrency)
	}
	if a := fit.Classes[0]; math.Abs(a.MeanRate/300-1) > 0.05 || a.KeyConcurrency.Records == 0 ||
		math.Abs(a.KeyConcurrency.Refused/float64(a.KeyConcurrency.Records)-1) > 0.01 || a.Shed < a.KeyConcurrency.Refused {
		t.Errorf("api: %.1f/s, %.0f shed, key concurrency %+v; want 300/s offered, its 429s counted (all recorded) and shed",
			a.MeanRate, a.Shed, a.KeyConcurrency)
	}
	if b := fit.Classes[1].KeyConcurrency; b.Records != 0 || b.Refused != 0 {
		t.Errorf("batch: key concurrency %+v, want nothing", b)
	}
	if !strings.Contains(rep.String(), "refused at a tenant's cap") {
		t.Errorf("the report does not say that api's tenants were capped:\n%s", rep.String())
	}
}

// TestFitKeyCappedAmongRefusals: the ticks count a class's refusals on
// sight together (413s for bodies, 429s at a tenant's cap); the fit tells
// them apart by the share of its records, exactly when every request is
// recorded and within a few percent when one in 2^k is. The 429s count
// among the arrivals, the 413s do not; a recording without tenant caps
// (as every one written before them) fits as it did.
func TestFitKeyCappedAmongRefusals(t *testing.T) {
	for _, tc := range []struct {
		name         string
		bodies, caps int // per second
		maxRate      float64
		tolerance    float64
		wantCapInfer bool
	}{
		{"all recorded", 5, 20, -1, 0.01, true},
		{"sampled", 5, 20, 100, 0.1, true},
		{"bodies only", 5, 0, -1, 0.01, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: tc.maxRate, Classes: []string{"api"}})
			if err != nil {
				t.Fatal(err)
			}
			rng := newStream(3, "test")
			const secs, rate = 30, 200
			for s := range secs {
				for i := range rate + tc.bodies + tc.caps {
					at := epoch.Add(time.Duration(s)*time.Second + time.Duration(i)*time.Second/time.Duration(rate+tc.bodies+tc.caps))
					switch {
					case i%10 == 1 && i/10 < tc.bodies:
						if rec.Refuse(0) {
							rec.Add(record.Record{Kind: record.KindRefused, Time: at, Status: 413})
						}
					case i%10 == 2 && i/10 < tc.caps:
						if rec.Refuse(0) {
							rec.Add(record.Record{Kind: record.KindRefused, Time: at, Status: 429, Reason: shed.ReasonKeyConcurrency,
								InFlight: 4, Key: record.KeyHash(fmt.Sprint("hot", i%2))})
						}
					default:
						key := record.KeyHash(fmt.Sprint("t", rng.IntN(10)))
						if rec.Arrive(0) {
							rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted, Cost: 1, Actual: 1, Key: key,
								Timed: true, Latency: time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)), Status: 200})
						}
						rec.Done(0)
					}
				}
				if err := rec.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			fit := fitBytes(t, buf.Bytes())
			cf := fit.Classes[0]
			near := func(got, want float64) bool { return math.Abs(got-want) <= tc.tolerance*want+1 }
			wantArr := float64(secs * (rate + tc.caps))
			if !near(cf.KeyConcurrency.Refused, float64(secs*tc.caps)) || !near(cf.Refused, float64(secs*tc.bodies)) || !near(cf.Arrivals, wantArr) {
				t.Errorf("%.0f capped, %.0f refused, %.0f arrivals; want %d, %d, %.0f within %.0f%%", cf.KeyConcurrency.Refused, cf.Refused, cf.Arrivals,
					secs*tc.caps, secs*tc.bodies, wantArr, 100*tc.tolerance)
			}
			if got := fit.Scenario.Classes[0].KeyConcurrency; (got != nil) != tc.wantCapInfer || (got != nil && got.Limit != 4) {
				t.Errorf("key_concurrency %+v, want limit 4: %v", got, tc.wantCapInfer)
			}
		})
	}
}
