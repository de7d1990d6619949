package record_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A request refused on sight (the middleware's 413 for a body over its
// maximum) is counted apart from the arrivals, in the ticks' "ref", and
// recorded as a refuse line that reads back with its class and status;
// ticks of a recorder that refused nothing carry no "ref", as before.
func TestRefusedRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"interactive", "batch"}})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200}) // the first tick
	if !rec.Refuse(1) {
		t.Fatal("an unsampled recorder did not sample a refusal")
	}
	rec.Add(record.Record{Kind: record.KindRefused, Time: t0.Add(time.Millisecond), Class: 1, Status: 413, InFlight: 3})
	rec.Arrive(0)
	rec.Shed(0)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	if len(recs) != 2 || len(ticks) != 2 {
		t.Fatalf("%d records and %d ticks\n%s", len(recs), len(ticks), buf.Bytes())
	}
	if r := recs[1]; r.Kind != record.KindRefused || r.ClassName != "batch" || r.Status != 413 || r.InFlight != 3 ||
		!r.Time.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("refusal read back as %+v", r)
	}
	_, firstTick, _ := strings.Cut(buf.String(), `{"k":"tick"`)
	if first := ticks[0].Tick; first.Refused != nil || strings.Contains(strings.SplitN(firstTick, "\n", 2)[0], `"ref"`) {
		t.Errorf("first tick %+v: a tick with nothing refused carries ref\n%s", first, buf.Bytes())
	}
	last := ticks[1].Tick
	if len(last.Refused) != 2 || last.Refused[1] != 1 || last.Arrivals[0] != 1 || last.Arrivals[1] != 0 || last.Shed[1] != 0 {
		t.Errorf("last tick %+v, want 1 refused in batch, apart from the arrivals", last)
	}
	if rec.Refuse(shed.MaxClasses) {
		t.Error("a refusal of a class out of range was sampled")
	}
}

// A refusal whose reason this reader does not know (a reason a newer
// writer added) is skipped, as lines of unknown kinds are: a recording
// made by a newer middleware stays readable; other lines still refuse an
// unknown reason, as they have no meaning without it.
func TestRefusalOfUnknownReasonIsSkipped(t *testing.T) {
	head := `{"k":"header","format":"` + record.FormatName + `","v":1,"epoch":"2026-01-01T00:00:00Z","classes":["default"]}` + "\n"
	refuse := `{"k":"refuse","t":1000,"c":0,"r":"some_later_reason","st":429}` + "\n"
	req := `{"k":"req","t":2000,"c":0,"st":200}` + "\n"
	r := record.NewReader(strings.NewReader(head + refuse + req))
	rec, err := r.Next()
	if err != nil || rec.Kind != record.KindRequest {
		t.Errorf("read %+v, %v; want the request", rec, err)
	}
	reject := `{"k":"reject","t":3000,"c":0,"r":"some_later_reason"}` + "\n"
	if rec, err := record.NewReader(strings.NewReader(head + reject)).Next(); err == nil {
		t.Errorf("a rejection of an unknown reason was read: %+v", rec)
	}
}
