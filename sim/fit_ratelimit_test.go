package sim

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// fitRateScenario has a class whose traffic triples past its rate limit
// (150/s, burst 30) for 20 s, from 100/s that the bucket lets through
// whole, and a class without a rate limit; the upstream (100 servers,
// 20 ms) never saturates.
func fitRateScenario() *Scenario {
	return &Scenario{
		Name: "fit-rate", Duration: 60 * time.Second,
		Classes: []Class{
			{Name: "api", Rate: 100, Schedule: []RateChange{{At: 20 * time.Second, Rate: 300, For: 20 * time.Second}},
				RateLimit: &RateLimit{RPS: 150, Burst: 30}},
			{Name: "batch", Rate: 200},
		},
		Upstream: Upstream{Capacity: 100, ServiceTime: LogNorm(float64(20*time.Millisecond), 0.5)},
	}
}

// TestFitRateLimitRoundTrip: a simulated service whose class has a known
// rate limit, recorded through its limiter's Observer (the simulator
// tells it the 429s, as the middleware does), fitted back: the offered
// rates include the 429s, the limit's rate is within 10%, its burst is
// measured, and the class without 429s gets no rate limit. The fitted
// scenario refuses about as many requests as the truth.
func TestFitRateLimitRoundTrip(t *testing.T) {
	truth := fitRateScenario()
	fit := fitBytes(t, recordRun(t, truth, "none"))
	sc := fit.Scenario
	checkFittedRates(t, truth, sc, 5, 15, 25, 35, 45, 55)
	api, batch := fit.Classes[0].RateLimit, fit.Classes[1].RateLimit
	l := sc.Classes[0].RateLimit
	if l == nil || math.Abs(l.RPS/150-1) > 0.10 {
		t.Fatalf("api rate limit %+v (%+v), want 150/s within 10%%", l, api)
	}
	if !api.BurstObserved || l.Burst < 20 || l.Burst > 40 || api.Confidence != "high" || api.Intervals < 18 {
		t.Errorf("api rate limit %+v: want a measured burst near 30, from about 20 intervals, confidence high", api)
	}
	if sc.Classes[1].RateLimit != nil || batch.Records != 0 || batch.Confidence != "none" {
		t.Errorf("batch, which saw no 429, got a rate limit: %+v", batch)
	}
	none, _ := ParsePolicy("none")
	rt, err := Run(truth, none, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	rf, err := Run(sc, none, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := float64(rf.Summary.RateLimited), float64(rt.Summary.RateLimited); math.Abs(g/w-1) > 0.10 || math.Abs(api.RateLimited/w-1) > 0.01 {
		t.Errorf("429s: %v in the truth, %v estimated, %v when the fitted scenario runs", w, api.RateLimited, g)
	}
}

// TestFitRateLimitSampled: a recording sampled at 1 in 2 or more still
// gives the rate (the 429s are split from the ticks' exact rejections by
// the sampled records' reasons), and says that the burst is not observed.
func TestFitRateLimitSampled(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ParsePolicy("none")
	if _, err := Run(fitRateScenario(), RecordPolicy(p, rec, 0), Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fit := fitBytes(t, buf.Bytes())
	api := fit.Classes[0].RateLimit
	if fit.SampleEvery < 2 || api.Limit == nil || math.Abs(api.Limit.RPS/150-1) > 0.10 {
		t.Fatalf("sampled 1 in %d: api rate limit %+v, want 150/s within 10%%", fit.SampleEvery, api)
	}
	notes := strings.Join(fit.Notes, "\n")
	if api.BurstObserved || api.Limit.Burst != DefaultBurst(api.Limit.RPS) || !strings.Contains(notes, "class api: burst not observed") ||
		!strings.Contains(notes, "the 429 counts are estimates") {
		t.Errorf("api rate limit %+v, notes:\n%s", api, notes)
	}
	if fit.Classes[1].RateLimit.Limit != nil {
		t.Errorf("batch got a rate limit: %+v", fit.Classes[1].RateLimit)
	}
}

// TestFitRateLimitFewRecords: three 429s in a recording of a class at
// 200/s are no evidence of a limit: none is inferred, and the notes and
// the report say why.
func TestFitRateLimitFewRecords(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"chat"}})
	if err != nil {
		t.Fatal(err)
	}
	rng := newStream(5, "test")
	service := Exp(float64(40 * time.Millisecond))
	at := epoch
	for i := 0; at.Before(epoch.Add(30 * time.Second)); i++ {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(5*time.Millisecond))) // 200/s
		rec.Arrive(0)
		if i%2000 == 1000 {
			rec.Shed(0)
			rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Rejected, Reason: shed.ReasonRateLimited, Cost: 1, Status: 429})
			continue
		}
		rec.Done(0)
		rec.Add(record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted, Cost: 1, Actual: 1, Timed: true,
			Latency: time.Duration(service.sample(rng)), Status: 200})
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fit := fitBytes(t, buf.Bytes())
	r := fit.Classes[0].RateLimit
	if r.Records != 3 || r.Limit != nil || fit.Scenario.Classes[0].RateLimit != nil || r.Confidence != "none" {
		t.Errorf("3 429s: %+v, want no rate limit", r)
	}
	if notes := strings.Join(fit.Notes, "\n"); !strings.Contains(notes, "class chat: only 3 429 records (rate limited), too few to infer its limit (at least 20 needed): the scenario sets no rate limit") {
		t.Errorf("notes:\n%s", notes)
	}
	var rep strings.Builder
	WriteFitReport(&rep, fit)
	if !strings.Contains(rep.String(), "chat           none inferred: only 3 429 records (rate limited), too few to infer its limit (at least 20 needed)\n") {
		t.Errorf("report:\n%s", rep.String())
	}
}

// TestBurstOnsetExcess checks the burst measured before a 429: the most
// requests that passed in a span ending at the 429, beyond the rate.
func TestBurstOnsetExcess(t *testing.T) {
	var b burstRing
	base := epoch.UnixNano()
	// 1 s at 50/s (one every 4 bins), then 40 at once, then a 429.
	for i := range 50 {
		b.add(base+int64(i)*4*burstBin, false)
	}
	t0 := base + 250*burstBin
	for range 40 {
		b.add(t0, false)
	}
	b.add(t0+burstBin, true)
	b.add(t0+burstBin+1, true) // a second 429 in the spell: no onset
	b.add(t0+3*burstSpan*burstBin, true)
	b.add(t0+20*time.Minute.Nanoseconds(), false) // far ahead: settles all
	b.finish()
	if len(b.onsets) != 2 || b.onsets[0].bin != (t0+burstBin)/burstBin {
		t.Fatalf("onsets %d, want 2 (the first at bin %d)", len(b.onsets), (t0+burstBin)/burstBin)
	}
	// At 50/s exactly the rate of the first second: 40 beyond it.
	if got := b.onsets[0].excess(50 * float64(burstBin) / 1e9); math.Abs(got-40) > 1 {
		t.Errorf("excess %v, want 40", got)
	}
	if got := b.onsets[1].excess(50 * float64(burstBin) / 1e9); got != 0 {
		t.Errorf("excess of a span without passes %v, want 0", got)
	}
}

// TestFitRateLimitSmallBucket documents what the fit cannot do: a bucket
// of one token refuses Poisson traffic below its rate by chance, so the
// rate that passed falls short of its rate. The fit must say so: low
// confidence and a note, not a confident wrong limit.
func TestFitRateLimitSmallBucket(t *testing.T) {
	sc := &Scenario{
		Name: "small-bucket", Duration: 60 * time.Second,
		Classes: []Class{{Name: "a", Rate: 50, Schedule: []RateChange{{At: 20 * time.Second, Rate: 150, For: 30 * time.Second}},
			RateLimit: &RateLimit{RPS: 100, Burst: 1}}},
		Upstream: Upstream{Capacity: 100, ServiceTime: LogNorm(float64(20*time.Millisecond), 0.5)},
	}
	fit := fitBytes(t, recordRun(t, sc, "none"))
	r := fit.Classes[0].RateLimit
	if r.Limit == nil || r.Confidence != "low" || !strings.Contains(strings.Join(fit.Notes, "\n"), "class a: the rate that passed the rate limit varied by") {
		t.Errorf("burst 1: %+v (limit %+v), notes %q: want low confidence and a note", r, r.Limit, fit.Notes)
	}
}

// TestFitRateLimitRequestRecords fits whole-request records as the net/http
// middleware writes them: a 429 when it is answered, an admitted request
// when it ends, seconds later, so that the records reach the fit out of
// arrival order. The bucket is x/time/rate's, as the middleware's
// MemoryStore runs it: 150/s, burst 30, against 100/s that triples for
// 20 s.
func TestFitRateLimitRequestRecords(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"chat"}})
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		at   time.Time
		end  bool
		r    record.Record
		done bool
	}
	rng := newStream(9, "test")
	bucket := xrate.NewLimiter(150, 30)
	service := Exp(float64(2 * time.Second))
	var evs []event
	for at := epoch; at.Before(epoch.Add(60 * time.Second)); {
		rate := 100.0
		if at.Sub(epoch) >= 20*time.Second && at.Sub(epoch) < 40*time.Second {
			rate = 300
		}
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !bucket.AllowN(at, 1) {
			evs = append(evs, event{at: at, r: record.Record{Kind: record.KindRequest, Time: at, Decision: record.Rejected, Reason: shed.ReasonRateLimited, Cost: 1, Status: 429}})
			continue
		}
		lat := time.Duration(service.sample(rng))
		evs = append(evs, event{at: at}, event{at: at.Add(lat), end: true, done: true,
			r: record.Record{Kind: record.KindRequest, Time: at, Decision: record.Admitted, Cost: 1, Actual: 1, Timed: true, Latency: lat, Status: 200}})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	for _, e := range evs {
		if !e.end {
			rec.Arrive(0)
		}
		switch {
		case e.done:
			rec.Done(0)
		case e.r.Kind != 0:
			rec.Shed(0)
		}
		if e.r.Kind != 0 {
			rec.Add(e.r)
		}
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fit := fitBytes(t, buf.Bytes())
	r := fit.Classes[0].RateLimit
	if r.Limit == nil || math.Abs(r.Limit.RPS/150-1) > 0.10 || !r.BurstObserved || r.Limit.Burst < 20 || r.Limit.Burst > 40 {
		t.Errorf("rate limit %+v (%+v), want 150/s within 10%% and a measured burst near 30", r.Limit, r)
	}
}
