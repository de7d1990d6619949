package core_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// pipeWriter is a server's writer that can be hijacked (to one end of a
// net.Pipe) and has none of the HTTP/1 writer's other methods.
type pipeWriter struct {
	*httptest.ResponseRecorder
	peer net.Conn
}

func (w *pipeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, peer := net.Pipe()
	w.peer = peer
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)), nil
}

// Outer writers in the Go 1.20 style: Unwrap, and no Hijack.
type (
	unwrapper struct{ http.ResponseWriter }
	unwrapC   struct{ unwrapper }
	unwrapFR  struct{ unwrapper }
	unwrapFCR struct{ unwrapper }
)

func (u unwrapper) Unwrap() http.ResponseWriter       { return u.ResponseWriter }
func (unwrapC) CloseNotify() <-chan bool              { return nil }
func (unwrapFR) Flush()                               {}
func (unwrapFR) ReadFrom(io.Reader) (int64, error)    { return 0, nil }
func (unwrapFCR) Flush()                              {}
func (unwrapFCR) CloseNotify() <-chan bool            { return nil }
func (unwrapFCR) ReadFrom(r io.Reader) (int64, error) { return 0, nil }

// selfUnwrapper is a buggy writer whose Unwrap never ends.
type selfUnwrapper struct{ http.ResponseWriter }

func (u selfUnwrapper) Unwrap() http.ResponseWriter { return u }

// optional lists the optional interfaces that handlers find by a type
// assertion.
func optional(w http.ResponseWriter) string {
	var s []string
	if _, ok := w.(http.Flusher); ok {
		s = append(s, "Flusher")
	}
	//lint:ignore SA1019 the test checks the wrapper keeps the deprecated method
	if _, ok := w.(http.CloseNotifier); ok {
		s = append(s, "CloseNotifier")
	}
	if _, ok := w.(io.ReaderFrom); ok {
		s = append(s, "ReaderFrom")
	}
	if _, ok := w.(http.Hijacker); ok {
		s = append(s, "Hijacker")
	}
	return strings.Join(s, ",")
}

// TestWrapWriterHijackBelow: when only a writer down the Unwrap chain can
// hijack, the wrapper gets a Hijack of its own, keeps the outer writer's
// interfaces, and a hijack through http.ResponseController releases the
// permit; a superfluous WriteHeader after a write is not the status.
func TestWrapWriterHijackBelow(t *testing.T) {
	for _, tc := range []struct {
		outer func(http.ResponseWriter) http.ResponseWriter
		want  string
	}{
		{func(w http.ResponseWriter) http.ResponseWriter { return unwrapper{w} }, "Hijacker"},
		{func(w http.ResponseWriter) http.ResponseWriter { return unwrapC{unwrapper{w}} }, "CloseNotifier,Hijacker"},
		{func(w http.ResponseWriter) http.ResponseWriter { return unwrapFR{unwrapper{w}} }, "Flusher,ReaderFrom,Hijacker"},
		{func(w http.ResponseWriter) http.ResponseWriter { return unwrapFCR{unwrapper{w}} }, "Flusher,CloseNotifier,ReaderFrom,Hijacker"},
	} {
		for _, recordStatus := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/recordStatus=%v", tc.want, recordStatus), func(t *testing.T) {
				wrapHijackBelow(t, tc.outer, tc.want, recordStatus)
			})
		}
	}
}

// wrapHijackBelow runs one case of TestWrapWriterHijackBelow.
func wrapHijackBelow(t *testing.T, outer func(http.ResponseWriter) http.ResponseWriter, want string, recordStatus bool) {
	l := limiter(t)
	e, err := core.New(core.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	st, rej := e.Admit(r, shedhttp.Classification{Class: 1})
	if st == nil {
		t.Fatalf("not admitted: %+v", rej)
	}
	server := &pipeWriter{ResponseRecorder: httptest.NewRecorder()}
	w := st.WrapWriter(outer(server), recordStatus)
	if got := optional(w); got != want {
		t.Errorf("the wrapper has %q, want %q", got, want)
	}
	io.WriteString(w, "body")
	w.WriteHeader(http.StatusServiceUnavailable) // superfluous
	if recordStatus && st.Status != http.StatusOK {
		t.Errorf("status %d after a write, want 200", st.Status)
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Fatalf("hijack: %v", err)
	}
	conn.Close()
	server.peer.Close()
	if n := l.InFlight(); n != 0 {
		t.Errorf("in flight %d after the hijack, want 0", n)
	}
	e.Release(st, r, st.Status)
	if got := l.Snapshot().Classes[1].Released; got[shed.Ignored] != 1 {
		t.Errorf("released %v, want one ignored (the hijack)", got)
	}
}

// TestWrapWriterUnwrapLoop: a writer whose Unwrap chain never ends does
// not hang the request.
func TestWrapWriterUnwrapLoop(t *testing.T) {
	e, err := core.New(core.Config{Limiter: limiter(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	st, rej := e.Admit(r, shedhttp.Classification{Class: 1})
	if st == nil {
		t.Fatalf("not admitted: %+v", rej)
	}
	w := selfUnwrapper{httptest.NewRecorder()}
	if got := st.WrapWriter(w, false); got != http.ResponseWriter(w) {
		t.Errorf("WrapWriter wrapped a writer that cannot be hijacked: %T", got)
	}
	e.Release(st, r, 0)
}

// h1Fake has the method set of net/http's HTTP/1 writer, h2Fake that of
// its HTTP/2 writer; the others add the method that the middleware's own
// wrappers would lose.
type (
	h1Fake     struct{ *httptest.ResponseRecorder }
	h1Push     struct{ h1Fake }
	h2Fake     struct{ *httptest.ResponseRecorder }
	h2Hijack   struct{ h2Fake }
	h2ReadFrom struct{ h2Fake }
)

func (h1Fake) FlushError() error                 { return nil }
func (h1Fake) CloseNotify() <-chan bool          { return nil }
func (h1Fake) ReadFrom(io.Reader) (int64, error) { return 0, nil }
func (h1Fake) SetReadDeadline(time.Time) error   { return nil }
func (h1Fake) SetWriteDeadline(time.Time) error  { return nil }
func (h1Fake) EnableFullDuplex() error           { return nil }
func (h1Fake) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (h1Push) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

func (h2Fake) FlushError() error                    { return nil }
func (h2Fake) CloseNotify() <-chan bool             { return nil }
func (h2Fake) Push(string, *http.PushOptions) error { return http.ErrNotSupported }
func (h2Fake) SetReadDeadline(time.Time) error      { return nil }
func (h2Fake) SetWriteDeadline(time.Time) error     { return nil }
func (h2Fake) EnableFullDuplex() error              { return nil }
func (h2Hijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (h2ReadFrom) ReadFrom(io.Reader) (int64, error) { return 0, nil }

// methodSet lists the optional methods of w that handlers, io and
// http.ResponseController look for, and extra.
func methodSet(w http.ResponseWriter, extra ...string) string {
	s := extra
	for name, ok := range map[string]bool{
		//lint:ignore SA1019 the test checks the wrapper keeps the deprecated method
		"CloseNotify":      is[http.CloseNotifier](w),
		"EnableFullDuplex": is[interface{ EnableFullDuplex() error }](w),
		"Flush":            is[http.Flusher](w),
		"FlushError":       is[interface{ FlushError() error }](w),
		"Hijack":           is[http.Hijacker](w),
		"Push":             is[http.Pusher](w),
		"ReadFrom":         is[io.ReaderFrom](w),
		"SetReadDeadline":  is[interface{ SetReadDeadline(time.Time) error }](w),
		"SetWriteDeadline": is[interface{ SetWriteDeadline(time.Time) error }](w),
		"Unwrap":           is[interface{ Unwrap() http.ResponseWriter }](w),
		"WriteString":      is[io.StringWriter](w),
	} {
		if ok {
			s = append(s, name)
		}
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func is[T any](w http.ResponseWriter) bool {
	_, ok := w.(T)
	return ok
}

// admit returns the state of an admitted request, released at the end of
// the test.
func admit(t *testing.T) *core.State {
	e, err := core.New(core.Config{Limiter: limiter(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	st, rej := e.Admit(r, shedhttp.Classification{Class: 1})
	if st == nil {
		t.Fatalf("not admitted: %+v", rej)
	}
	t.Cleanup(func() { e.Release(st, r, st.Status) })
	return st
}

// TestWrapWriterServerWriters: net/http's HTTP/1 and HTTP/2 writers get
// the middleware's own wrapper, which allocates nothing; a writer with
// both Hijack and Push, or a method the wrapper lacks, gets httpsnoop.
// Either way the wrapper has w's optional methods, and Unwrap, and a
// WriteHeader after a write is not the status.
func TestWrapWriterServerWriters(t *testing.T) {
	rec := httptest.NewRecorder
	for _, tc := range []struct {
		name    string
		w       func() http.ResponseWriter
		wrapper string // the wrapper's type; "" for httpsnoop's
	}{
		{"HTTP1", func() http.ResponseWriter { return h1Fake{rec()} }, "*core.h1Writer"},
		{"HTTP2", func() http.ResponseWriter { return h2Fake{rec()} }, "*core.h2Writer"},
		{"HTTP1+Push", func() http.ResponseWriter { return h1Push{h1Fake{rec()}} }, ""},
		{"HTTP2+Hijack", func() http.ResponseWriter { return h2Hijack{h2Fake{rec()}} }, ""},
		{"HTTP2+ReadFrom", func() http.ResponseWriter { return h2ReadFrom{h2Fake{rec()}} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := admit(t)
			w := tc.w()
			ww := st.WrapWriter(w, true)
			if got := fmt.Sprintf("%T", ww); tc.wrapper != "" && got != tc.wrapper || tc.wrapper == "" && strings.HasPrefix(got, "*core.") {
				t.Errorf("wrapper %s, want %q", got, tc.wrapper)
			}
			if got, want := methodSet(ww), methodSet(w, "Unwrap"); got != want {
				t.Errorf("wrapper has %s, want %s", got, want)
			}
			if u := ww.(interface{ Unwrap() http.ResponseWriter }).Unwrap(); u != w {
				t.Errorf("Unwrap: %T, want the wrapped writer", u)
			}
			io.WriteString(ww, "body")
			ww.WriteHeader(http.StatusServiceUnavailable) // superfluous
			if st.Status != http.StatusOK {
				t.Errorf("status %d after a write, want 200", st.Status)
			}
			if tc.wrapper == "" {
				return
			}
			if n := testing.AllocsPerRun(100, func() { st.WrapWriter(w, true) }); n != 0 {
				t.Errorf("wrapping allocates %v times, want 0", n)
			}
		})
	}
}

// TestWrapWriterHTTP2: net/http's own HTTP/2 writer gets h2Writer, which
// has its optional methods and allocates nothing, also without
// recordStatus (the Echo middleware): as over HTTP/1, a header that went
// out past Echo's Response (its Flush) must be seen.
func TestWrapWriterHTTP2(t *testing.T) {
	type seen struct {
		w                        http.ResponseWriter
		wrapper, have, want      string
		statusAfterWrite, status int
		statusWithout            int
	}
	got := make(chan seen, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := admit(t)
		ww := st.WrapWriter(w, true)
		s := seen{w: w, wrapper: fmt.Sprintf("%T", ww), have: methodSet(ww), want: methodSet(w, "Unwrap")}
		without := admit(t)
		without.WrapWriter(w, false).(http.Flusher).Flush()
		s.statusWithout = without.Status
		ww.Write([]byte("body"))
		s.statusAfterWrite = st.Status
		ww.WriteHeader(http.StatusServiceUnavailable) // superfluous
		s.status = st.Status
		got <- s
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // "superfluous WriteHeader"
	srv.EnableHTTP2 = true
	srv.StartTLS()
	client := srv.Client()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	srv.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	s := <-got
	if s.wrapper != "*core.h2Writer" || s.have != s.want {
		t.Errorf("wrapper %s with %s, want *core.h2Writer with %s", s.wrapper, s.have, s.want)
	}
	if s.statusWithout != 200 {
		t.Errorf("without recordStatus, status %d after a Flush, want 200", s.statusWithout)
	}
	if s.statusAfterWrite != 200 || s.status != 200 {
		t.Errorf("status %d after a write, %d after WriteHeader(503), want 200", s.statusAfterWrite, s.status)
	}
	// The request is over: wrapping only looks at the writer's type, and
	// no server goroutine allocates meanwhile.
	st := admit(t)
	if n := testing.AllocsPerRun(100, func() { st.WrapWriter(s.w, true); st.WrapWriter(s.w, false) }); n != 0 {
		t.Errorf("wrapping net/http's HTTP/2 writer allocates %v times, want 0", n)
	}
}

// Outer writers that forward Unwrap and some optional methods, but no
// Flush.
type (
	unwrapHijack struct{ unwrapper }
	unwrapPush   struct{ unwrapper }
)

func (u unwrapHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(u.ResponseWriter).Hijack()
}
func (unwrapPush) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

// recorderOnly is a server's writer that can flush and has no other
// optional method: an HTTP/2 writer, as far as flushing goes.
type recorderOnly struct{ rec *httptest.ResponseRecorder }

func (w recorderOnly) Header() http.Header         { return w.rec.Header() }
func (w recorderOnly) Write(b []byte) (int, error) { return w.rec.Write(b) }
func (w recorderOnly) WriteHeader(code int)        { w.rec.WriteHeader(code) }
func (w recorderOnly) Flush()                      { w.rec.Flush() }

// TestWrapWriterFlushBelow: when only a writer down the Unwrap chain can
// flush, http.ResponseController would flush it past the middleware's
// hooks; the wrapper gets a FlushError of its own, so that the implicit
// 200 of that flush is the status (and a WriteHeader(503) after it is
// not), with or without recordStatus (Echo keeps its own record, which
// misses such a flush). The wrapper keeps the outer writer's Hijack and
// sees a hijack through it. An outer writer with Push keeps it and is
// not seen (documented).
func TestWrapWriterFlushBelow(t *testing.T) {
	pipe := func() http.ResponseWriter { return &pipeWriter{ResponseRecorder: httptest.NewRecorder()} }
	flusher := func() http.ResponseWriter { return recorderOnly{httptest.NewRecorder()} }
	for _, tc := range []struct {
		name    string
		w       func() http.ResponseWriter
		methods string
		status  int // after the flush and a WriteHeader(503)
	}{
		{"unwrap over HTTP/1", func() http.ResponseWriter { return unwrapper{pipe()} }, "FlushError,Hijack,Unwrap", 200},
		{"unwrap over a flusher", func() http.ResponseWriter { return unwrapper{flusher()} }, "FlushError,Unwrap", 200},
		{"unwrap+close over a flusher", func() http.ResponseWriter { return unwrapC{unwrapper{flusher()}} }, "CloseNotify,FlushError,Unwrap", 200},
		{"unwrap+hijack over HTTP/1", func() http.ResponseWriter { return unwrapHijack{unwrapper{pipe()}} }, "FlushError,Hijack,Unwrap", 200},
		{"unwrap+push over a flusher", func() http.ResponseWriter { return unwrapPush{unwrapper{flusher()}} }, "Push,Unwrap", 503},
	} {
		for _, recordStatus := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/recordStatus=%v", tc.name, recordStatus), func(t *testing.T) {
				st := admit(t)
				w := st.WrapWriter(tc.w(), recordStatus)
				if got := methodSet(w); got != tc.methods {
					t.Errorf("wrapper has %s, want %s", got, tc.methods)
				}
				flushErr := http.NewResponseController(w).Flush()
				w.WriteHeader(http.StatusServiceUnavailable) // superfluous after the flush
				want := tc.status
				if want == 503 && !recordStatus {
					want = 0
				}
				if flushErr != nil || st.Status != want {
					t.Errorf("status %d after a flush (%v) and a WriteHeader(503), want %d", st.Status, flushErr, want)
				}
				if !strings.Contains(tc.methods, "Hijack") {
					return
				}
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Fatalf("hijack: %v", err)
				}
				conn.Close()
				if st.Permit.Valid() {
					t.Error("the permit outlived the hijack")
				}
			})
		}
	}
}
