package record_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A service killed mid-write (or a recording read while it is written:
// the writer hands its file 64 KiB at a time, cutting a line) leaves a
// last line without its end. The Reader failed on it, and with it every
// fit of the recording; a line cut at the end of a file is skipped, in
// the last file and in one the recorder left behind when it restarted.
// A malformed whole line is still an error.
func TestReaderSkipsCutLastLine(t *testing.T) {
	dir := t.TempDir()
	for run := range 2 {
		rec := newRec(t, record.Config{Dir: dir, MaxRecordsPerSecond: -1})
		for i := range 10 {
			rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(run*10+i) * time.Millisecond), Cost: 1})
		}
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
		f, err := os.OpenFile(files[len(files)-1], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`{"k":"admit","t":12000000,"c":0,"co`)
		f.Close()
	}
	recs, err := record.ReadAll(dir)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if got, _ := split(recs); len(got) != 20 {
		t.Errorf("%d records, want the 20 whole ones", len(got))
	}
	data := []byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":[],"tick":1000000000}` +
		"\n" + `{"k":"admit","t":1,"c":0,"co` + "\n" + `{"k":"admit","t":2,"c":0}` + "\n")
	if _, err := record.NewReader(bytes.NewReader(data)).Next(); !errors.Is(err, record.ErrFormat) {
		t.Errorf("a malformed line ended by a newline: %v, want ErrFormat", err)
	}
}
