package nethttp_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// errOuterFlush is what an outer writer's FlushError reports: a
// compressor's error, a client gone away.
var errOuterFlush = errors.New("outer writer: flush failed")

// flushErrorWriter is an outer writer aware of Go 1.20: Flush, FlushError
// and Unwrap, and no Hijack (a streaming writer that forgot WebSockets).
type flushErrorWriter struct{ http.ResponseWriter }

func (f flushErrorWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
func (f flushErrorWriter) Flush()                      { f.FlushError() }
func (f flushErrorWriter) FlushError() error {
	return errors.Join(http.NewResponseController(f.ResponseWriter).Flush(), errOuterFlush)
}

// TestOuterFlushErrorKept: behind an outer writer with Flush and
// FlushError, the handler's http.ResponseController.Flush returns the
// error the outer writer's FlushError reports, as it does without the
// middleware: a streaming handler stops on it (the client went away)
// instead of writing on. Over HTTP/1 the middleware's writer also has a
// Hijack of its own (one is reachable below); that one must not cost the
// FlushError. The permit is released as the 200 the flush sent.
func TestOuterFlushErrorKept(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("HTTP2=%v", h2), func(t *testing.T) {
			l := newLimiter(t, 4)
			mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				err := http.NewResponseController(w).Flush()
				got <- fmt.Sprintf("%s; flush error %v", interfaces(w), errors.Is(err, errOuterFlush))
				w.WriteHeader(http.StatusServiceUnavailable) // superfluous after the flush
			})
			var without, with string
			outer := func(w http.ResponseWriter) http.ResponseWriter { return flushErrorWriter{w} }
			for _, h := range []http.Handler{app, mw(app)} {
				resp, _, _ := serveOnce(t, h, outer, h2)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("client got %d, want the flushed 200", resp.StatusCode)
				}
				without, with = with, <-got
			}
			want := without
			if !h2 {
				// The Hijack reachable below, which the middleware's
				// writer sees (TestHijackThroughUnwrapOnlyWriter).
				want = strings.Replace(without, "Flusher", "Flusher,Hijacker", 1)
			}
			if with != want {
				t.Errorf("through the middleware the handler's writer has %q, want %q (without it %q)", with, want, without)
			}
			if c := waitReleased(t, l); c.success != 1 || c.dropped != 0 {
				t.Errorf("client got 200, permit released success %d dropped %d", c.success, c.dropped)
			}
		})
	}
}
