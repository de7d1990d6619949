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
	for _, classes := range [][]string{{"a", "a"}, {""}, {"a", ""}} {
		var buf bytes.Buffer
		rec, err := record.New(record.Config{Writer: &buf, Classes: classes})
		if err != nil {
			if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), "Classes") {
				t.Errorf("Classes %q: error %v does not name Classes", classes, err)
			}
			continue
		}
		rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Status: 200})
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
		rd := record.NewReader(&buf)
		if _, err := rd.Next(); err != nil {
			t.Errorf("Classes %q accepted by New, and its recording is unreadable: %v", classes, err)
		}
	}
}
