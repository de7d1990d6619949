package shedredis

import (
	"context"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
)

// TestStoreRecordsCanceledAndOwnRecorder: a caller that stopped waiting
// is recorded as canceled (a lower bound, not a timeout), and a
// Concurrency configured without the Recorder records nothing beside a
// Store configured with it.
func TestStoreRecordsCanceledAndOwnRecorder(t *testing.T) {
	p := startRedis(t)
	rec, buf := unsampledRecorder(t)
	cfg := Config{Client: p.client(t), Replicas: 1, Timeout: 50 * time.Millisecond, Prefix: "storerec2:"}
	c, err := NewConcurrency(cfg) // no Recorder
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg.Recorder = rec
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	l, err := c.Acquire(t.Context(), "tenant", 10)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	lim := shedhttp.RateLimit{Rate: 100, Burst: 100}
	s.Decide(ctx, at, 0, "tenant", lim, 1)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, got, _ := rectest.ReadRecording(t, buf.Bytes())
	if len(got) != 1 || got[0].Op != record.StoreAllow || got[0].Result != record.StoreCanceled {
		t.Errorf("recorded %+v, want one canceled allow", got)
	}
}
