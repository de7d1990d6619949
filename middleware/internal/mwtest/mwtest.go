// Package mwtest is the table of cases that both middleware adapters
// (nethttp and echo) must pass, against real servers on 127.0.0.1. Each
// adapter's tests call Run with a small Adapter that builds its middleware
// from the neutral Options and serves it.
package mwtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Options is a framework-neutral middleware configuration; each adapter
// maps it to its own Config.
type Options struct {
	shedhttp.Options
	Classify func(r *http.Request, def shedhttp.Classification) shedhttp.Classification
	// Outer, when set, wraps the middleware (it runs before it), for
	// example to put a span in the request context.
	Outer func(http.Handler) http.Handler
	// Recorder is the adapter's Config.Recorder.
	Recorder *record.Recorder
}

// Adapter describes one middleware adapter under test.
type Adapter struct {
	// Handler returns app behind the adapter's middleware configured by
	// opts, as an http.Handler for in-process use.
	Handler func(t testing.TB, opts Options, app http.Handler) http.Handler
	// Serve starts a real server for h (as returned by Handler) on
	// 127.0.0.1 and returns its base URL; it stops at the test's cleanup.
	Serve func(t testing.TB, h http.Handler) string
	// Permit returns the permit of the request being served.
	Permit func(r *http.Request) *shed.Permit
	// Reconcile corrects the cost of the request being served.
	Reconcile func(r *http.Request, actual int64) error
}

// server is one running case.
type server struct {
	t      *testing.T
	url    string
	client *http.Client
	lim    *shed.Limiter
}

func (a Adapter) start(t *testing.T, opts Options, app http.Handler) *server {
	t.Helper()
	url := a.Serve(t, a.Handler(t, opts, app))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &server{t: t, url: url, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}, lim: opts.Limiter}
}

func (s *server) do(method, path string, header http.Header, body io.Reader) (*http.Response, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, b
}

func (s *server) get(path string, header http.Header) (*http.Response, []byte) {
	s.t.Helper()
	return s.do(http.MethodGet, path, header, nil)
}

// WaitFor polls cond until it holds, failing after a bounded wait (15 s).
// It is used only to observe effects that happen on the server's
// goroutines after the client got its answer (a release after the handler
// returned).
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitIdle waits until every admitted request has been released and its
// release counted (the in-flight count drops a moment before the counters
// move).
func waitIdle(t *testing.T, l *shed.Limiter) {
	t.Helper()
	WaitFor(t, "every permit released", func() bool {
		snap := l.Snapshot()
		var admitted, done uint64
		for _, c := range snap.Classes {
			admitted += c.Admitted
			done += c.Released[shed.Success] + c.Released[shed.Dropped] + c.Released[shed.Ignored] + c.Leaked
		}
		return snap.InFlight == 0 && admitted == done
	})
}

func released(l *shed.Limiter) (success, dropped, ignored uint64) {
	for _, c := range l.Snapshot().Classes {
		success += c.Released[shed.Success]
		dropped += c.Released[shed.Dropped]
		ignored += c.Released[shed.Ignored]
	}
	return
}

func newLimiter(t testing.TB, cfg shed.Config) *shed.Limiter {
	t.Helper()
	l, err := shed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// twoClasses is a limiter with an interactive class that protects half of
// the limit and may queue, and a batch class that may not.
func twoClasses(t testing.TB, limit int) *shed.Limiter {
	return newLimiter(t, shed.Config{
		Limit: limit,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 4, MaxWait: 30 * time.Second},
			{Name: "batch"},
		},
		DemandHold: time.Hour, // the scenario must not depend on the wall clock
	})
}

// FakeClock is a settable clock.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a clock at a fixed time.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// classApp answers 200 with the permit's class name and queue wait in
// headers.
func (a Adapter) classApp(l *shed.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := a.Permit(r)
		if p == nil {
			w.Header().Set("X-Class", "none")
		} else {
			w.Header().Set("X-Class", l.ClassName(p.Class()))
			w.Header().Set("X-Wait", p.Wait().String())
			w.Header().Set("X-Cost", strconv.FormatInt(p.Cost(), 10))
		}
		io.WriteString(w, "ok")
	})
}

// checkProblem checks a rejection response: status, Retry-After, the
// no-retry header and a sanitized RFC 9457 body.
func checkProblem(t *testing.T, resp *http.Response, body []byte, status int, retryAfter bool, forbidden ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != shedhttp.ProblemContentType {
		t.Errorf("Content-Type %q, want %q", ct, shedhttp.ProblemContentType)
	}
	ra := resp.Header.Get("Retry-After")
	if retryAfter {
		n, err := strconv.Atoi(ra)
		if err != nil || n < 1 {
			t.Errorf("Retry-After %q, want whole seconds >= 1", ra)
		}
	} else if ra != "" {
		t.Errorf("Retry-After %q, want none", ra)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	if len(p) != 4 || p["type"] != "about:blank" || p["title"] != http.StatusText(status) || p["status"] != float64(status) || p["detail"] == "" {
		t.Errorf("problem body %q: want exactly type about:blank, title %q, status %d, detail", body, http.StatusText(status), status)
	}
	for _, f := range forbidden {
		if strings.Contains(strings.ToLower(string(body)), strings.ToLower(f)) {
			t.Errorf("body %q exposes %q", body, f)
		}
	}
}

const noRetryHeader, noRetryValue = "Shedkit-No-Retry", "overloaded"

// Run runs every shared case against adapter a.
func Run(t *testing.T, a Adapter) {
	cases := []struct {
		name string
		run  func(t *testing.T, a Adapter)
	}{
		{"Table", testTable},
		{"InteractiveBatch", testInteractiveBatch},
		{"RateLimit", testRateLimit},
		{"RateLimitDryRun", testRateLimitDryRun},
		{"RateLimitCost", testRateLimitCost},
		{"SpoofedClassHeader", testSpoofedClassHeader},
		{"SpoofedKeyHeader", testSpoofedKeyHeader},
		{"KeyFlood", testKeyFlood},
		{"IPv6Key", testIPv6Key},
		{"BodyLimit", testBodyLimit},
		{"Panic", testPanic},
		{"ClientDisconnect", testClientDisconnect},
		{"DisconnectWhileQueued", testDisconnectWhileQueued},
		{"ServerCancelWhileQueued", testServerCancelWhileQueued},
		{"Streaming", testStreaming},
		{"StreamReleasedEarly", testStreamReleasedEarly},
		{"Hijack", testHijack},
		{"IdleHijacked", testIdleHijacked},
		{"SlowUploads", testSlowUploads},
		{"Outcomes", testOutcomes},
		{"OutcomePanic", testOutcomePanic},
		{"Reconcile", testReconcile},
		{"Skip", testSkip},
		{"EncodedPath", testEncodedPath},
		{"CostTooLarge", testCostTooLarge},
		{"Draining", testDraining},
		{"Spans", testSpans},
		{"QueueSpan", testQueueSpan},
		{"DeadlineTooShort", testDeadlineTooShort},
		{"PassedDeadline", testPassedDeadline},
		{"UntrustedDeadline", testUntrustedDeadline},
		{"DeadlineSpans", testDeadlineSpans},
		{"Randomized", testRandomized},
		{"Recorder", testRecorder},
		{"RecorderUnsampled", testRecorderUnsampled},
		{"RecorderKeySource", testRecorderKeySource},
		{"RecorderTooLarge", testRecorderTooLarge},
		{"Closed", testClosed},
		{"ClosedQueuedDeadline", testClosedQueuedDeadline},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, a) })
	}
}

// testTable: simple request/response cases on a limiter with free slots
// or with every slot held.
func testTable(t *testing.T, a Adapter) {
	type row struct {
		name       string
		opts       func(o *Options)
		held       int // permits taken before the request
		method     string
		path       string
		header     http.Header
		wantStatus int
		wantClass  string // X-Class of an admitted request
		wantHeader map[string]string
		wantNoBody bool
	}
	rows := []row{
		{name: "admitted default class", path: "/x", wantStatus: 200, wantClass: "batch"},
		{name: "route prefix", path: "/api/users", opts: func(o *Options) { o.Routes = map[string]string{"/api/": "interactive", "/api/bulk/": "batch"} }, wantStatus: 200, wantClass: "interactive"},
		{name: "longest prefix wins", path: "/api/bulk/1", opts: func(o *Options) { o.Routes = map[string]string{"/api/": "interactive", "/api/bulk/": "batch"} }, wantStatus: 200, wantClass: "batch"},
		{name: "DefaultClass", path: "/x", opts: func(o *Options) { o.DefaultClass = "interactive" }, wantStatus: 200, wantClass: "interactive"},
		{name: "limit reached 503", path: "/x", held: 4, wantStatus: 503, wantHeader: map[string]string{noRetryHeader: noRetryValue}},
		{name: "limit reached HEAD has no body", method: http.MethodHead, path: "/x", held: 4, wantStatus: 503, wantNoBody: true},
		{name: "no-retry header disabled", path: "/x", held: 4, opts: func(o *Options) { o.DisableNoRetryHeader = true }, wantStatus: 503, wantHeader: map[string]string{noRetryHeader: ""}},
		{name: "skipped path bypasses a full limiter", path: "/healthz", held: 4, opts: func(o *Options) { o.SkipPaths = []string{"/healthz"} }, wantStatus: 200, wantClass: "none"},
		{name: "skip is exact", path: "/healthz/x", held: 4, opts: func(o *Options) { o.SkipPaths = []string{"/healthz"} }, wantStatus: 503},
		{name: "skipped method bypasses a full limiter", method: http.MethodOptions, path: "/x", held: 4, opts: func(o *Options) { o.SkipMethods = []string{http.MethodOptions} }, wantStatus: 200, wantClass: "none"},
		{name: "other methods are not skipped", path: "/x", held: 4, opts: func(o *Options) { o.SkipMethods = []string{http.MethodOptions} }, wantStatus: 503},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			l := twoClasses(t, 4)
			opts := Options{Options: shedhttp.Options{Limiter: l}}
			if rw.opts != nil {
				rw.opts(&opts)
			}
			s := a.start(t, opts, a.classApp(l))
			var held []shed.Permit
			for range rw.held {
				p, err := l.TryAcquire(shed.Request{Class: 0})
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			method := rw.method
			if method == "" {
				method = http.MethodGet
			}
			resp, body := s.do(method, rw.path, rw.header, nil)
			if rw.wantStatus == 503 && method == http.MethodGet {
				checkProblem(t, resp, body, 503, true, "interactive", "batch", "limit", "in-flight", "queue")
			} else if resp.StatusCode != rw.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, rw.wantStatus)
			}
			if rw.wantClass != "" {
				if got := resp.Header.Get("X-Class"); got != rw.wantClass {
					t.Errorf("class %q, want %q", got, rw.wantClass)
				}
			}
			for k, v := range rw.wantHeader {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if rw.wantNoBody && len(body) != 0 {
				t.Errorf("HEAD response has a body: %q", body)
			}
			for i := range held {
				held[i].Release(shed.Ignored)
			}
			waitIdle(t, l)
		})
	}
}

// testInteractiveBatch is the scenario of the issue: all slots are held by
// slow batch requests; an interactive request queues and is admitted as
// soon as one frees, and new batch requests get 503 with Retry-After.
func testInteractiveBatch(t *testing.T, a Adapter) {
	l := twoClasses(t, 2)
	started := make(chan string, 8)
	release := map[string]chan struct{}{"b1": make(chan struct{}), "b2": make(chan struct{})}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		started <- id
		if ch := release[id]; ch != nil {
			<-ch
		}
		w.Header().Set("X-Wait", a.Permit(r).Wait().String())
		io.WriteString(w, id)
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, Routes: map[string]string{"/interactive": "interactive", "/batch": "batch"}}}, app)

	type result struct {
		status int
		body   string
		wait   string
		err    error
	}
	async := func(path string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := s.client.Get(s.url + path)
			if err != nil {
				ch <- result{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- result{resp.StatusCode, string(b), resp.Header.Get("X-Wait"), err}
		}()
		return ch
	}
	b1, b2 := async("/batch?id=b1"), async("/batch?id=b2")
	got := map[string]bool{<-started: true, <-started: true}
	if !got["b1"] || !got["b2"] {
		t.Fatalf("started %v, want b1 and b2", got)
	}
	// Both slots are held by batch work. The interactive request queues.
	i1 := async("/interactive?id=i1")
	WaitFor(t, "the interactive request to queue", func() bool { return l.Snapshot().Classes[0].Queued == 1 })

	resp, body := s.get("/batch?id=b3", nil)
	checkProblem(t, resp, body, 503, true)
	if resp.Header.Get(noRetryHeader) != noRetryValue {
		t.Errorf("503 without %s", noRetryHeader)
	}

	// A batch request ends: its slot goes to the waiting interactive one.
	close(release["b1"])
	if r := <-b1; r.err != nil || r.status != 200 {
		t.Fatalf("b1: %+v", r)
	}
	if id := <-started; id != "i1" {
		t.Fatalf("admitted %q after b1 ended, want i1", id)
	}
	if r := <-i1; r.err != nil || r.status != 200 || r.body != "i1" {
		t.Fatalf("i1: %+v", r)
	} else if w, err := time.ParseDuration(r.wait); err != nil || w <= 0 {
		t.Errorf("i1: the permit reports a queue wait of %q, want > 0", r.wait)
	}
	// The interactive class keeps its protected slot: batch stays out.
	resp, body = s.get("/batch?id=b4", nil)
	checkProblem(t, resp, body, 503, true)

	close(release["b2"])
	if r := <-b2; r.err != nil || r.status != 200 {
		t.Fatalf("b2: %+v", r)
	}
	waitIdle(t, l)
	snap := l.Snapshot()
	if c := snap.Classes[0]; c.AdmittedAfterWait != 1 || c.Admitted != 1 {
		t.Errorf("interactive: admitted %d (after wait %d), want 1 (1)", c.Admitted, c.AdmittedAfterWait)
	}
	if c := snap.Classes[1]; c.Admitted != 2 || c.Rejections() != 2 {
		t.Errorf("batch: admitted %d, rejected %d, want 2 and 2", c.Admitted, c.Rejections())
	}
}

func testRateLimit(t *testing.T, a Adapter) {
	l := twoClasses(t, 100)
	clock := NewFakeClock()
	var mu sync.Mutex
	var events []shed.Event
	obs := shed.ObserverFunc(func(e shed.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter:    l,
			KeyHeader:  "X-Tenant",
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 0.5, Burst: 2}},
			Routes:     map[string]string{"/i": "interactive"},
			Clock:      clock.Now,
			Observer:   obs,
		},
	}, a.classApp(l))
	a1 := http.Header{"X-Tenant": {"a"}}
	for i := range 2 {
		if resp, _ := s.get("/b", a1); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
	}
	resp, body := s.get("/b", a1)
	checkProblem(t, resp, body, 429, true, "batch", "tenant", "rate")
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After %q, want 2 (one token at 0.5/s)", ra)
	}
	if resp.Header.Get(noRetryHeader) != noRetryValue {
		t.Errorf("429 without %s", noRetryHeader)
	}
	// Another key, and another class of the same key, are not affected.
	if resp, _ := s.get("/b", http.Header{"X-Tenant": {"b"}}); resp.StatusCode != 200 {
		t.Errorf("other key: status %d", resp.StatusCode)
	}
	if resp, _ := s.get("/i", a1); resp.StatusCode != 200 {
		t.Errorf("unlimited class: status %d", resp.StatusCode)
	}
	clock.Advance(1500 * time.Millisecond)
	resp, _ = s.get("/b", a1)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("after 1.5 s: status %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clock.Advance(500 * time.Millisecond)
	if resp, _ := s.get("/b", a1); resp.StatusCode != 200 {
		t.Errorf("after 2 s: status %d, want 200", resp.StatusCode)
	}
	waitIdle(t, l)
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Kind != shed.EventRejected || events[0].Reason != shed.ReasonRateLimited || events[0].Class != 1 || events[0].DryRun {
		t.Errorf("observer events %+v, want 2 rate_limited rejections of class 1", events)
	}
	if snap := l.Snapshot(); snap.Classes[1].Admitted != 4 {
		t.Errorf("batch admitted %d, want 4 (rate-limited requests never reach the limiter)", snap.Classes[1].Admitted)
	}
}

func testRateLimitDryRun(t *testing.T, a Adapter) {
	l := twoClasses(t, 100)
	var mu sync.Mutex
	var events []shed.Event
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter:         l,
			RateLimits:      map[string]shedhttp.RateLimit{"batch": {Rate: 1e-3, Burst: 1}},
			RateLimitDryRun: true,
			Clock:           NewFakeClock().Now,
			Observer: shed.ObserverFunc(func(e shed.Event) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}),
		},
	}, a.classApp(l))
	for i := range 3 {
		if resp, _ := s.get("/b", nil); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d, want 200 in dry-run", i, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || !events[0].DryRun || events[0].Reason != shed.ReasonRateLimited {
		t.Errorf("events %+v, want 2 dry-run rate_limited rejections", events)
	}
}

// testSpoofedClassHeader: a client cannot pick its class with a header
// unless the configuration trusts that header.
func testSpoofedClassHeader(t *testing.T, a Adapter) {
	routes := map[string]string{"/batch": "batch"}
	spoof := http.Header{"X-Priority": {"interactive"}}
	for _, tc := range []struct {
		name    string
		trusted string
		header  http.Header
		want    string
	}{
		{"untrusted", "", spoof, "batch"},
		{"other header trusted", "X-Class", spoof, "batch"},
		{"trusted", "X-Priority", spoof, "interactive"},
		{"trusted, lower case name", "x-priority", spoof, "interactive"},
		{"trusted, repeated", "X-Priority", http.Header{"X-Priority": {"interactive", "interactive"}}, "batch"},
		{"trusted, unknown class", "X-Priority", http.Header{"X-Priority": {"admin"}}, "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := twoClasses(t, 4)
			s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, Routes: routes, ClassHeader: tc.trusted}}, a.classApp(l))
			resp, _ := s.get("/batch", tc.header)
			if got := resp.Header.Get("X-Class"); resp.StatusCode != 200 || got != tc.want {
				t.Errorf("status %d class %q, want 200 %q", resp.StatusCode, got, tc.want)
			}
		})
	}
}

// testSpoofedKeyHeader: forwarding headers and tenant headers do not
// choose the rate-limit key unless trusted.
func testSpoofedKeyHeader(t *testing.T, a Adapter) {
	for _, tc := range []struct {
		name    string
		trusted string
		want429 bool // the second request (another claimed key) is limited
	}{
		{"untrusted", "", true},
		{"trusted", "X-Tenant", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := twoClasses(t, 4)
			s := a.start(t, Options{
				Options: shedhttp.Options{
					Limiter:    l,
					KeyHeader:  tc.trusted,
					RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1e-3, Burst: 1}},
					Clock:      NewFakeClock().Now,
				},
			}, a.classApp(l))
			h := func(v string) http.Header {
				return http.Header{"X-Tenant": {v}, "X-Forwarded-For": {v}, "X-Real-Ip": {v}}
			}
			if resp, _ := s.get("/", h("10.0.0.1")); resp.StatusCode != 200 {
				t.Fatalf("first: %d", resp.StatusCode)
			}
			resp, _ := s.get("/", h("10.0.0.2"))
			if got := resp.StatusCode == 429; got != tc.want429 {
				t.Errorf("second request from the same address claiming another key: status %d", resp.StatusCode)
			}
		})
	}
}

// testIPv6Key: the default rate-limit key of an IPv6 client is its /64
// (IPv6KeyPrefix), so that a client cannot get a fresh bucket by picking
// another of the 2^64 addresses it holds; an IPv4 client is keyed by its
// address, also when it arrives IPv4-mapped. The client addresses come from
// a trusted forwarding middleware in front, as behind a proxy, so that the
// requests still travel over 127.0.0.1.
func testIPv6Key(t *testing.T, a Adapter) {
	realIP := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r2 := r.WithContext(r.Context())
			r2.RemoteAddr = net.JoinHostPort(r.Header.Get("X-Test-Client"), "4711")
			next.ServeHTTP(w, r2)
		})
	}
	for _, tc := range []struct {
		prefix  int
		clients []string // each pair: a first request (admitted), then a second one
		want    []int    // status of each second request
	}{
		{0, []string{
			"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", // the same /64
			"2001:db8:1:3::1", "2001:db8:1:3::1", // the same address
			"192.0.2.1", "::ffff:192.0.2.1", // IPv4 and IPv4-mapped
			"192.0.2.2", "192.0.2.3", // IPv4 is keyed by address
			"fe80::1%eth0", "fe80::2%eth1", // zones do not count
			"2001:db8:4::1", "2001:db8:5::1", // other /64s
		}, []int{429, 429, 429, 200, 429, 200}},
		{48, []string{"2001:db8:4::1", "2001:db8:4:ffff::1"}, []int{429}},
		{128, []string{"2001:db8:1:2::1", "2001:db8:1:2::2"}, []int{200}},
	} {
		t.Run(fmt.Sprintf("prefix=%d", tc.prefix), func(t *testing.T) {
			l := twoClasses(t, 100)
			s := a.start(t, Options{
				Options: shedhttp.Options{
					Limiter:       l,
					RateLimits:    map[string]shedhttp.RateLimit{"batch": {Rate: 1e-3, Burst: 1}},
					IPv6KeyPrefix: tc.prefix,
					Clock:         NewFakeClock().Now,
				},
				Outer: realIP,
			}, a.classApp(l))
			for i := 0; i < len(tc.clients); i += 2 {
				first, second := tc.clients[i], tc.clients[i+1]
				if resp, _ := s.get("/", http.Header{"X-Test-Client": {first}}); resp.StatusCode != 200 {
					t.Errorf("first request from %s: status %d, want 200", first, resp.StatusCode)
				}
				if resp, _ := s.get("/", http.Header{"X-Test-Client": {second}}); resp.StatusCode != tc.want[i/2] {
					t.Errorf("%s after %s: status %d, want %d", second, first, resp.StatusCode, tc.want[i/2])
				}
			}
		})
	}
}

// testKeyFlood: 100,000 distinct keys keep the store within its bound.
// The requests go through the middleware in process (the network adds
// nothing to what is tested and would take minutes).
func testKeyFlood(t *testing.T, a Adapter) {
	const keys, bound = 100_000, 1000
	store, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: bound})
	if err != nil {
		t.Fatal(err)
	}
	l := twoClasses(t, 4)
	h := a.Handler(t, Options{
		Options: shedhttp.Options{
			Limiter:    l,
			KeyHeader:  "X-Tenant",
			KeyStore:   store,
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 1}},
			Clock:      NewFakeClock().Now,
		},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for i := range keys {
		req.Header["X-Tenant"] = []string{"tenant-" + strconv.Itoa(i)}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("key %d: status %d (a new key starts with a full bucket)", i, w.Code)
		}
		if i%10_000 == 0 && store.Stats().Keys > bound {
			t.Fatalf("after %d keys the store holds %d buckets, bound %d", i+1, store.Stats().Keys, bound)
		}
	}
	st := store.Stats()
	if st.Keys > bound || st.Evicted < keys-bound {
		t.Errorf("stats %+v: want at most %d keys and at least %d evictions", st, bound, keys-bound)
	}
	// A recent key is still limited: its bucket survived the flood.
	req.Header["X-Tenant"] = []string{"tenant-" + strconv.Itoa(keys-1)}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 429 {
		t.Errorf("most recent key: status %d, want 429", w.Code)
	}
}

func testBodyLimit(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	var called, readErr sync.Map
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called.Store(r.URL.Path, true)
		_, err := io.ReadAll(r.Body)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			readErr.Store(r.URL.Path, true)
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "ok")
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, MaxBodyBytes: 10}}, app)

	resp, body := s.do(http.MethodPost, "/declared", nil, strings.NewReader(strings.Repeat("x", 11)))
	checkProblem(t, resp, body, 413, false)
	if _, ok := called.Load("/declared"); ok {
		t.Error("handler called for a body declared too large")
	}
	if resp.Header.Get(noRetryHeader) != "" {
		t.Error("413 carries the no-retry header; it is for shedding only")
	}

	// A chunked body has no Content-Length: the handler's read fails.
	resp, _ = s.do(http.MethodPost, "/chunked", nil, io.MultiReader(strings.NewReader(strings.Repeat("x", 11))))
	if resp.StatusCode != 413 {
		t.Errorf("chunked: status %d, want 413 from the handler", resp.StatusCode)
	}
	if _, ok := readErr.Load("/chunked"); !ok {
		t.Error("chunked: the handler read past the limit without an error")
	}
	resp, _ = s.do(http.MethodPost, "/small", nil, strings.NewReader("0123456789"))
	if resp.StatusCode != 200 {
		t.Errorf("body at the limit: status %d", resp.StatusCode)
	}
	waitIdle(t, l)
}

func testPanic(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("handler bug")
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	for _, path := range []string{"/panic", "/abort"} {
		resp, err := s.client.Get(s.url + path)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: got a response (%d); the server should abort the connection", path, resp.StatusCode)
		}
	}
	waitIdle(t, l)
	if _, _, ign := released(l); ign != 2 {
		t.Errorf("ignored releases %d, want 2 (panics are not overload signals)", ign)
	}
}

func testClientDisconnect(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	started, sawCancel := make(chan struct{}), make(chan error, 1)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		sawCancel <- r.Context().Err()
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/slow", nil)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	if n := l.InFlight(); n != 1 {
		t.Errorf("in flight %d while the handler runs, want 1", n)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Error("the cancelled client got a response")
	}
	if err := <-sawCancel; !errors.Is(err, context.Canceled) {
		t.Errorf("handler context: %v, want context.Canceled", err)
	}
	waitIdle(t, l)
	if s, d, i := released(l); s != 0 || d != 0 || i != 1 {
		t.Errorf("released success %d dropped %d ignored %d, want one ignored", s, d, i)
	}
}

// testDisconnectWhileQueued: a client that gives up while its request
// waits for admission leaves nothing behind.
func testDisconnectWhileQueued(t *testing.T, a Adapter) {
	l := twoClasses(t, 2)
	held := make([]shed.Permit, 2)
	for i := range held {
		held[i], _ = l.TryAcquire(shed.Request{Class: 1})
	}
	var calls sync.Map
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Store(r.URL.Path, true) })
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DefaultClass: "interactive"}}, app)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/q", nil)
		resp, err := s.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	WaitFor(t, "the request to queue", func() bool { return l.Snapshot().Queued == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Error("the cancelled client got a response")
	}
	WaitFor(t, "the waiter to leave", func() bool { return l.Snapshot().Classes[0].Cancelled == 1 })
	for i := range held {
		held[i].Release(shed.Ignored)
	}
	waitIdle(t, l)
	if _, ok := calls.Load("/q"); ok {
		t.Error("the handler ran for a request whose client left while queued")
	}
}

// testServerCancelWhileQueued: the server, not the client, ends the
// context of queued requests (an outer middleware that cancels at
// shutdown, as a cancelled http.Server.BaseContext does). Their clients
// are still there: each gets the sanitized 503, never an empty 200 for
// work that did not happen, and the handler does not run.
func testServerCancelWhileQueued(t *testing.T, a Adapter) {
	l := twoClasses(t, 2)
	held := make([]shed.Permit, 2)
	for i := range held {
		held[i], _ = l.TryAcquire(shed.Request{Class: 1})
	}
	shutdown, stop := context.WithCancel(context.Background())
	defer stop()
	outer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(shutdown, cancel)()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	var ran sync.Map
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Store(r.URL.Query().Get("id"), true)
		io.WriteString(w, "charged")
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DefaultClass: "interactive"}, Outer: outer}, app)
	const n = 3
	type result struct {
		resp *http.Response
		body []byte
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			resp, err := s.client.Post(fmt.Sprintf("%s/charge?id=%d", s.url, i), "application/json", strings.NewReader(`{"amount":1}`))
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp, b, err}
		}()
	}
	WaitFor(t, "the requests to queue", func() bool { return l.Snapshot().Queued == n })
	stop()
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("POST /charge: %v", r.err)
			continue
		}
		checkProblem(t, r.resp, r.body, http.StatusServiceUnavailable, true, "cancel", "shutdown", "context")
	}
	for i := range held {
		held[i].Release(shed.Ignored)
	}
	waitIdle(t, l)
	ran.Range(func(id, _ any) bool {
		t.Errorf("the handler ran for request %v, whose context ended while it was queued", id)
		return true
	})
}

// testStreaming: a streaming response holds its permit until the handler
// returns, and flushing works through the middleware.
func testStreaming(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	more := make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, fmt.Sprintf("%T is not a Flusher", w), 500)
			return
		}
		if _, ok := w.(http.Hijacker); !ok {
			http.Error(w, fmt.Sprintf("%T is not a Hijacker", w), 500)
			return
		}
		io.WriteString(w, "first\n")
		f.Flush()
		<-more
		io.WriteString(w, "second\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			io.WriteString(w, "controller flush: "+err.Error())
		}
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	resp, err := s.client.Get(s.url + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		close(more)
		t.Fatalf("first chunk %q, %v", line, err)
	}
	// The first chunk arrived while the handler is still running.
	if n := l.InFlight(); n != 1 {
		t.Errorf("in flight %d while streaming, want 1", n)
	}
	close(more)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
	waitIdle(t, l)
	if s, _, _ := released(l); s != 1 {
		t.Errorf("success releases %d, want 1", s)
	}
}

// testStreamReleasedEarly is the documented remedy for server-sent events
// and other endless streams: the handler releases its permit (Ignored)
// once the stream is set up, so that an open stream holds no slot, and the
// middleware's own release does nothing more.
func testStreamReleasedEarly(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{Limit: 1})
	more := make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			io.WriteString(w, "ok")
			return
		}
		a.Permit(r).Release(shed.Ignored)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
			select {
			case <-more:
			case <-r.Context().Done():
				return
			}
		}
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	resp, err := s.client.Get(s.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	// The stream is open and holds no slot: the limit of 1 is free.
	if r, _ := s.get("/other", nil); r.StatusCode != 200 {
		t.Errorf("a request next to an open stream: status %d, want 200", r.StatusCode)
	}
	more <- struct{}{}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s.client.CloseIdleConnections()
	waitIdle(t, l)
	if s, d, i := released(l); s != 1 || d != 0 || i != 1 {
		t.Errorf("released success %d dropped %d ignored %d, want 1, 0, 1 (the stream once)", s, d, i)
	}
}

// testHijack: a handler that hijacks the connection (a WebSocket-style
// upgrade) releases its permit, as Ignored.
func testHijack(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\nhello")
		rw.Flush()
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	b, err := io.ReadAll(conn)
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 101") || !strings.HasSuffix(string(b), "hello") {
		t.Fatalf("read %q, %v", b, err)
	}
	waitIdle(t, l)
	if s, d, i := released(l); s != 0 || d != 0 || i != 1 {
		t.Errorf("released success %d dropped %d ignored %d, want one ignored", s, d, i)
	}
}

// testIdleHijacked is issue 15's websocket fault: two idle hijacked
// connections on a limit of 2 must not turn every other request into a
// 503. The permit covers the request up to the hijack and is released
// then (Ignored: the connection's life is not a latency); HoldHijacked
// keeps it until the handler returns, and then the limit is full.
func testIdleHijacked(t *testing.T, a Adapter) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("HoldHijacked=%v", hold), func(t *testing.T) {
			l := newLimiter(t, shed.Config{Limit: 2})
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/ws" {
					io.WriteString(w, "ok")
					return
				}
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				defer conn.Close()
				rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
				rw.Flush()
				io.Copy(io.Discard, rw) // idle until the client closes
			})
			s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, HoldHijacked: hold}}, app)
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 2 {
				conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, conn)
				conn.SetDeadline(time.Now().Add(20 * time.Second))
				io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("upgrade: %v, %v", resp, err)
				}
			}
			want, inFlight := 200, 0
			if hold {
				want, inFlight = 503, 2
			}
			for range 3 {
				if resp, _ := s.get("/other", nil); resp.StatusCode != want {
					t.Errorf("a request next to two idle hijacked connections: status %d, want %d", resp.StatusCode, want)
				}
			}
			if n := l.InFlight(); n != inFlight {
				t.Errorf("in flight %d with two idle hijacked connections, want %d", n, inFlight)
			}
			for _, c := range conns {
				c.Close()
			}
			conns = nil
			waitIdle(t, l)
			wantSuccess := uint64(3)
			if hold {
				wantSuccess = 0 // the other requests were rejected
			}
			if s, d, i := released(l); s != wantSuccess || d != 0 || i != 2 {
				t.Errorf("released success %d dropped %d ignored %d; want %d, 0, 2 (the hijacked ones)", s, d, i, wantSuccess)
			}
		})
	}
}

// testSlowUploads is issue 15's slow-client fault: a few clients that
// upload slowly must not drive an adaptive limit down for everyone. The
// time a handler spends blocked reading the body is the client's, not the
// service's latency: behind a request-timeout middleware such requests
// miss their deadline (Dropped, before the fix), and without one they
// succeed with a latency that is mostly the client's (a latency far above
// the baseline, before the fix). Either way they are released Ignored and
// the Gradient limit, which here can only stay or fall, stays at 32 while
// fast requests close window after window.
func testSlowUploads(t *testing.T, a Adapter) {
	for _, timeout := range []time.Duration{300 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("timeout=%v", timeout), func(t *testing.T) { runSlowUploads(t, a, timeout) })
	}
}

// runSlowUploads is one case of testSlowUploads: 4 slow uploaders and 2
// loops of fast requests, behind a request timeout (none if 0), until
// enough uploads and windows have passed to judge the limit.
func runSlowUploads(t *testing.T, a Adapter, timeout time.Duration) {
	g := slowUploadsGradient(t)
	l := newLimiter(t, shed.Config{Source: g, MaxSamplesPerSecond: -1})
	var uploads atomic.Int64
	opts := Options{Options: shedhttp.Options{Limiter: l}}
	if timeout > 0 {
		opts.Outer = requestTimeout(timeout)
	}
	s := a.start(t, opts, slowUploadsApp(&uploads))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { slowUploader(t, strings.TrimPrefix(s.url, "http://"), stop) })
	}
	for range 2 {
		wg.Go(func() { fastRequests(t, s, stop) })
	}
	waitUploadsAndWindows(t, &uploads, g)
	close(stop)
	wg.Wait()
	waitIdle(t, l)
	// An unused limit may shrink; what must not happen is a cut.
	if cuts := limitCuts(g); cuts != "" {
		s, d, i := released(l)
		t.Errorf("the limit was cut (%s) with %d slow uploads among fast requests (released success %d, dropped %d, ignored %d; gradient %+v)",
			cuts, uploads.Load(), s, d, i, g.State())
	}
}

// slowUploadsGradient is a Gradient limit that starts at its maximum, 32,
// so that it can only stay or fall.
func slowUploadsGradient(t *testing.T) *limits.Gradient {
	t.Helper()
	g, err := limits.NewGradient(limits.GradientConfig{
		InitialLimit: 32, MaxLimit: 32,
		Tolerance: 10, // only the slow uploads' latency may count, not the noise of a shared machine
		Window:    limits.WindowConfig{MinDuration: 20 * time.Millisecond, MinSamples: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// slowUploadsApp stores the body of /upload (503 if reading it failed or
// the request's context ended), counting the uploads read in full, and
// answers any other path after 2 ms.
func slowUploadsApp(uploads *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upload" {
			time.Sleep(2 * time.Millisecond) // the service's own latency
			io.WriteString(w, "ok")
			return
		}
		_, err := io.ReadAll(r.Body)
		if err == nil {
			uploads.Add(1)
		}
		if err != nil || r.Context().Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "stored")
	})
}

// requestTimeout is a request-timeout middleware: the request's context
// ends after timeout.
func requestTimeout(timeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// fastRequests sends GET /fast, one after the other, until stop is closed.
func fastRequests(t *testing.T, s *server, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		resp, err := s.client.Get(s.url + "/fast")
		if err != nil {
			t.Errorf("fast request: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// waitUploadsAndWindows waits for 8 uploads and 20 windows of g; after
// 20 s it reports an error and returns, so that the load still stops.
func waitUploadsAndWindows(t *testing.T, uploads *atomic.Int64, g *limits.Gradient) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for uploads.Load() < 8 || g.State().Windows < 20 {
		if time.Now().After(deadline) {
			t.Errorf("after 20 s: %d uploads, %d windows", uploads.Load(), g.State().Windows)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// limitCuts lists the windows in which g cut its limit, by reason ("" if
// none did).
func limitCuts(g *limits.Gradient) string {
	var out []string
	g.Decisions(func(reason string, n uint64) {
		if strings.HasPrefix(reason, "cut-") && n > 0 {
			out = append(out, fmt.Sprintf("%s %d", reason, n))
		}
	})
	return strings.Join(out, ", ")
}

// slowUploader sends uploads of 12 bytes at 20 bytes per second on one
// connection until stop is closed.
func slowUploader(t *testing.T, addr string, stop <-chan struct{}) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Errorf("dial: %v", err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	for {
		io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 12\r\n\r\n")
		for range 12 {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{'x'}); err != nil {
				t.Errorf("upload: %v", err)
				return
			}
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("upload response: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// testOutcomePanic: a panicking Outcome (user code, run after the
// handler returned) still releases the request's permit: the panic goes
// on to the recovery outside, and once idle the server admits the next
// request.
func testOutcomePanic(t *testing.T, a Adapter) {
	l := twoClasses(t, 2)
	recovering := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { _ = recover() }() // as net/http's server or Echo's Recover
			h.ServeHTTP(w, r)
		})
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, Outcome: func(r *http.Request, status int) shed.Outcome {
		if status == http.StatusTeapot {
			panic("a bug in the user's mapping, on a rare status")
		}
		return shedhttp.DefaultOutcome(r, status)
	}}, Outer: recovering}, app)
	for range 2 {
		s.get("/teapot", nil)
	}
	waitIdle(t, l)
	if resp, _ := s.get("/", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("idle server answers %d, want 200: the permits leaked", resp.StatusCode)
	}
}

// testOutcomes: the response status decides the outcome.
func testOutcomes(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if code == 0 {
			return // nothing written: 200
		}
		w.WriteHeader(code)
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	for _, tc := range []struct {
		path string
		want shed.Outcome
	}{
		{"/", shed.Success}, {"/200", shed.Success}, {"/304", shed.Success},
		{"/404", shed.Ignored}, {"/429", shed.Ignored}, {"/500", shed.Ignored},
		{"/502", shed.Dropped}, {"/503", shed.Dropped}, {"/504", shed.Dropped},
	} {
		s0, d0, i0 := released(l)
		resp, _ := s.get(tc.path, nil)
		if tc.path != "/" && strconv.Itoa(resp.StatusCode) != tc.path[1:] {
			t.Errorf("%s: status %d", tc.path, resp.StatusCode)
		}
		waitIdle(t, l)
		s1, d1, i1 := released(l)
		got := map[shed.Outcome]uint64{shed.Success: s1 - s0, shed.Dropped: d1 - d0, shed.Ignored: i1 - i0}
		if got[tc.want] != 1 || s1+d1+i1 != s0+d0+i0+1 {
			t.Errorf("%s: releases %v, want one %v", tc.path, got, tc.want)
		}
	}

	// A custom mapping replaces the default.
	l2 := twoClasses(t, 4)
	s2 := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter: l2,
			Outcome: func(r *http.Request, status int) shed.Outcome {
				if status == 500 {
					return shed.Dropped
				}
				return shedhttp.DefaultOutcome(r, status)
			},
		},
	}, app)
	s2.get("/500", nil)
	waitIdle(t, l2)
	if _, d, _ := released(l2); d != 1 {
		t.Errorf("custom outcome: %d drops, want 1", d)
	}
}

// testReconcile: the handler sees its cost and can correct it.
func testReconcile(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{Limit: 10, MaxCost: 1000})
	errs := make(chan error, 2)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := a.Permit(r)
		if p == nil || p.Cost() != 300 {
			errs <- fmt.Errorf("permit %+v, want cost 300", p)
			return
		}
		errs <- a.Reconcile(r, 42)
		w.Header().Set("X-In-Flight-Cost", strconv.FormatInt(l.Snapshot().InFlightCost, 10))
	})
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter: l,
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost, _ = strconv.ParseInt(r.URL.Query().Get("tokens"), 10, 64)
			return def
		},
	}, app)
	resp, _ := s.get("/?tokens=300", nil)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-In-Flight-Cost"); got != "42" {
		t.Errorf("in-flight cost after reconcile %s, want 42", got)
	}
	waitIdle(t, l)
	if c := l.Snapshot().InFlightCost; c != 0 {
		t.Errorf("in-flight cost %d after release", c)
	}
}

// testSkip: skipped requests have no permit and never reach the limiter.
func testSkip(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, SkipPaths: []string{"/metrics", "/healthz"}, MaxBodyBytes: 1}}, a.classApp(l))
	resp, _ := s.do(http.MethodPost, "/metrics", nil, strings.NewReader("a larger body"))
	if resp.StatusCode != 200 || resp.Header.Get("X-Class") != "none" {
		t.Errorf("skipped: status %d class %q", resp.StatusCode, resp.Header.Get("X-Class"))
	}
	if snap := l.Snapshot(); snap.Classes[0].Admitted+snap.Classes[1].Admitted != 0 {
		t.Error("a skipped request reached the limiter")
	}
}

// testEncodedPath: SkipPaths and Routes prefixes match the path as the
// client sent it, the path routers that route on the raw path (Echo, chi)
// see. Percent-encoding a skipped path does not bypass a full limiter, and
// encoding a route prefix (or a slash of it) does not buy its class.
func testEncodedPath(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter:   l,
			SkipPaths: []string{"/healthz", "/a/b"},
			Routes:    map[string]string{"/api/": "interactive"},
		},
	}, a.classApp(l))
	for _, tc := range []struct{ path, class string }{
		{"/api/x", "interactive"},
		{"/api/v4/projects/group%2Fproject", "interactive"}, // an encoded slash after the prefix
		{"/%61pi/x", "batch"},
		{"/api%2Fx", "batch"},
		{"/healthz", "none"},
		{"/a/b", "none"},
	} {
		if resp, _ := s.get(tc.path, nil); resp.StatusCode != 200 || resp.Header.Get("X-Class") != tc.class {
			t.Errorf("%s: status %d class %q, want 200 %q", tc.path, resp.StatusCode, resp.Header.Get("X-Class"), tc.class)
		}
	}
	held := make([]shed.Permit, 4)
	for i := range held {
		held[i], _ = l.TryAcquire(shed.Request{Class: 0})
	}
	for _, path := range []string{"/%68ealthz", "/health%7A", "/%2Fhealthz", "/a%2Fb", "/a/%62"} {
		resp, body := s.get(path, nil)
		if resp.StatusCode != 503 {
			t.Errorf("%s with the limit full: status %d class %q, want 503 (not skipped)", path, resp.StatusCode, resp.Header.Get("X-Class"))
			continue
		}
		checkProblem(t, resp, body, 503, true)
	}
	if resp, _ := s.get("/healthz", nil); resp.StatusCode != 200 {
		t.Errorf("/healthz with the limit full: status %d, want 200 (skipped)", resp.StatusCode)
	}
	for i := range held {
		held[i].Release(shed.Ignored)
	}
	waitIdle(t, l)
}

// testCostTooLarge: a request that could never be admitted gets 413, not
// a 503 that invites a retry.
func testCostTooLarge(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{Limit: 10, MaxCost: 100})
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter: l,
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost = 101
			return def
		},
	}, a.classApp(l))
	resp, body := s.get("/", nil)
	checkProblem(t, resp, body, 413, false)
}

// testDraining: a replica that drains is going away, not overloaded:
// another replica can serve the request now. Its 503 carries no no-retry
// header, which would stop a shedkit client from retrying it elsewhere
// during a rolling restart, and a Retry-After of a second, not the
// limiter's RetryAfterMax (30 s by default), which a client would wait
// or, past its MaxRetryAfter, not retry at all. A Retry-After stays: it
// keeps the 503 an overload signal, which retrybudget's breaker does not
// count as the host failing.
func testDraining(t *testing.T, a Adapter) {
	l := twoClasses(t, 4)
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, a.classApp(l))
	l.DrainAt(time.Now())
	resp, body := s.get("/", nil)
	checkProblem(t, resp, body, 503, true, "drain")
	if v := resp.Header.Get(noRetryHeader); v != "" {
		t.Errorf("draining 503 carries %s: %q; a shedkit client would not retry it on another replica", noRetryHeader, v)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("draining 503 Retry-After %q, want 1", ra)
	}
}

// testSpans: the decision is recorded on the request's span.
func testSpans(t *testing.T, a Adapter) {
	spans := newSpanLog()
	defer spans.tp.Shutdown(context.Background())
	l := checkDecisionSpans(t, a, spans)
	dry := checkDryRunSpan(t, a, spans)
	waitIdle(t, l)
	waitIdle(t, dry)
}

// spanLog records one span per request, named after its path, started
// around the middleware by outer.
type spanLog struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newSpanLog() *spanLog {
	rec := tracetest.NewSpanRecorder()
	return &spanLog{rec: rec, tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
}

func (sl *spanLog) outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := sl.tp.Tracer("test").Start(r.Context(), r.URL.Path)
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// attrs waits for the span name to end and returns its attributes.
func (sl *spanLog) attrs(t *testing.T, name string) map[string]any {
	t.Helper()
	var found map[string]any
	WaitFor(t, "span "+name, func() bool {
		for _, sp := range sl.rec.Ended() {
			if sp.Name() == name {
				found = map[string]any{}
				for _, kv := range sp.Attributes() {
					found[string(kv.Key)] = kv.Value.AsInterface()
				}
				return true
			}
		}
		return false
	})
	return found
}

// check checks that the span name has exactly the attributes want.
func (sl *spanLog) check(t *testing.T, name string, want map[string]any) {
	t.Helper()
	got := sl.attrs(t, name)
	if len(got) != len(want) {
		t.Errorf("%s: attributes %v, want %v", name, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v (%T), want %v (%T)", name, k, got[k], got[k], v, v)
		}
	}
}

// checkDecisionSpans checks the spans of an admission, a rate-limited
// rejection and a rejection at the limit; it returns the limiter, for the
// caller to wait until it is idle.
func checkDecisionSpans(t *testing.T, a Adapter, spans *spanLog) *shed.Limiter {
	l := twoClasses(t, 1)
	s := a.start(t, Options{
		Options: shedhttp.Options{
			Limiter:    l,
			Routes:     map[string]string{"/limited": "interactive"},
			RateLimits: map[string]shedhttp.RateLimit{"interactive": {Rate: 1e-3, Burst: 1}},
			Clock:      NewFakeClock().Now,
		},
		Outer: spans.outer,
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost = 7
			return def
		},
	}, a.classApp(l))
	s.get("/ok", nil)
	spans.check(t, "/ok", map[string]any{
		shedhttp.AttrDecision: shedhttp.DecisionAdmitted, shedhttp.AttrClass: "batch",
		shedhttp.AttrQueueWait: 0.0, shedhttp.AttrCost: int64(7),
	})
	s.get("/limited", nil)
	s.get("/limited/again", nil)
	spans.check(t, "/limited/again", map[string]any{
		shedhttp.AttrDecision: shedhttp.DecisionRejected, shedhttp.AttrReason: "rate_limited",
		shedhttp.AttrClass: "interactive", shedhttp.AttrCost: int64(7),
	})
	p, _ := l.TryAcquire(shed.Request{})
	s.get("/full", nil)
	p.Release(shed.Ignored)
	spans.check(t, "/full", map[string]any{
		shedhttp.AttrDecision: shedhttp.DecisionRejected, shedhttp.AttrReason: "limit_exceeded",
		shedhttp.AttrClass: "batch", shedhttp.AttrCost: int64(7),
	})
	return l
}

// checkDryRunSpan checks the span of a request over the limit of a dry-run
// limiter; it returns the limiter, for the caller to wait until it is idle.
func checkDryRunSpan(t *testing.T, a Adapter, spans *spanLog) *shed.Limiter {
	dry := newLimiter(t, shed.Config{Limit: 1, DryRun: true})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: dry}, Outer: spans.outer}, a.classApp(dry))
	p, _ := dry.TryAcquire(shed.Request{})
	s.get("/dry", nil)
	p.Release(shed.Ignored)
	spans.check(t, "/dry", map[string]any{
		shedhttp.AttrDecision: shedhttp.DecisionDryRun, shedhttp.AttrReason: "limit_exceeded",
		shedhttp.AttrClass: "default", shedhttp.AttrQueueWait: 0.0, shedhttp.AttrCost: int64(1),
	})
	return dry
}

// testRandomized drives the middleware in process with a seeded random mix
// of handler behaviours (statuses, panics, cancellations, deadlines, early
// releases, reconciles) from several goroutines, and checks that every
// permit is released and no cost or waiter is left behind.
func testRandomized(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{
		Limit:   4,
		MaxCost: 40,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 8, MaxWait: 20 * time.Millisecond},
			{Name: "batch", QueueDepth: 4, MaxWait: 5 * time.Millisecond},
		},
	})
	h := a.Handler(t, Options{
		Options: shedhttp.Options{
			Limiter:    l,
			Routes:     map[string]string{"/i": "interactive"},
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1000, Burst: 50}},
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost, _ = strconv.ParseInt(r.URL.Query().Get("cost"), 10, 64)
			return def
		},
	}, a.randomizedApp())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() { sendRandomRequests(t, h, rand.New(rand.NewPCG(42, uint64(g))), 150) })
	}
	wg.Wait()
	waitIdle(t, l)
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Queued != 0 {
		t.Errorf("left behind: in flight %d, cost %d, queued %d", snap.InFlight, snap.InFlightCost, snap.Queued)
	}
	var admitted, rejected uint64
	for _, c := range snap.Classes {
		admitted += c.Admitted
		rejected += c.Rejections()
	}
	if admitted == 0 || rejected == 0 {
		t.Errorf("admitted %d, rejected %d: the mix should exercise both", admitted, rejected)
	}
}

// ctxCancel is the context key of the CancelFunc of a randomized request's
// context, for its handler to cancel it ("do=cancel").
type ctxCancel struct{}

// randomizedApp does what the request's query asks: reconcile to a cost,
// then panic, cancel its own context, release its permit early or sleep up
// to 2 ms, then answer with a status.
func (a Adapter) randomizedApp() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("reconcile") != "" {
			n, _ := strconv.ParseInt(q.Get("reconcile"), 10, 64)
			if err := a.Reconcile(r, n); err != nil {
				panic(err)
			}
		}
		switch q.Get("do") {
		case "panic":
			panic("boom")
		case "cancel":
			r.Context().Value(ctxCancel{}).(context.CancelFunc)()
		case "release":
			a.Permit(r).Release(shed.Success)
		case "slow":
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
		if code, _ := strconv.Atoi(q.Get("status")); code != 0 {
			w.WriteHeader(code)
		}
	})
}

var (
	randomBehaviours = []string{"ok", "ok", "slow", "slow", "panic", "cancel", "release", "deadline", "cancelled"}
	randomStatuses   = []string{"", "200", "404", "500", "502", "503", "504"}
)

// sendRandomRequests serves n requests drawn from rng to h, one after the
// other; a panic other than the app's own "boom" is an error.
func sendRandomRequests(t *testing.T, h http.Handler, rng *rand.Rand, n int) {
	for range n {
		do := randomBehaviours[rng.IntN(len(randomBehaviours))]
		path := []string{"/i", "/b"}[rng.IntN(2)]
		url := fmt.Sprintf("%s?do=%s&status=%s&cost=%d", path, do, randomStatuses[rng.IntN(len(randomStatuses))], rng.IntN(12))
		if rng.IntN(4) == 0 {
			url += fmt.Sprintf("&reconcile=%d", rng.IntN(20))
		}
		ctx, cancel := context.WithCancel(context.Background())
		ctx = context.WithValue(ctx, ctxCancel{}, cancel)
		switch do {
		case "deadline":
			ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
		case "cancelled":
			cancel()
		}
		r := httptest.NewRequest(http.MethodGet, url, nil).WithContext(ctx)
		func() {
			defer func() {
				if p := recover(); p != nil && p != "boom" {
					t.Errorf("%s: unexpected panic %v", url, p)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		cancel()
	}
}
