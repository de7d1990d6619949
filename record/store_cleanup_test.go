package record_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// TestStoreCleanupLines: the reader reads the store lines written before
// the cleanup op (allow, acquire, release, renew) as before, and the
// cleanup line (the removal, after a renewal, of the leases released
// while it was out) as its own op, with fields it does not know skipped;
// a line of an op it does not know is still skipped.
func TestStoreCleanupLines(t *testing.T) {
	head := `{"k":"header","format":"` + record.FormatName + `","v":1,"epoch":"2026-01-01T00:00:00Z","classes":["default"]}` + "\n"
	lines := []string{
		`{"k":"store","t":1,"op":"allow","lat":5,"res":"ok"}`,
		`{"k":"store","t":2,"op":"acquire","lat":6,"res":"timeout"}`,
		`{"k":"store","t":3,"op":"release","lat":7,"res":"error"}`,
		`{"k":"store","t":4,"op":"renew","lat":8,"res":"ok"}`,
		`{"k":"store","t":5,"op":"scan","lat":9,"res":"ok"}`,
		`{"k":"store","t":6,"op":"cleanup","lat":10,"res":"timeout","batch":3}`,
	}
	var got []string
	for _, r := range readAll(t, []byte(head+strings.Join(lines, "\n")+"\n")) {
		got = append(got, r.Op.String()+" "+r.Result.String()+" "+r.Latency.String())
	}
	want := []string{"allow ok 5ns", "acquire timeout 6ns", "release error 7ns", "renew ok 8ns", "cleanup timeout 10ns"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("read %q, want %q", got, want)
	}
}

// TestStoreCleanupWritten: a cleanup call is written as op cleanup and
// reads back as recorded.
func TestStoreCleanupWritten(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	call := record.Record{Kind: record.KindStore, Time: t0.Add(time.Millisecond), Op: record.StoreCleanup, Result: record.StoreTimeout,
		Latency: time.Second, Timed: true}
	rec.Add(call)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"op":"cleanup","lat":1000000000,"res":"timeout"`) {
		t.Errorf("no cleanup line:\n%s", buf.Bytes())
	}
	recs, _ := split(readAll(t, buf.Bytes()))
	if len(recs) != 1 || recs[0].Op != record.StoreCleanup || recs[0].Latency != time.Second || !recs[0].Time.Equal(call.Time) {
		t.Errorf("read back %+v, want %+v", recs, call)
	}
}
