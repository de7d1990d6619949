package record_test

import (
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// stalledWriter blocks every Write until release is closed: a disk that
// stopped answering.
type stalledWriter struct {
	release chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (w *stalledWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

// TestStalledWriterNeverBlocks: with the writer stuck in a Write, the
// request path keeps its pace; the records it cannot hand over are
// dropped and counted.
func TestStalledWriterNeverBlocks(t *testing.T) {
	w := &stalledWriter{release: make(chan struct{}), entered: make(chan struct{})}
	rec := newRec(t, record.Config{Writer: w, Buffer: 64, FlushEvery: time.Millisecond, MaxRecordsPerSecond: -1})
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	select {
	case <-w.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never wrote")
	}
	const workers, each = 4, 20000
	start := time.Now()
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				at := t0.Add(time.Duration(g*each+i) * time.Microsecond)
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1})
				if rec.Arrive(0) {
					rec.Add(record.Record{Kind: record.KindRequest, Time: at})
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := rec.Stats()
	close(w.release)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	// 160,000 calls take milliseconds; a blocked call would take forever.
	// The bound leaves room for the race detector on a loaded machine.
	if elapsed > 5*time.Second {
		t.Errorf("%d calls took %v with the writer stalled", 2*workers*each, elapsed)
	}
	if st.Lost < 2*workers*each-100 {
		t.Errorf("lost %d of %d records while the writer was stalled", st.Lost, 2*workers*each)
	}
	if final := rec.Stats(); final.Written+final.Lost < 2*workers*each {
		t.Errorf("written %d + lost %d: records unaccounted for", final.Written, final.Lost)
	}
}
