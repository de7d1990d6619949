package record_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// A writer stuck for good (a hung NFS mount): Stop waits for the writer
// goroutine, which is blocked in Write holding the writer's lock, so a
// service's shutdown hangs with it.
func TestStopWithStalledWriterReturns(t *testing.T) {
	t.Skip("known fault: Stop waits for a Write that never returns; a fix needs Stop to give up on the writer (a deadline) and leave it behind")
	w := &stalledWriter{release: make(chan struct{}), entered: make(chan struct{})}
	defer close(w.release)
	rec := newRec(t, record.Config{Writer: w, Buffer: 64, FlushEvery: time.Millisecond, MaxRecordsPerSecond: -1})
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0})
	<-w.entered
	done := make(chan error, 1)
	go func() { done <- rec.Stop() }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Stop did not return with the writer stalled")
	}
}
