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

// A simulated recording says where its keys come from as the scenario
// does, so that a scenario fitted to a real recording records, and fits
// again, as its service did; classes that disagree make it unknown.
func TestRecordPolicyKeySource(t *testing.T) {
	keys := func(src string) *Keys { return &Keys{Count: 3, Source: src} }
	for _, tc := range []struct {
		name       string
		one, other *Keys
		want       string
	}{
		{"one header", keys("header:X-Tenant"), keys("header:X-Tenant"), "header:X-Tenant"},
		{"address, a class without keys", keys("addr"), nil, "addr"},
		{"disagree", keys("addr"), keys("header:X-Tenant"), ""},
		{"unknown beside a header", keys(""), keys("header:X-Tenant"), ""},
		{"no keys", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			sc := &Scenario{
				Name: "key-source", Duration: 2 * time.Second,
				Classes:  []Class{{Name: "api", Rate: 50, Keys: tc.one}, {Name: "batch", Rate: 50, Keys: tc.other}},
				Upstream: Upstream{Capacity: 40, ServiceTime: Exp(float64(20 * time.Millisecond))},
			}
			p, err := ParsePolicy("none")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Run(sc, RecordPolicy(p, rec, 0), Options{Seed: 1}); err != nil {
				t.Fatal(err)
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			r := record.NewReader(&buf)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			if h, _ := r.Header(); h.KeySource != tc.want {
				t.Errorf("header's key source %q, want %q", h.KeySource, tc.want)
			}
		})
	}
}
