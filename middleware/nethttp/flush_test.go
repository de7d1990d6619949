package nethttp_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestFlushPastUnwrapOnlyWriter: a flush through http.ResponseController
// finds no Flush on a writer in the Go 1.20 style (Unwrap alone) and
// flushes the writer under it, which sends net/http's implicit 200. Such a
// writer may sit outside the middleware (another middleware's), inside
// (the handler's own), or both. Either way the client reads the 200, so a
// WriteHeader(503) after the flush is superfluous and the permit must be
// released as the Success the client got, not as a drop that cuts the
// limit; a panic after it releases the permit as Ignored.
func TestFlushPastUnwrapOnlyWriter(t *testing.T) {
	outer := mwtest.UnwrapOnly
	layers := []struct {
		name         string
		outer, inner func(http.ResponseWriter) http.ResponseWriter
		http1Only    bool
	}{
		{"outer", outer, nil, false},
		{"inner", nil, outer, false},
		{"outer and inner", outer, outer, false},
		{"outer with Hijack", mwtest.UnwrapHijacker, nil, true},
		{"outer with Hijack and Push", mwtest.UnwrapHijackPusher, nil, true},
	}
	endings := []struct {
		name      string
		end       func(w http.ResponseWriter)
		body      string
		wantOK    bool // released Success; else Ignored
		wantBreak bool // the body breaks off
	}{
		{"503 after", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable) // superfluous
			io.WriteString(w, "late error")
		}, "late error", true, false},
		{"panic after", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }, "", false, true},
	}
	for _, h2 := range []bool{false, true} {
		for _, layer := range layers {
			if h2 && layer.http1Only {
				continue
			}
			for _, ending := range endings {
				name := map[bool]string{false: "HTTP1/", true: "HTTP2/"}[h2] + layer.name + "/" + ending.name
				t.Run(name, func(t *testing.T) {
					app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if layer.inner != nil {
							w = layer.inner(w)
						}
						w.Header().Set("Content-Type", "text/event-stream")
						if err := http.NewResponseController(w).Flush(); err != nil {
							t.Errorf("flush: %v", err)
						}
						ending.end(w)
					})
					l := newLimiter(t, 4)
					resp, body, readErr := flushServe(t, l, app, layer.outer, h2)
					if resp.StatusCode != http.StatusOK || string(body) != ending.body || (readErr != nil) != ending.wantBreak {
						t.Errorf("client read %d %q (body error %v), want the flushed 200 with %q", resp.StatusCode, body, readErr, ending.body)
					}
					c := waitReleased(t, l)
					if ending.wantOK && (c.success != 1 || c.dropped != 0) || !ending.wantOK && c.ignored != 1 {
						t.Errorf("client got 200, permit released success %d dropped %d ignored %d", c.success, c.dropped, c.ignored)
					}
				})
			}
		}
	}
}

// flushServe serves app behind the middleware on l (wrapped in outer's
// writer, if not nil) on 127.0.0.1, over HTTP/2 with TLS when h2 is set,
// GETs it once and returns the response, its body and the error that
// ended the body, if any.
func flushServe(t *testing.T, l *shed.Limiter, app http.Handler, outer func(http.ResponseWriter) http.ResponseWriter, h2 bool) (*http.Response, []byte, error) {
	t.Helper()
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	return serveOnce(t, mw(app), outer, h2)
}

// serveOnce serves h (wrapped in outer's writer, if not nil) on
// 127.0.0.1, over HTTP/2 with TLS when h2 is set, GETs it once and
// returns the response, its body and the error that ended the body.
func serveOnce(t *testing.T, h http.Handler, outer func(http.ResponseWriter) http.ResponseWriter, h2 bool) (*http.Response, []byte, error) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if outer != nil {
			w = outer(w)
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // "superfluous WriteHeader"
	srv.EnableHTTP2 = h2
	if h2 {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	defer srv.Close()
	client := srv.Client()
	client.Timeout = 20 * time.Second
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
		t.Fatalf("served over %s, want HTTP/%d", resp.Proto, want)
	}
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}
