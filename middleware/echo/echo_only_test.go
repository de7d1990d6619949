package echo_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

func twoClasses(t testing.TB, limit int) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: limit, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRoutePatterns: Routes match Echo's route pattern, then path prefixes;
// the pattern is known only after routing (Use, not Pre).
func TestRoutePatterns(t *testing.T) {
	l := twoClasses(t, 4)
	mw, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{Limiter: l, Routes: map[string]string{"/users/:id": "interactive", "/static/": "interactive"}}})
	if err != nil {
		t.Fatal(err)
	}
	class := func(c echov4.Context) error {
		p := shedecho.Permit(c)
		return c.String(200, l.ClassName(p.Class()))
	}
	e := newEcho()
	e.GET("/users/:id", class, mw)
	e.GET("/static/*", class, mw)
	e.GET("/other", class, mw)
	pre := newEcho()
	pre.Pre(mw)
	pre.GET("/users/:id", class)
	url, preURL := serve(t, e), serve(t, pre)
	for _, tc := range []struct{ url, want string }{
		{url + "/users/7", "interactive"},
		{url + "/static/app.js", "interactive"},
		{url + "/other", "batch"},
		{preURL + "/users/7", "batch"}, // before routing: no pattern, no prefix match
	} {
		if _, body := get(t, tc.url); body != tc.want {
			t.Errorf("%s: class %q, want %q", tc.url, body, tc.want)
		}
	}
}

// TestHandlerErrors: a handler's returned error decides the status, as
// Echo's error handler will write it, and the recorder records that
// status and the outcome (a panic: no status, Ignored).
func TestHandlerErrors(t *testing.T) {
	l := twoClasses(t, 4)
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}, Recorder: rec}, middleware.Recover())
	e.GET("/unavailable", func(c echov4.Context) error { return echov4.NewHTTPError(503) })
	e.GET("/wrapped", func(c echov4.Context) error {
		return echov4.NewHTTPError(500).SetInternal(echov4.NewHTTPError(504))
	})
	e.GET("/error", func(c echov4.Context) error { return errors.New("bug") })
	e.GET("/notfound", func(c echov4.Context) error { return echov4.ErrNotFound })
	e.GET("/panic", func(c echov4.Context) error { panic("bug") })
	e.GET("/committed", func(c echov4.Context) error {
		c.String(200, "partial")
		return errors.New("failed after writing")
	})
	url := serve(t, e)
	cases := []struct {
		path      string
		status    int
		want      shed.Outcome
		recStatus int
	}{
		{"/unavailable", 503, shed.Dropped, 503},
		{"/wrapped", 504, shed.Dropped, 504},
		{"/error", 500, shed.Ignored, 500},
		{"/notfound", 404, shed.Ignored, 404},
		{"/panic", 500, shed.Ignored, 0}, // Recover answers 500; the permit was released first
		{"/committed", 200, shed.Success, 200},
	}
	for _, tc := range cases {
		before := l.Snapshot().Classes[1].Released
		resp, _ := get(t, url+tc.path)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
		var after [3]uint64
		for range 10_000 { // the release may be counted just after the response
			if after = l.Snapshot().Classes[1].Released; after != before {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if after[tc.want] != before[tc.want]+1 || l.InFlight() != 0 {
			t.Errorf("%s: released %v -> %v, want one more %v", tc.path, before, after, tc.want)
		}
	}
	mwtest.WaitFor(t, "every record", func() bool { return rec.Pending() >= len(cases) })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, reqs, _ := rectest.ReadRecording(t, buf.Bytes())
	if len(reqs) != len(cases) {
		t.Fatalf("%d records, want %d\n%s", len(reqs), len(cases), buf.Bytes())
	}
	for i, tc := range cases {
		if r := reqs[i]; r.Status != tc.recStatus || r.Outcome != tc.want || r.Decision != record.Admitted || !r.Timed {
			t.Errorf("%s: recorded as %+v, want status %d, outcome %v", tc.path, r, tc.recStatus, tc.want)
		}
	}
}

func TestSkipperAndRejectHandler(t *testing.T) {
	l := twoClasses(t, 1)
	mw, err := shedecho.Config{
		Options: shedhttp.Options{
			Limiter: l,
		},
		Skipper: func(c echov4.Context) bool { return c.Path() == "/live" },
		RejectHandler: func(c echov4.Context, rej shedhttp.Rejection) error {
			return echov4.NewHTTPError(rej.Status, "busy")
		},
	}.ToMiddleware()
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	e.Use(mw)
	e.GET("/live", func(c echov4.Context) error { return c.String(200, "up") })
	e.GET("/work", func(c echov4.Context) error { return c.String(200, "done") })
	p, _ := l.TryAcquire(shed.Request{Class: 0})
	defer p.Release(shed.Ignored)
	url := serve(t, e)
	if resp, body := get(t, url+"/live"); resp.StatusCode != 200 || body != "up" {
		t.Errorf("skipped: %d %q", resp.StatusCode, body)
	}
	resp, body := get(t, url+"/work")
	if resp.StatusCode != 503 || !strings.Contains(body, "busy") || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Shedkit-No-Retry") != "overloaded" {
		t.Errorf("rejected: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestContextAccess: a native Echo handler reaches its permit through the
// Echo context and through the request context.
func TestContextAccess(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 2, MaxCost: 100})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{
		Options: shedhttp.Options{
			Limiter: l,
		},
		Classify: func(c echov4.Context, def shedhttp.Classification) shedhttp.Classification {
			def.Cost = 50
			return def
		},
	})
	var errs []error
	e.GET("/", func(c echov4.Context) error {
		if p := shedecho.Permit(c); p == nil || p.Cost() != 50 {
			errs = append(errs, errors.New("no permit through the Echo context"))
		}
		errs = append(errs, shedecho.Reconcile(c, 10))
		if got := l.Snapshot().InFlightCost; got != 10 {
			errs = append(errs, errors.New("reconcile did not apply"))
		}
		return c.NoContent(204)
	})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 204 || errors.Join(errs...) != nil {
		t.Errorf("code %d: %v", w.Code, errors.Join(errs...))
	}
	c := e.NewContext(httptest.NewRequest("GET", "/", nil), httptest.NewRecorder())
	if shedecho.Permit(c) != nil || !errors.Is(shedecho.Reconcile(c, 1), shedhttp.ErrNoPermit) {
		t.Error("a permit outside the middleware")
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := shedecho.New(shedecho.Config{}); !errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), "Limiter") {
		t.Errorf("no limiter: %v", err)
	}
	if _, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{Limiter: twoClasses(t, 1), Routes: map[string]string{"/a": "vip"}}}); !errors.Is(err, shedhttp.ErrInvalidConfig) {
		t.Errorf("unknown class: %v", err)
	}
	// A key header whose name a recording's header cannot hold: an error
	// naming KeyHeader, only with a recorder.
	rec, err := record.New(record.Config{Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()
	long := shedhttp.Options{Limiter: twoClasses(t, 1), KeyHeader: "X-" + strings.Repeat("t", record.MaxKeySourceBytes)}
	if _, err := shedecho.New(shedecho.Config{Options: long, Recorder: rec}); !errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), "KeyHeader") {
		t.Errorf("key header too long for a recording: %v", err)
	}
	if _, err := shedecho.New(shedecho.Config{Options: long}); err != nil {
		t.Errorf("the same without a recorder: %v", err)
	}
}

// TestEncodedSkipPath is issue 15's bypass: with /healthz skipped and a
// /:report route, GET /%68ealthz reaches the expensive report handler
// (Echo routes on the raw path), so it must not be skipped: with the limit
// full and the key's rate spent it is rejected, and the handler does not
// run.
func TestEncodedSkipPath(t *testing.T) {
	l := twoClasses(t, 1)
	mw, err := shedecho.New(shedecho.Config{
		Options: shedhttp.Options{
			Limiter:    l,
			SkipPaths:  []string{"/healthz"},
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1e-3, Burst: 1}},
			Clock:      func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	e.Use(mw)
	e.GET("/healthz", func(c echov4.Context) error { return c.String(200, "healthy") })
	var reports atomic.Int64
	e.GET("/:report", func(c echov4.Context) error {
		reports.Add(1)
		return c.String(200, "report "+c.Param("report"))
	})
	url := serve(t, e)
	if resp, body := get(t, url+"/q1"); resp.StatusCode != 200 || body != "report q1" {
		t.Fatalf("first report: %d %q", resp.StatusCode, body) // spends the key's burst
	}
	p, _ := l.TryAcquire(shed.Request{Class: 0})
	defer p.Release(shed.Ignored)
	for _, path := range []string{"/%68ealthz", "/healthz%2F", "/q2"} {
		if resp, body := get(t, url+path); resp.StatusCode != 429 && resp.StatusCode != 503 {
			t.Errorf("%s: status %d %q, want 429 or 503", path, resp.StatusCode, body)
		}
	}
	if n := reports.Load(); n != 1 {
		t.Errorf("the report handler ran %d times, want once (the encoded paths bypassed the middleware)", n)
	}
	if resp, body := get(t, url+"/healthz"); resp.StatusCode != 200 || body != "healthy" {
		t.Errorf("/healthz: %d %q, want the skipped health check", resp.StatusCode, body)
	}
}

// TestHijackThroughUnwrapOnlyWriter: behind an outer middleware whose
// writer only unwraps, c.Response().Hijack (which goes through
// http.ResponseController) still releases the permit, as the package
// documents: held, an idle WebSocket would make the service shed everyone.
// The outer middleware is an Echo one, or a net/http one that Echo's
// WrapMiddleware runs (its writer then unwraps to Echo's Response).
func TestHijackThroughUnwrapOnlyWriter(t *testing.T) {
	echoOuter := func(next echov4.HandlerFunc) echov4.HandlerFunc {
		return func(c echov4.Context) error {
			w := c.Response().Writer
			c.Response().Writer = mwtest.UnwrapOnly(w)
			defer func() { c.Response().Writer = w }()
			return next(c)
		}
	}
	httpOuter := echov4.WrapMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(mwtest.UnwrapOnly(w), r)
		})
	})
	for name, outer := range map[string]echov4.MiddlewareFunc{"Echo": echoOuter, "WrapMiddleware": httpOuter} {
		t.Run(name, func(t *testing.T) {
			l := twoClasses(t, 1)
			e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}}, outer)
			e.GET("/ws", func(c echov4.Context) error {
				conn, rw, err := c.Response().Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return err
				}
				defer conn.Close()
				rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
				rw.Flush()
				io.Copy(io.Discard, rw) // idle until the client closes
				return nil
			})
			e.GET("/", func(c echov4.Context) error { return c.String(200, "ok") })
			url := serve(t, e)
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v, %v", resp, err)
			}
			if n := l.InFlight(); n != 0 {
				t.Errorf("in flight %d while the hijacked connection is idle, want 0", n)
			}
			if resp, _ := get(t, url+"/"); resp.StatusCode != 200 {
				t.Errorf("a plain request next to one idle WebSocket: %d, want 200", resp.StatusCode)
			}
			conn.Close()
		})
	}
}

// TestNewRejectsUnmatchablePaths: a SkipPaths entry or a Routes key that
// neither a request path nor an Echo route pattern can match (both start
// with "/") is a configuration error naming the entry, not an endpoint
// silently shed or a class silently never given.
func TestNewRejectsUnmatchablePaths(t *testing.T) {
	l := twoClasses(t, 1)
	for _, tc := range []struct {
		name  string
		opts  shedhttp.Options
		field string // "" for a valid configuration
	}{
		{"skip path without slash", shedhttp.Options{Limiter: l, SkipPaths: []string{"/metrics", "/ready", "healthz"}}, "SkipPaths[2]"},
		{"empty skip path", shedhttp.Options{Limiter: l, SkipPaths: []string{""}}, "SkipPaths[0]"},
		{"route pattern without slash", shedhttp.Options{Limiter: l, Routes: map[string]string{"users/:id": "interactive"}}, `Routes["users/:id"]`},
		{"skip method that is not a token", shedhttp.Options{Limiter: l, SkipMethods: []string{"OPTIONS "}}, "SkipMethods[0]"},
		{"duplicates are harmless", shedhttp.Options{Limiter: l, SkipPaths: []string{"/healthz", "/healthz"}}, ""},
		{"route pattern", shedhttp.Options{Limiter: l, SkipPaths: []string{"/"}, Routes: map[string]string{"/users/:id": "interactive"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shedecho.New(shedecho.Config{Options: tc.opts})
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.field != "" && (!errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), ": "+tc.field+":")):
				t.Fatalf("New: %v, want an ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
