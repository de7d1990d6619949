package record_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A named pipe (or a symlink to one) with a recording file's name in the
// directory: the Reader opened it and waited for a writer forever, and
// the fit of the recording hung. Only regular files (or links to them)
// are a recording's files.
func TestReaderSkipsNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	rec := newRec(t, record.Config{Dir: dir, MaxRecordsPerSecond: -1})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "record-000002.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip(err)
	}
	if err := os.Symlink(fifo, filepath.Join(dir, "record-000003.jsonl")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var n int
	go func() {
		recs, err := record.ReadAll(dir)
		n = len(recs)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || n < 2 {
			t.Errorf("ReadAll: %d records, %v; want the file's", n, err)
		}
	case <-time.After(5 * time.Second):
		// Let the blocked opens return, so that the goroutine ends: a
		// pipe opened for reading and writing never blocks, and its
		// close ends what the Reader reads of it.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
			if p, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
				p.Close()
			}
			select {
			case <-done:
				t.Fatal("ReadAll blocked on a named pipe in the directory")
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.Error("ReadAll blocked on a named pipe in the directory")
	}
}
