package record_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// A store call (shedredis with Config.Recorder) reads back as it was
// recorded: its start, duration, operation and result, with no class and
// no key; it counts in no tick, and records the format cannot hold are
// ignored.
func TestStoreRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"interactive"}})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200}) // the first tick
	calls := []record.Record{
		{Kind: record.KindStore, Time: t0.Add(time.Millisecond), Op: record.StoreAllow, Result: record.StoreOK, Latency: 600 * time.Microsecond, Timed: true},
		{Kind: record.KindStore, Time: t0.Add(2 * time.Millisecond), Op: record.StoreAcquire, Result: record.StoreTimeout, Latency: 5 * time.Millisecond, Timed: true},
		{Kind: record.KindStore, Time: t0.Add(3 * time.Millisecond), Op: record.StoreRenew, Result: record.StoreBreakerOpen, Timed: true},
	}
	for _, c := range calls {
		if !rec.StoreCall() {
			t.Fatal("an unsampled recorder did not sample a store call")
		}
		rec.Add(c)
	}
	for _, bad := range []record.Record{
		{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Latency: time.Millisecond},                     // not timed
		{Kind: record.KindStore, Time: t0, Op: 0, Timed: true},                                                   // no operation
		{Kind: record.KindStore, Time: t0, Op: record.StoreCleanup + 1, Timed: true},                             // unknown operation
		{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Result: record.StoreCanceled + 1, Timed: true}, // unknown result
		{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Timed: true, Latency: -1},                      // negative
		{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Timed: true, Class: 1},                         // a class
		{Kind: record.KindStore, Time: t0, Op: record.StoreAllow, Timed: true, Key: record.KeyHash("tenant")},    // a key
	} {
		rec.Add(bad)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	if len(recs) != 1+len(calls) {
		t.Fatalf("%d records, want %d\n%s", len(recs), 1+len(calls), buf.Bytes())
	}
	for i, want := range calls {
		got := recs[1+i]
		if got.Kind != want.Kind || !got.Time.Equal(want.Time) || got.Op != want.Op || got.Result != want.Result ||
			got.Latency != want.Latency || !got.Timed || got.ClassName != "" || got.Key != 0 {
			t.Errorf("call %d read back as %+v, want %+v", i, got, want)
		}
	}
	if last := ticks[len(ticks)-1].Tick; last.Arrivals[0] != 0 || last.Done[0] != 0 || last.Refused != nil {
		t.Errorf("last tick %+v: store calls counted as requests", last)
	}
	if !strings.Contains(buf.String(), `{"k":"store","t":2000000,"op":"acquire","lat":5000000,"res":"timeout"}`) {
		t.Errorf("no store line as the package documentation shows it:\n%s", buf.Bytes())
	}
}

// StoreCall samples as the recorder samples requests: one in 2^k.
func TestStoreCallSampled(t *testing.T) {
	rec := newRec(t, record.Config{Writer: &bytes.Buffer{}, MaxRecordsPerSecond: -1})
	for range 10 {
		if !rec.StoreCall() {
			t.Fatal("a recorder that records everything skipped a store call")
		}
	}
}

// A store line of an operation or result this reader does not know (a
// newer writer's) is skipped, as a line of an unknown kind; one without
// its time, duration, operation or result is malformed.
func TestStoreLineUnknownAndMalformed(t *testing.T) {
	head := `{"k":"header","format":"` + record.FormatName + `","v":1,"epoch":"2026-01-01T00:00:00Z","classes":["default"]}` + "\n"
	req := `{"k":"req","t":2000,"c":0,"st":200}` + "\n"
	for _, skip := range []string{
		`{"k":"store","t":1,"op":"scan","lat":5,"res":"ok"}`,
		`{"k":"store","t":1,"op":"allow","lat":5,"res":"throttled"}`,
	} {
		rec, err := record.NewReader(strings.NewReader(head + skip + "\n" + req)).Next()
		if err != nil || rec.Kind != record.KindRequest {
			t.Errorf("%s: read %+v, %v; want it skipped and the request read", skip, rec, err)
		}
	}
	for _, bad := range []string{
		`{"k":"store","op":"allow","lat":5,"res":"ok"}`,
		`{"k":"store","t":1,"op":"allow","res":"ok"}`,
		`{"k":"store","t":1,"op":"allow","lat":-5,"res":"ok"}`,
		`{"k":"store","t":1,"lat":5,"res":"ok"}`,
		`{"k":"store","t":1,"op":"allow","lat":5}`,
		`{"k":"store","t":1,"op":7,"lat":5,"res":"ok"}`,
	} {
		if rec, err := record.NewReader(strings.NewReader(head + bad + "\n")).Next(); err == nil {
			t.Errorf("%s: read as %+v", bad, rec)
		}
	}
}
