package record_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A Reader of a live recording: the writer deletes the oldest files beyond
// MaxFiles while the Reader goes through the list it took when opened. A
// file that vanished that way must be skipped, not end the reading with an
// error while newer files are there.
func TestReaderSkipsFilesRotatedAway(t *testing.T) {
	dir := t.TempDir()
	rec := newRec(t, record.Config{Dir: dir, MaxFileBytes: 300, MaxFiles: 100, MaxRecordsPerSecond: -1})
	for i := range 30 {
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * time.Millisecond), Cost: 1})
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(files) < 4 {
		t.Fatalf("%d files, want at least 4", len(files))
	}
	rd, err := record.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// The writer rotates the second file away while the first is read.
	if err := os.Remove(files[1]); err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d records: %v", n, err)
		}
		n++
	}
	if n == 0 {
		t.Error("no records read")
	}
}
