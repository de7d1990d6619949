package record_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
)

// Class names that the Reader refuses (empty, repeated) must be refused by
// New, not written into a header that makes the whole recording
// unreadable.
func TestConfigClassesTheReaderRefuses(t *testing.T) {
	for _, classes := range [][]string{{"a", "a"}, {""}, {"a", ""}, {strings.Repeat("n", 70<<10)}, {"a\nb"}, {"a\u202eb"}} {
		var buf bytes.Buffer
		rec, err := record.New(record.Config{Writer: &buf, Classes: classes})
		if err != nil {
			if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), "Classes") {
				t.Errorf("Classes %.20q: error %v does not name Classes", classes, err)
			}
			continue
		}
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200})
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
		rd := record.NewReader(&buf)
		if _, err := rd.Next(); err != nil {
			t.Errorf("Classes %.20q accepted by New, and its recording is unreadable: %v", classes, err)
		}
	}
}

// Class names outside the Basic Multilingual Plane must come back as they
// were: "x😀" and "x😁" were both written as "x\ufffd", which the Reader
// then refused as a repeated name.
func TestAstralClassNamesRoundTrip(t *testing.T) {
	names := []string{"x😀", "x😁", "tenant\"{}\\ é"}
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, Classes: names, MaxRecordsPerSecond: -1})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Class: 1, Status: 200})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	rd := record.NewReader(&buf)
	r, err := rd.Next()
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.Bytes())
	}
	if r.ClassName != names[1] {
		t.Errorf("class name %q, want %q", r.ClassName, names[1])
	}
	if h, _ := rd.Header(); strings.Join(h.Classes, "|") != strings.Join(names, "|") {
		t.Errorf("header classes %q, want %q", h.Classes, names)
	}
}
