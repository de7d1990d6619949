package shedredis

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/record"
)

// TestRenewalRecordsCleanupApart: a renewal is recorded timed (op renew,
// its duration by the store's clock), and the call after it that removes
// the leases released while it was out, under the renewal's budget, is
// recorded as op cleanup, not as a release: a reader could not tell it
// from a request's release, and shedsim fit took its timeout (the
// renewal's budget, max(Timeout, LeaseTTL/10)) for the requests'.
func TestRenewalRecordsCleanupApart(t *testing.T) {
	p := startRedis(t)
	rec, buf := unsampledRecorder(t)
	c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 1, Timeout: 50 * time.Millisecond, Recorder: rec, Prefix: "renewrec:"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "tenant", 10)
	if err != nil {
		t.Fatal(err)
	}
	// The lease is released once the renewal has taken its snapshot, as
	// the renewal's call starts (its first clock reading): the renewal
	// writes it back, and the cleanup removes it again.
	clk := &fakeClock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), step: 600 * time.Microsecond}
	armed := true
	c.g.now = func() time.Time {
		now := clk.now()
		if armed {
			armed = false
			l.Release()
		}
		return now
	}
	c.renew()
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	var ops []string
	_, recs, _ := rectest.ReadRecording(t, buf.Bytes())
	for _, r := range recs {
		if r.Kind != record.KindStore {
			continue
		}
		ops = append(ops, r.Op.String())
		if r.Op == record.StoreRenew && (!r.Timed || r.Latency <= 0 || r.Result != record.StoreOK) {
			t.Errorf("renewal recorded %+v, want it timed and ok", r)
		}
	}
	want := []string{"acquire", "release", "renew", "cleanup"}
	if len(ops) != len(want) {
		t.Fatalf("recorded %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("recorded %v, want %v", ops, want)
		}
	}
}
