package mwtest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// testRecorder: over 127.0.0.1, an admitted request, one that fails and
// one that is rejected end up as records the record package reads back,
// with their class, decision, outcome, status and key, under a header
// that says where the keys came from.
func testRecorder(t *testing.T, a Adapter) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, Routes: map[string]string{"/api/": "interactive"}, KeyHeader: "X-Tenant"},
		Recorder: rec}, app)
	tenant := http.Header{"X-Tenant": {"acme"}}
	s.get("/api/ok", tenant)
	s.get("/api/fail", nil)
	held, err := l.TryAcquire(shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := s.get("/batch", tenant); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with the limit held: status %d, want 503", resp.StatusCode)
	}
	held.Release(shed.Ignored)
	waitIdle(t, l)
	WaitFor(t, "three records", func() bool { return rec.Pending() >= 3 })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	h, reqs, last := rectest.ReadRecording(t, buf.Bytes())
	if h.KeySource != "header:X-Tenant" || strings.Join(h.Classes, ",") != "interactive,batch" {
		t.Errorf("header %+v", h)
	}
	if len(reqs) != 3 || last == nil {
		t.Fatalf("%d records, last tick %+v\n%s", len(reqs), last, buf.Bytes())
	}
	ok, fail, rej := reqs[0], reqs[1], reqs[2]
	if ok.ClassName != "interactive" || ok.Decision != record.Admitted || ok.Outcome != shed.Success || ok.Status != 200 ||
		!ok.Timed || ok.Cost != 1 || ok.Key != record.KeyHash("acme") {
		t.Errorf("success recorded as %+v", ok)
	}
	if fail.Decision != record.Admitted || fail.Outcome != shed.Dropped || fail.Status != 503 || fail.Key != 0 {
		t.Errorf("a 503 recorded as %+v", fail)
	}
	if rej.ClassName != "batch" || rej.Decision != record.Rejected || rej.Reason != shed.ReasonLimit || rej.Status != 503 ||
		rej.Timed || rej.Key != record.KeyHash("acme") {
		t.Errorf("rejection recorded as %+v", rej)
	}
	if last.Arrivals[0] != 2 || last.Arrivals[1] != 1 || last.Shed[1] != 1 || last.Done[0] != 2 || last.Limit != 1 {
		t.Errorf("last tick %+v", last)
	}
}

// testRecorderTooLarge: over 127.0.0.1, both requests answered 413 are
// recorded with their decision, so that a recording shows every request:
// one whose body is over MaxBodyBytes as refused on sight, not an arrival
// (the limiter never saw it), one whose cost is over the limiter's whole
// budget as the limiter's rejection (cost_too_large). Both are recorded
// before the answer is written: the test needs no wait.
func testRecorderTooLarge(t *testing.T, a Adapter) {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, shed.Config{Limit: 10, MaxCost: 100, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	costly := func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
		if r.URL.Path == "/api/costly" {
			def.Cost = 101
		}
		return def
	}
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, MaxBodyBytes: 8, Routes: map[string]string{"/api/": "interactive"}},
		Classify: costly, Recorder: rec}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if resp, _ := s.do(http.MethodPost, "/api/upload", nil, strings.NewReader("123456789")); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the maximum: status %d, want 413", resp.StatusCode)
	}
	if resp, _ := s.get("/api/costly", nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a cost over the budget: status %d, want 413", resp.StatusCode)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, reqs, last := rectest.ReadRecording(t, buf.Bytes())
	if len(reqs) != 2 || last == nil {
		t.Fatalf("%d records, last tick %+v, want both 413s\n%s", len(reqs), last, buf.Bytes())
	}
	if body := reqs[0]; body.Kind != record.KindRefused || body.ClassName != "interactive" || body.Status != 413 || body.Cost != 0 {
		t.Errorf("a body over the maximum recorded as %+v", body)
	}
	if cost := reqs[1]; cost.Kind != record.KindRequest || cost.Decision != record.Rejected || cost.Reason != shed.ReasonCostTooLarge ||
		cost.Status != 413 || cost.Cost != 101 {
		t.Errorf("a cost over the budget recorded as %+v", cost)
	}
	if len(last.Refused) == 0 || last.Refused[0] != 1 || last.Arrivals[0] != 1 || last.Shed[0] != 1 {
		t.Errorf("last tick %+v, want 1 refused, and 1 arrival shed", last)
	}
}

// testRecorderUnsampled: a request the recorder does not sample reads no
// clock (Options.Clock, which the recorder's clock is), and is counted
// all the same.
func testRecorderUnsampled(t *testing.T, a Adapter) {
	rectest.CheckUnsampled(t, func(rec *record.Recorder, clock func() time.Time) func() {
		l := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
		h := a.Handler(t, Options{Options: shedhttp.Options{Limiter: l, Clock: clock}, Recorder: rec}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		return func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)) }
	})
}

// testRecorderKeySource: the recording's header says where the
// middleware took the keys from: the trusted key header (as it reads it,
// canonical), the client's address when rate limits or fair shares need
// a key, and, with a Classify function, what its requests show: the
// header's or the address's while it keeps the keys, "classify" when it
// replaces them; nothing when requests carry no key, when a Classify
// both kept and replaced keys, or when two middleware sharing the
// recorder disagree.
func testRecorderKeySource(t *testing.T, a Adapter) {
	limits := map[string]shedhttp.RateLimit{"interactive": {Rate: 100, Burst: 10}}
	// Replaces the key of a request that carries X-Replace.
	classify := func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
		if r.Header.Get("X-Replace") != "" {
			def.Key = "tenant-7"
		}
		return def
	}
	header := shedhttp.Options{KeyHeader: "X-Tenant"}
	for _, c := range []struct {
		name    string
		opts    []Options // each a middleware of the one recorder
		replace []bool    // the requests, in order: whether Classify replaces the key; nil: one that it keeps
		want    string
	}{
		{"no key", []Options{{}}, nil, ""},
		{"key header", []Options{{Options: shedhttp.Options{KeyHeader: "x-tenant"}}}, nil, "header:X-Tenant"},
		{"key header, rate limited", []Options{{Options: shedhttp.Options{KeyHeader: "X-Tenant", RateLimits: limits}}}, nil, "header:X-Tenant"},
		{"address, rate limited", []Options{{Options: shedhttp.Options{RateLimits: limits}}}, nil, "addr"},
		{"address, fair shares", []Options{{Options: shedhttp.Options{TenantFromKey: true}}}, nil, "addr"},
		{"classify keeps the header's", []Options{{Options: header, Classify: classify}}, []bool{false, false}, "header:X-Tenant"},
		{"classify keeps the address", []Options{{Classify: classify}}, nil, "addr"},
		{"classify replaces", []Options{{Options: header, Classify: classify}}, []bool{true, true}, "classify"},
		{"classify keeps, then replaces", []Options{{Options: header, Classify: classify}}, []bool{false, true}, ""},
		{"two alike", []Options{{Options: header}, {Options: header}}, nil, "header:X-Tenant"},
		{"two that disagree", []Options{{Options: header}, {Options: shedhttp.Options{RateLimits: limits}}}, nil, ""},
		{"one without keys beside one with", []Options{{}, {Options: header}}, nil, "header:X-Tenant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			lim := newLimiter(t, shed.Config{Limit: 10, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
			clk := NewFakeClock()
			var h http.Handler
			for _, o := range c.opts {
				o.Limiter, o.Clock, o.DefaultClass, o.Recorder = lim, clk.Now, "interactive", rec
				h = a.Handler(t, o, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			}
			reqs := c.replace
			if reqs == nil {
				reqs = []bool{false}
			}
			for _, replace := range reqs {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				if replace {
					r.Header.Set("X-Replace", "1")
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if h, _, _ := rectest.ReadRecording(t, buf.Bytes()); h.KeySource != c.want {
				t.Errorf("KeySource %q, want %q", h.KeySource, c.want)
			}
		})
	}
}
