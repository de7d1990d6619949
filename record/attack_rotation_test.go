package record_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Rotation while producers, a Flush caller and the writer goroutine all run:
// every file kept must be a whole, readable recording, and Stop must end.
func TestRotationUnderConcurrency(t *testing.T) {
	dir := t.TempDir()
	rec := newRec(t, record.Config{Dir: dir, MaxFileBytes: 2048, MaxFiles: 50, Buffer: 256, FlushEvery: time.Millisecond,
		MaxRecordsPerSecond: -1, TickEvery: 10 * time.Millisecond, Classes: []string{"a", "b"}})
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				at := t0.Add(time.Duration(i) * time.Millisecond)
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Class: shed.Class(g % 2), Time: at, Cost: 1})
				if g == 0 && i%100 == 0 {
					_ = rec.Flush()
				}
			}
		}()
	}
	wg.Wait()
	done := make(chan error, 1)
	go func() { done <- rec.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "record-*.jsonl"))
	if len(files) < 2 {
		t.Fatalf("%d files: no rotation happened", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) > 2048+512 {
			t.Errorf("%s: %d bytes, cap 2048", f, len(data))
		}
		readAll(t, data)
	}
	st := rec.Stats()
	if st.Err != nil {
		t.Errorf("Stats.Err %v", st.Err)
	}
}
