package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestRecordKeysQueued: the key of a queued request's decision, which the
// limiter reports from another request's call, is the queued request's,
// handed over by its waiter's notify function as the engine does.
func TestRecordKeysQueued(t *testing.T) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	keys := &recordKeys{}
	lim, err := shed.New(shed.Config{Limit: 1, Observer: &recordingObserver{rec: rec, keys: keys},
		Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 10, MaxWait: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	now := epoch
	waiter := func(key uint64) *shed.Waiter {
		return shed.NewWaiter(func(*shed.Waiter) { keys.waiterKey(key) })
	}
	keys.cur = 1
	p1, err := lim.TryAcquireAt(now, shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	w2, w3 := waiter(2), waiter(3)
	for i, w := range []*shed.Waiter{w2, w3} {
		keys.cur = uint64(i + 2)
		if _, queued, err := lim.EnqueueAt(now, shed.Request{}, w); !queued || err != nil {
			t.Fatalf("waiter %d not queued: %v", i+2, err)
		}
	}
	keys.cur = 9 // another request's call decides on the waiters
	p1.ReleaseAt(now.Add(time.Millisecond), shed.Success)
	lim.ExpireAt(now.Add(2 * time.Second))
	p2, _ := w2.Result()
	p2.ReleaseAt(now.Add(3*time.Second), shed.Success)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err != nil {
			break
		}
		if r.Kind != record.KindTick {
			got = append(got, fmt.Sprintf("%s q=%v key=%d", r.Kind, r.Queued, r.Key))
		}
	}
	// A release frees its capacity, and grants it, before its own event.
	want := []string{"admit q=false key=1", "admit q=true key=2", "release q=false key=0", "reject q=true key=3", "release q=false key=0"}
	if !slices.Equal(got, want) {
		t.Errorf("records\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
