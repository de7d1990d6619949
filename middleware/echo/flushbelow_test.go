package echo_test

import (
	"net/http"
	"testing"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestFlushPastOuterWriter: Response.Flush goes through
// http.ResponseController, which flushes past an outer writer without
// Flush, down its Unwrap chain. Over each protocol the client reads the
// 200 that flush sent, with no error body of Echo's after it, and the
// permit is released as that 200, for an outer writer in the Go 1.20
// style (Unwrap alone) and, over HTTP/1, for one that also has Hijack.
func TestFlushPastOuterWriter(t *testing.T) {
	outers := []struct {
		name      string
		wrap      func(http.ResponseWriter) http.ResponseWriter
		http1Only bool
	}{
		{"unwrap-only", mwtest.UnwrapOnly, false},
		{"unwrap and hijack", mwtest.UnwrapHijacker, true},
		{"unwrap, hijack and push", mwtest.UnwrapHijackPusher, true},
	}
	for _, proto := range protocols {
		for _, outer := range outers {
			if outer.http1Only && proto.major != 1 {
				continue
			}
			t.Run(proto.name+"/"+outer.name, func(t *testing.T) {
				wrap := func(next echov4.HandlerFunc) echov4.HandlerFunc {
					return func(c echov4.Context) error {
						w := c.Response().Writer
						c.Response().Writer = outer.wrap(w)
						defer func() { c.Response().Writer = w }()
						return next(c)
					}
				}
				l := twoClasses(t, 4)
				e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}}, middleware.Recover(), wrap)
				e.GET("/events", func(c echov4.Context) error {
					c.Response().Header().Set("Content-Type", "text/event-stream")
					c.Response().Flush()
					return echov4.NewHTTPError(http.StatusServiceUnavailable)
				})
				url, client := protoServer(t, e, proto.name)
				resp, body, _ := rawGet(t, client, url+"/events", "")
				if resp.StatusCode != http.StatusOK || resp.ProtoMajor != proto.major || len(body) != 0 {
					t.Errorf("client read %d %q over %s, want the flushed 200 and no error body", resp.StatusCode, body, resp.Proto)
				}
				mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
				if got := l.Snapshot().Classes[1].Released; got[shed.Success] != 1 || got[shed.Dropped] != 0 {
					t.Errorf("released %v, want one success (the client got a 200)", got)
				}
			})
		}
	}
}
