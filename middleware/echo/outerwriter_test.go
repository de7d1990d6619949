package echo_test

// A writer that buffers (Echo's Gzip) around or inside the middleware, and
// informational 1xx headers: what the client reads and what the limiter
// is told must both follow the final status that went out.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// rawGet GETs url with the given Accept-Encoding, within a bounded time,
// and returns the response, its undecoded body, and the informational
// statuses that came before it. Setting Accept-Encoding turns off the
// transport's own decompression, so that the test sees the bytes sent.
func rawGet(t *testing.T, client *http.Client, url, acceptEncoding string) (*http.Response, []byte, []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var informational []int
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		informational = append(informational, code)
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, body, informational
}

// gunzip returns what a gzip client decodes from body before the stream
// ends or breaks: a stream that a handler's error cut short decodes to
// what was flushed.
func gunzip(body []byte) string {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return "<not gzip: " + err.Error() + ">"
	}
	zr.Multistream(false)
	out, _ := io.ReadAll(zr)
	return string(out)
}

// TestOuterWriterFlushedThenError: Echo's Gzip, registered outside the
// middleware or inside it, buffers what the handler writes, and an outer
// writer in the Go 1.20 style (Unwrap alone) flushes the writer under it;
// either way a handler that flushes a 200 and then returns an error (or
// panics) has answered 200. Over HTTP/1.1 to a client that accepts gzip,
// the client must read that 200 and what the handler flushed, with no
// error body of Echo's after it, and the permit must be released as the
// 200 the client got (Success; Ignored for a panic), not as the 503 Echo
// can no longer send.
func TestOuterWriterFlushedThenError(t *testing.T) {
	const data = "data: 1\n\n"
	handlers := []struct {
		name    string
		handler echov4.HandlerFunc
		body    string
		want    shed.Outcome
	}{
		{"flush then error", func(c echov4.Context) error {
			c.Response().Header().Set("Content-Type", "text/event-stream")
			c.Response().Flush()
			return echov4.NewHTTPError(http.StatusServiceUnavailable)
		}, "", shed.Success},
		{"write past the Response, flush, error", func(c echov4.Context) error {
			c.Response().Header().Set("Content-Type", "text/event-stream")
			c.Response().Writer.Write([]byte(data))
			c.Response().Flush()
			return echov4.NewHTTPError(http.StatusServiceUnavailable)
		}, data, shed.Success},
		{"write through the Response, flush, error", func(c echov4.Context) error {
			c.Response().Header().Set("Content-Type", "text/event-stream")
			c.Response().Write([]byte(data))
			c.Response().Flush()
			return echov4.NewHTTPError(http.StatusServiceUnavailable)
		}, data, shed.Success},
		{"flush then panic", func(c echov4.Context) error {
			c.Response().Header().Set("Content-Type", "text/event-stream")
			c.Response().Flush()
			panic("after the flush")
		}, "", shed.Ignored},
	}
	unwrapOnlyOuter := func(next echov4.HandlerFunc) echov4.HandlerFunc {
		return func(c echov4.Context) error {
			w := c.Response().Writer
			c.Response().Writer = mwtest.UnwrapOnly(w)
			defer func() { c.Response().Writer = w }()
			return next(c)
		}
	}
	orders := []struct {
		name  string
		gzip  bool
		build func(*testing.T, shedecho.Config) *echov4.Echo
	}{
		{"gzip outside", true, func(t *testing.T, cfg shedecho.Config) *echov4.Echo {
			return shedEcho(t, cfg, middleware.Recover(), middleware.Gzip())
		}},
		{"gzip inside", true, func(t *testing.T, cfg shedecho.Config) *echov4.Echo {
			e := shedEcho(t, cfg, middleware.Recover())
			e.Use(middleware.Gzip())
			return e
		}},
		{"unwrap-only writer outside", false, func(t *testing.T, cfg shedecho.Config) *echov4.Echo {
			return shedEcho(t, cfg, middleware.Recover(), unwrapOnlyOuter)
		}},
	}
	for _, order := range orders {
		for _, h := range handlers {
			t.Run(order.name+"/"+h.name, func(t *testing.T) {
				l := twoClasses(t, 4)
				e := order.build(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}})
				e.GET("/events", h.handler)
				url, client := protoServer(t, e, "http1")
				resp, raw, _ := rawGet(t, client, url+"/events", "gzip")
				got, encoding := string(raw), ""
				if order.gzip {
					got, encoding = gunzip(raw), "gzip"
				}
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != encoding {
					t.Errorf("client read %d (Content-Encoding %q), want the flushed 200 (%q)", resp.StatusCode, resp.Header.Get("Content-Encoding"), encoding)
				}
				if got != h.body || bytes.Contains(raw, []byte("Service Unavailable")) {
					t.Errorf("client decoded %q from %q, want %q and no error body after it", got, raw, h.body)
				}
				mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
				if got := l.Snapshot().Classes[1].Released; got[h.want] != 1 || got[shed.Dropped] != 0 {
					t.Errorf("released %v, want one %v (the client got a 200)", got, h.want)
				}
			})
		}
	}
}

// TestInformationalThenError: a 1xx (103 Early Hints) is not a final
// status. A handler that sends one through c.Response().WriteHeader, which
// Echo counts as committing the Response, and then returns an error has
// not answered: over each protocol the client must get the 103 and then
// the error's status and Echo's error body, not net/http's implicit 200,
// and the permit must be released as that error (Dropped for a 503). A
// panic after the 1xx gets Echo's Recover its 500 the same way.
func TestInformationalThenError(t *testing.T) {
	hints := func(c echov4.Context) {
		c.Response().Header().Set("Link", "</app.css>; rel=preload")
		c.Response().WriteHeader(http.StatusEarlyHints)
	}
	cases := []struct {
		name    string
		handler echov4.HandlerFunc
		status  int
		body    string
		want    shed.Outcome
	}{
		{"103 then a 503", func(c echov4.Context) error {
			hints(c)
			return echov4.NewHTTPError(http.StatusServiceUnavailable)
		}, http.StatusServiceUnavailable, `{"message":"Service Unavailable"}` + "\n", shed.Dropped},
		{"103 then an error", func(c echov4.Context) error {
			hints(c)
			return errors.New("bug")
		}, http.StatusInternalServerError, `{"message":"Internal Server Error"}` + "\n", shed.Ignored},
		{"103 then a panic, behind Recover", func(c echov4.Context) error {
			hints(c)
			panic("after the hints")
		}, http.StatusInternalServerError, `{"message":"Internal Server Error"}` + "\n", shed.Ignored},
		{"103 past the Response then a 503", func(c echov4.Context) error {
			c.Response().Writer.WriteHeader(http.StatusEarlyHints)
			return echov4.NewHTTPError(http.StatusServiceUnavailable)
		}, http.StatusServiceUnavailable, `{"message":"Service Unavailable"}` + "\n", shed.Dropped},
		{"103 then nil is the handler's 200", func(c echov4.Context) error {
			hints(c)
			return nil
		}, http.StatusOK, "", shed.Success},
	}
	for _, proto := range protocols {
		for _, tc := range cases {
			t.Run(proto.name+"/"+tc.name, func(t *testing.T) {
				l := twoClasses(t, 4)
				e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}}, middleware.Recover())
				e.GET("/page", tc.handler)
				url, client := protoServer(t, e, proto.name)
				resp, body, informational := rawGet(t, client, url+"/page", "")
				if resp.StatusCode != tc.status || string(body) != tc.body {
					t.Errorf("client read %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
				}
				if len(informational) != 1 || informational[0] != http.StatusEarlyHints {
					t.Errorf("informational responses %v, want one 103", informational)
				}
				mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
				if got := l.Snapshot().Classes[1].Released; got[tc.want] != 1 {
					t.Errorf("released %v, want one %v", got, tc.want)
				}
			})
		}
	}
}

// TestInformationalThenStatus pins what Echo does with a final status
// written through its Response after a 1xx: Echo's Response counts the 1xx
// as committing it and drops the later WriteHeader, so the client reads
// net/http's implicit 200 with the body, and the permit follows that 200
// (what the client got). A 1xx sent through c.Response().Writer leaves
// the Response uncommitted, and the final status goes out: the package
// documents that workaround.
func TestInformationalThenStatus(t *testing.T) {
	cases := []struct {
		name   string
		hints  func(c echov4.Context)
		status int
		want   shed.Outcome
	}{
		{"103 through the Response: Echo drops the 404", func(c echov4.Context) {
			c.Response().WriteHeader(http.StatusEarlyHints)
		}, http.StatusOK, shed.Success},
		{"103 through the Writer: the 404 goes out", func(c echov4.Context) {
			c.Response().Writer.WriteHeader(http.StatusEarlyHints)
		}, http.StatusNotFound, shed.Ignored},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := twoClasses(t, 4)
			e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}})
			e.GET("/page", func(c echov4.Context) error {
				c.Response().Header().Set("Link", "</app.css>; rel=preload")
				tc.hints(c)
				return c.String(http.StatusNotFound, "no such page")
			})
			url, client := protoServer(t, e, "http1")
			resp, body, informational := rawGet(t, client, url+"/page", "")
			if resp.StatusCode != tc.status || string(body) != "no such page" || len(informational) != 1 {
				t.Errorf("client read %v then %d %q, want 103 then %d", informational, resp.StatusCode, body, tc.status)
			}
			mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
			if got := l.Snapshot().Classes[1].Released; got[tc.want] != 1 {
				t.Errorf("released %v, want one %v (what the client got)", got, tc.want)
			}
		})
	}
}
