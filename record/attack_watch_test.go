package record_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Class names taken from a watched limiter, which accepts any non-empty
// distinct names: invalid UTF-8 ("a\xff" and "a\xfe" both become
// "a\ufffd") or names too long for a line would write a header the Reader
// refuses, and the whole recording would be unreadable.
func TestWatchedClassNamesTheFormatCannotHold(t *testing.T) {
	for _, names := range [][]string{{"a\xff", "a\xfe"}, {strings.Repeat("n", 70<<10)}} {
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
		if r.ClassName == "" {
			t.Errorf("classes %.20q: record without a class name", names)
		}
	}
}
