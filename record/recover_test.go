package record_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A recording directory removed under a running service (a clean-up job,
// an operator), or a file name already taken: the recorder kept the first
// error and wrote nothing more for the rest of the process's life. It
// must drop and count the records while it cannot write, and write again,
// in a new file, from the next flush.
func TestDirRecorderRecoversFromWriteErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	rec := newRec(t, record.Config{Dir: dir, MaxFileBytes: 400, MaxRecordsPerSecond: -1})
	add := func(from, to int) {
		for i := from; i < to; i++ {
			rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * time.Millisecond), Cost: 1})
			_ = rec.Flush()
		}
	}
	add(0, 20)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	add(20, 40)
	if rec.Stats().Err == nil {
		t.Fatal("no error with the directory removed")
	}
	add(40, 60)
	// The name the recorder takes at its next rotation, taken (another
	// process on the same directory): it moves on to the next one.
	files, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no file written after the directory was removed (stats %+v)", rec.Stats())
	}
	var seq int
	fmt.Sscanf(filepath.Base(files[len(files)-1]), "record-%d.jsonl", &seq)
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("record-%06d.jsonl", seq+1)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	lost := rec.Stats().Lost
	add(60, 80)
	st := rec.Stats()
	if st.Lost == lost {
		t.Errorf("stats %+v: no record lost on the taken name, was it reached?", st)
	}
	if err := rec.Stop(); err == nil {
		t.Error("Stop: nil, want the first write error")
	}
	recs, err := record.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := split(recs)
	if len(got) < 30 || !got[len(got)-1].Time.Equal(t0.Add(79*time.Millisecond)) {
		t.Errorf("%d records read back, want those after the errors, to the last one (stats %+v)", len(got), st)
	}
	if st.Lost == 0 {
		t.Errorf("stats %+v: no record counted lost while the directory was gone", st)
	}
}
