package nethttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	return strings.Join(s, ",")
}

// TestWriterInterfaces: the handler's writer has exactly the optional
// interfaces of the server's, and http.ResponseController reaches the
// server's writer through it.
func TestWriterInterfaces(t *testing.T) {
	l := newLimiter(t, 4)
	mw, err := nethttp.New(nethttp.Config{Limiter: l})
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
		w.(io.ReaderFrom).ReadFrom(strings.NewReader("read from"))
	})
	bare := httptest.NewServer(app)
	defer bare.Close()
	wrapped := httptest.NewServer(mw(app))
	defer wrapped.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, srv := range []*httptest.Server{bare, wrapped} {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "read from" {
			t.Errorf("body %q", b)
		}
	}
	want, have := <-got, <-got
	if want != have || !strings.Contains(have, "ReaderFrom") {
		t.Errorf("writer interfaces %q through the middleware, %q without", have, want)
	}
}

// TestInformationalStatus: a 1xx response is not the final status.
func TestInformationalStatus(t *testing.T) {
	l := newLimiter(t, 4)
	mw, err := nethttp.New(nethttp.Config{Limiter: l})
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
		Limiter: l,
		Skip:    func(r *http.Request) bool { return r.Header.Get("X-Internal") == "1" },
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
	mw, err := nethttp.New(nethttp.Config{Limiter: newLimiter(t, 1)})
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
