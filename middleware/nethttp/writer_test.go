package nethttp_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

func newLimiter(t testing.TB, limit int) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// interfaces lists the optional interfaces w implements.
func interfaces(w http.ResponseWriter) string {
	var s []string
	if _, ok := w.(http.Flusher); ok {
		s = append(s, "Flusher")
	}
	if _, ok := w.(http.Hijacker); ok {
		s = append(s, "Hijacker")
	}
	if _, ok := w.(io.ReaderFrom); ok {
		s = append(s, "ReaderFrom")
	}
	if _, ok := w.(io.StringWriter); ok {
		s = append(s, "StringWriter")
	}
	if _, ok := w.(interface{ FlushError() error }); ok {
		s = append(s, "FlushError")
	}
	//lint:ignore SA1019 the test checks the wrapper keeps the deprecated method
	if _, ok := w.(http.CloseNotifier); ok {
		s = append(s, "CloseNotifier")
	}
	if _, ok := w.(interface{ SetReadDeadline(time.Time) error }); ok {
		s = append(s, "SetReadDeadline")
	}
	if _, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		s = append(s, "SetWriteDeadline")
	}
	if _, ok := w.(interface{ EnableFullDuplex() error }); ok {
		s = append(s, "EnableFullDuplex")
	}
	if _, ok := w.(http.Pusher); ok {
		s = append(s, "Pusher")
	}
	return strings.Join(s, ",")
}

// TestWriterInterfaces: over HTTP/1.1 and HTTP/2, the handler's writer
// has exactly the optional interfaces of the server's, and
// http.ResponseController reaches the server's writer through it.
func TestWriterInterfaces(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("HTTP/2=%v", h2), func(t *testing.T) {
			l := newLimiter(t, 4)
			mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 2)
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
					got <- "SetWriteDeadline: " + err.Error()
					return
				}
				got <- interfaces(w)
				io.Copy(w, strings.NewReader("read from")) // ReadFrom over HTTP/1
			})
			var have, want string
			for _, h := range []http.Handler{app, mw(app)} {
				srv := httptest.NewUnstartedServer(h)
				srv.EnableHTTP2 = h2
				if h2 {
					srv.StartTLS()
				} else {
					srv.Start()
				}
				client := srv.Client()
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "read from" || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
					t.Errorf("body %q over %s", b, resp.Proto)
				}
				client.CloseIdleConnections()
				srv.Close()
				want, have = have, <-got
			}
			if want != have || !strings.Contains(have, map[bool]string{false: "ReaderFrom", true: "Pusher"}[h2]) {
				t.Errorf("writer interfaces %q through the middleware, %q without", have, want)
			}
		})
	}
}

// hijackOnly is a writer wrapper of some other middleware that keeps only
// Hijacker: the middleware cannot use its HTTP/1 wrapper for it.
type hijackOnly struct {
	http.ResponseWriter
	http.Hijacker
}

// TestHijackThroughOtherWriter: behind an outer middleware whose writer
// hides the HTTP/1 method set, a hijack still releases the permit, and the
// handler's writer still has exactly the interfaces of the one it got.
func TestHijackThroughOtherWriter(t *testing.T) {
	l := newLimiter(t, 1)
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- interfaces(w)
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(io.Discard, rw) // idle until the client closes
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(hijackOnly{w, w.(http.Hijacker)}, r)
	}))
	defer srv.Close()
	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	if got := <-seen; got != "Hijacker" {
		t.Errorf("the handler's writer has %q, want only Hijacker", got)
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("in flight %d while the hijacked connection is open, want 0", n)
	}
	conn.Close()
}

// unwrapFlusher forwards Flush too, as many such writers do.
type unwrapFlusher struct{ http.ResponseWriter }

func (u unwrapFlusher) Unwrap() http.ResponseWriter { return u.ResponseWriter }

func (u unwrapFlusher) Flush() { u.ResponseWriter.(http.Flusher).Flush() }

// TestHijackThroughUnwrapOnlyWriter: behind an outer writer that only
// unwraps, a hijack through http.ResponseController (as gorilla/websocket
// and coder/websocket do it) releases the permit: held, idle WebSockets
// would fill the limit and every other request would get a 503. The
// handler's writer keeps the outer writer's interfaces, and can hijack
// and flush (FlushError: see TestFlushPastUnwrapOnlyWriter, and
// TestOuterFlushErrorKept for an outer writer with its own).
func TestHijackThroughUnwrapOnlyWriter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		outer func(http.ResponseWriter) http.ResponseWriter
		want  string
	}{
		{"UnwrapOnly", mwtest.UnwrapOnly, "Hijacker,FlushError"},
		{"UnwrapFlusher", func(w http.ResponseWriter) http.ResponseWriter { return unwrapFlusher{w} }, "Flusher,Hijacker,FlushError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, 1)
			mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
			if err != nil {
				t.Fatal(err)
			}
			seen := make(chan string, 1)
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/ws" {
					return
				}
				seen <- interfaces(w)
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				defer conn.Close()
				rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
				rw.Flush()
				io.Copy(io.Discard, rw) // idle until the client closes
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(tc.outer(w), r)
			}))
			defer srv.Close()
			conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != 101 {
				t.Fatalf("upgrade: %v, %v", resp, err)
			}
			if got := <-seen; got != tc.want {
				t.Errorf("the handler's writer has %q, want %q", got, tc.want)
			}
			if n := l.InFlight(); n != 0 {
				t.Errorf("in flight %d while the hijacked connection is idle, want 0", n)
			}
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			resp, err := client.Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("a plain request next to one idle WebSocket: %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestWriteHeaderAfterImplicitOK: a handler that writes or flushes before
// any WriteHeader sends an implicit 200; a WriteHeader(503) after it is
// superfluous (net/http ignores it), so the permit must be released with
// the outcome of the 200 the client got: a Dropped release would cut the
// limit for everyone. The middleware's own HTTP/1 and HTTP/2 writers see
// the calls. An empty ReadFrom sends nothing, and then the 503 is the
// status.
func TestWriteHeaderAfterImplicitOK(t *testing.T) {
	write := func(w http.ResponseWriter) { w.Write([]byte("done")) }
	writeString := func(w http.ResponseWriter) { io.WriteString(w, "done") }
	readFrom := func(w http.ResponseWriter) { w.(io.ReaderFrom).ReadFrom(strings.NewReader("done")) }
	flush := func(w http.ResponseWriter) { w.(http.Flusher).Flush() }
	flushError := func(w http.ResponseWriter) { http.NewResponseController(w).Flush() }
	emptyReadFrom := func(w http.ResponseWriter) { w.(io.ReaderFrom).ReadFrom(strings.NewReader("")) }
	for _, tc := range []struct {
		name  string
		h2    bool
		first func(w http.ResponseWriter)
		want  int
	}{
		{"HTTP1/Write", false, write, 200},
		{"HTTP1/WriteString", false, writeString, 200},
		{"HTTP1/ReadFrom", false, readFrom, 200},
		{"HTTP1/Flush", false, flush, 200},
		{"HTTP1/FlushError", false, flushError, 200},
		{"HTTP1/EmptyReadFrom", false, emptyReadFrom, 503},
		{"HTTP2/Write", true, write, 200},
		{"HTTP2/WriteString", true, writeString, 200},
		{"HTTP2/Flush", true, flush, 200},
		{"HTTP2/FlushError", true, flushError, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, 4)
			mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.first(w)
				w.WriteHeader(http.StatusServiceUnavailable) // superfluous after a 200
			})))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // "superfluous WriteHeader"
			srv.EnableHTTP2 = tc.h2
			if tc.h2 {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			client := srv.Client()
			defer client.CloseIdleConnections()
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[tc.h2] {
				t.Fatalf("client got %d over %s, want %d", resp.StatusCode, resp.Proto, tc.want)
			}
			c := waitReleased(t, l)
			if tc.want == 200 && (c.success != 1 || c.dropped != 0) || tc.want == 503 && (c.success != 0 || c.dropped != 1) {
				t.Errorf("client got %d, permit released success %d dropped %d", resp.StatusCode, c.success, c.dropped)
			}
		})
	}
}

// TestInformationalStatus: a 1xx response is not the final status.
func TestInformationalStatus(t *testing.T) {
	l := newLimiter(t, 4)
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if r := l.Snapshot().Classes[0].Released; r[shed.Dropped] != 1 {
		t.Errorf("released %v, want one dropped (the final status is 503)", r)
	}
}

func TestRejectAndSkip(t *testing.T) {
	l := newLimiter(t, 1)
	var got []shedhttp.Rejection
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter: l,
		},
		Skip: func(r *http.Request) bool { return r.Header.Get("X-Internal") == "1" },
		Reject: func(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) {
			got = append(got, rej)
			if w.Header().Get("Retry-After") == "" || w.Header().Get("Shedkit-No-Retry") != "overloaded" {
				t.Errorf("protocol headers not set before Reject: %v", w.Header())
			}
			w.WriteHeader(rej.Status)
			io.WriteString(w, "custom")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p, _ := l.TryAcquire(shed.Request{})
	defer p.Release(shed.Ignored)

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 503 || w.Body.String() != "custom" || len(got) != 1 || got[0].Reason != shed.ReasonLimit || !errors.Is(got[0].Err, shed.ErrRejected) {
		t.Errorf("code %d body %q rejections %+v", w.Code, w.Body, got)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Internal", "1")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Errorf("skipped request: %d", w.Code)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := nethttp.New(nethttp.Config{}); !errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), "Limiter") {
		t.Errorf("no limiter: %v", err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: newLimiter(t, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	mw(nil).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 404 {
		t.Errorf("nil next: %d, want 404", w.Code)
	}
	if nethttp.Permit(httptest.NewRequest("GET", "/", nil).Context()) != nil {
		t.Error("a permit outside the middleware")
	}
}

// TestNewRejectsUnmatchablePaths: a SkipPaths entry or a Routes prefix that
// no request path can match (request paths start with "/") is a
// configuration error naming the entry, not an endpoint silently shed or
// a class silently never given.
func TestNewRejectsUnmatchablePaths(t *testing.T) {
	l := newLimiter(t, 1)
	for _, tc := range []struct {
		name  string
		opts  shedhttp.Options
		field string // "" for a valid configuration
	}{
		{"skip path without slash", shedhttp.Options{Limiter: l, SkipPaths: []string{"/metrics", "/ready", "healthz"}}, "SkipPaths[2]"},
		{"empty skip path", shedhttp.Options{Limiter: l, SkipPaths: []string{""}}, "SkipPaths[0]"},
		{"skip path as a URL", shedhttp.Options{Limiter: l, SkipPaths: []string{"https://example.com/healthz"}}, "SkipPaths[0]"},
		{"route without slash", shedhttp.Options{Limiter: l, Routes: map[string]string{"api/": "default"}}, `Routes["api/"]`},
		{"skip method that is not a token", shedhttp.Options{Limiter: l, SkipMethods: []string{"OPTIONS "}}, "SkipMethods[0]"},
		{"duplicates are harmless", shedhttp.Options{Limiter: l, SkipPaths: []string{"/healthz", "/healthz"}}, ""},
		{"root", shedhttp.Options{Limiter: l, SkipPaths: []string{"/"}, Routes: map[string]string{"/": "default"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nethttp.New(nethttp.Config{Options: tc.opts})
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.field != "" && (!errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), ": "+tc.field+":")):
				t.Fatalf("New: %v, want an ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
