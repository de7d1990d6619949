package shedredis

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestConcurrencyMiddlewareRecords: with MiddlewareConfig.Recorder, a
// tenant refused at its cap (429) is recorded as a refusal on sight
// (record.KindRefused) with shed.ReasonKeyConcurrency, the class Class
// gives it, the hash of its key, the key's leases counted (its cap) and
// the time of the Clock, and counted in the ticks' refusals, so that
// shedsim fit sees the tenants that were capped. Such 429s used to
// reach no recording at all. Requests that pass record nothing here:
// the shedkit middleware inside records them.
func TestConcurrencyMiddlewareRecords(t *testing.T) {
	p := startRedis(t)
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		class func(*http.Request) shed.Class
		want  shed.Class
	}{
		{"default class", nil, 0},
		{"classified", func(r *http.Request) shed.Class { return shed.Class(len(r.URL.Path) - 1) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 1, Timeout: 250 * time.Millisecond, Prefix: "rec-" + tc.name + ":"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"interactive", "batch"}})
			if err != nil {
				t.Fatal(err)
			}
			now := at
			mw, err := ConcurrencyMiddleware(MiddlewareConfig{
				Concurrency: c, Limit: 1, Recorder: rec, Class: tc.class, Clock: func() time.Time { return now },
				Key: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
			})
			if err != nil {
				t.Fatal(err)
			}
			lease, err := c.Acquire(t.Context(), "a", 1) // tenant a at its cap
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i, tenant := range []string{"a", "b", "a"} {
				now = at.Add(time.Duration(i) * time.Second)
				r := httptest.NewRequest("GET", "/b", nil)
				r.Header.Set("X-Tenant", tenant)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if want := map[string]int{"a": 429, "b": 200}[tenant]; w.Code != want {
					t.Fatalf("tenant %s: %d, want %d", tenant, w.Code, want)
				}
			}
			lease.Release()
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			refused, ref := readRefusals(t, &buf, tc.want)
			if len(refused) != 2 || ref != 2 {
				t.Fatalf("%d refusals recorded, %d counted; want 2 and 2", len(refused), ref)
			}
			for i, r := range refused {
				want := record.Record{Kind: record.KindRefused, Time: at.Add(time.Duration(2*i) * time.Second), Class: tc.want,
					Reason: shed.ReasonKeyConcurrency, Status: 429, InFlight: 1, Key: rec.KeyHash("a")}
				if !r.Time.Equal(want.Time) || r.Class != want.Class || r.Reason != want.Reason || r.Status != want.Status ||
					r.InFlight != want.InFlight || r.Key != want.Key {
					t.Errorf("refusal %d: %+v, want %+v", i, r, want)
				}
			}
		})
	}
}

// readRefusals returns the refusals recorded in buf and the last tick's
// count of refusals of class c; any other record is an error.
func readRefusals(t *testing.T, buf *bytes.Buffer, c shed.Class) (refused []record.Record, ref uint64) {
	t.Helper()
	rd := record.NewReader(buf)
	for {
		r, err := rd.Next()
		if err != nil {
			return refused, ref
		}
		switch r.Kind {
		case record.KindRefused:
			refused = append(refused, r)
		case record.KindTick:
			if int(c) < len(r.Tick.Refused) {
				ref = r.Tick.Refused[c]
			}
		default:
			t.Errorf("a %s record: only the refusals are the middleware's", r.Kind)
		}
	}
}
