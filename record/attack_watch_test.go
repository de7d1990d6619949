package record_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Class names taken from a watched limiter, which accepts any non-empty
// distinct names (the middleware's come from the service's code): invalid
// UTF-8 ("a\xff" and "a\xfe" both become "a\ufffd"), names too long for a
// line or with control characters (junkNames) would write a header the
// Reader refuses, and the whole recording would be unreadable. The
// classes go unnamed instead.
func TestWatchedClassNamesTheFormatCannotHold(t *testing.T) {
	table := [][]string{{"a\xff", "a\xfe"}, {strings.Repeat("n", 70<<10)}}
	for _, n := range junkNames {
		table = append(table, []string{n, "ok"})
	}
	for _, names := range table {
		var classes []shed.ClassConfig
		for _, n := range names {
			classes = append(classes, shed.ClassConfig{Name: n})
		}
		lim, err := shed.New(shed.Config{Limit: 4, Classes: classes})
		if err != nil {
			t.Logf("shed refuses %.20q: %v", names, err)
			continue
		}
		var buf bytes.Buffer
		rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
		rec.Watch(lim)
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Class: 0, Status: 200})
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
		rd := record.NewReader(&buf)
		r, err := rd.Next()
		if err != nil {
			t.Errorf("classes %.20q: %v", names, err)
			continue
		}
		if h, _ := rd.Header(); len(h.Classes) != 0 || r.ClassName != "class0" {
			t.Errorf("classes %.20q: header classes %q, record of class %q, want them unnamed", names, h.Classes, r.ClassName)
		}
	}
}
