package record_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// A writer stuck for good (a hung NFS mount): Stop waits for the writer
// goroutine, which is blocked in Write holding the writer's lock, so a
// service's shutdown would hang with it; StopContext returns at its
// deadline, and records that come later are counted as lost.
func TestStopWithStalledWriterReturns(t *testing.T) {
	w := &stalledWriter{release: make(chan struct{}), entered: make(chan struct{})}
	defer close(w.release)
	rec := newRec(t, record.Config{Writer: w, Buffer: 64, FlushEvery: time.Millisecond, MaxRecordsPerSecond: -1})
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	<-w.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rec.StopContext(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("StopContext = %v, want the context's deadline", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("StopContext did not return with the writer stalled")
	}
	lost := rec.Stats().Lost
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	if got := rec.Stats().Lost; got != lost+1 {
		t.Errorf("a record after StopContext: lost %d -> %d, want it counted", lost, got)
	}
}
