package echo_test

// The middleware over HTTP/1.1, HTTP/2 and h2c: net/http's HTTP/2 writer
// (TLS) and the one of golang.org/x/net/http2, which serves h2c
// (Echo.StartH2CServer), have no Hijack nor ReadFrom, and the middleware
// must see their status as it sees the HTTP/1 writer's; what a handler or
// a RejectHandler sends past Echo's Response must reach the client alone.

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/net/http2"
	//lint:ignore SA1019 Echo's StartH2CServer serves h2c with this package, whose writer the test must meet.
	"golang.org/x/net/http2/h2c"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// protocols are the ways protoServer serves Echo, and the major version
// of HTTP the client must read.
var protocols = []struct {
	name  string
	major int
}{{"http1", 1}, {"h2", 2}, {"h2c", 2}}

// protoServer serves e on 127.0.0.1 over HTTP/1.1, HTTP/2 over TLS ("h2")
// or HTTP/2 without TLS as Echo.StartH2CServer serves it ("h2c"), and
// returns its URL and a client that speaks that protocol. Both are closed
// at cleanup.
func protoServer(t *testing.T, e *echov4.Echo, proto string) (string, *http.Client) {
	t.Helper()
	var h http.Handler = e
	if proto == "h2c" {
		h = h2c.NewHandler(e, &http2.Server{}) //lint:ignore SA1019 as Echo.StartH2CServer does
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // superfluous WriteHeader calls are expected
	var client *http.Client
	switch proto {
	case "h2":
		srv.EnableHTTP2 = true
		srv.StartTLS()
		client = srv.Client()
	case "h2c":
		srv.Start()
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		client = &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{}}}
	default:
		srv.Start()
		client = &http.Client{Transport: &http.Transport{}}
	}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL, client
}

// fetch GETs url with client and returns the response with its body read.
func fetch(t *testing.T, client *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// TestFlushedThenErrorEachProtocol is TestFlushedThenErrorIsWireStatus
// over each protocol: a handler that flushes its 200 through
// c.Response().Flush and then returns an HTTPError 503 (or panics, behind
// Echo's Recover) has answered 200. The client reads that 200 and the
// stream the handler sent, with no error body that Echo's error handler
// appends; the permit's outcome and the recorded status follow the 200
// over HTTP/2 as over HTTP/1 (a Dropped would cut the limit for a request
// whose client got a 200).
func TestFlushedThenErrorEachProtocol(t *testing.T) {
	for _, proto := range protocols {
		for _, panics := range []bool{false, true} {
			name := proto.name + "/error"
			if panics {
				name = proto.name + "/panic"
			}
			t.Run(name, func(t *testing.T) { flushedThenError(t, proto.name, proto.major, panics) })
		}
	}
}

func flushedThenError(t *testing.T, proto string, major int, panics bool) {
	l := twoClasses(t, 4)
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}, Recorder: rec}, middleware.Recover())
	e.GET("/events", func(c echov4.Context) error {
		c.Response().Header().Set("Content-Type", "text/event-stream")
		c.Response().Flush()
		if panics {
			panic("after the flush")
		}
		return echov4.NewHTTPError(http.StatusServiceUnavailable)
	})
	url, client := protoServer(t, e, proto)
	resp, body := fetch(t, client, url+"/events")
	if resp.ProtoMajor != major {
		t.Fatalf("served over %s, want HTTP/%d", resp.Proto, major)
	}
	if resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("client read %d %q, want the flushed 200 and nothing after it", resp.StatusCode, body)
	}
	mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
	want, status := shed.Success, http.StatusOK
	if panics {
		want, status = shed.Ignored, 0
	}
	if got := l.Snapshot().Classes[1].Released; got[want] != 1 || got[shed.Dropped] != 0 {
		t.Errorf("released %v, want one %v (the client got a 200)", got, want)
	}
	mwtest.WaitFor(t, "the record", func() bool { return rec.Pending() >= 1 })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, reqs, _ := rectest.ReadRecording(t, buf.Bytes()); len(reqs) != 1 || reqs[0].Status != status {
		t.Errorf("recorded %+v, want one request with status %d", reqs, status)
	}
}

// problem503 is the default response's body for a 503.
const problem503 = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The server is overloaded. Retry after the number of seconds in the Retry-After header."}`

// TestRejectHandlerBypassesResponse: a RejectHandler may write past Echo's
// Response, to c.Response().Writer (which leaves the Response uncommitted),
// write a body without a status, or send only an informational 1xx (which
// Echo counts as committed). Over each protocol the client must
// read exactly what it wrote, with no default problem body nor Echo error
// body written on top, and never a 200 it did not ask for: a rejected
// request did no work.
func TestRejectHandlerBypassesResponse(t *testing.T) {
	cases := []struct {
		name   string
		reject func(c echov4.Context, rej shedhttp.Rejection) error
		status int
		body   string
	}{
		{"raw status and body", func(c echov4.Context, rej shedhttp.Rejection) error {
			w := c.Response().Writer
			w.WriteHeader(http.StatusTooManyRequests)
			_, err := w.Write([]byte("slow down"))
			return err
		}, http.StatusTooManyRequests, "slow down"},
		{"raw status, then an error to log", func(c echov4.Context, rej shedhttp.Rejection) error {
			w := c.Response().Writer
			w.WriteHeader(rej.Status)
			w.Write([]byte("busy"))
			return errors.New("logged by the error handler")
		}, http.StatusServiceUnavailable, "busy"},
		{"raw body without a status", func(c echov4.Context, rej shedhttp.Rejection) error {
			_, err := c.Response().Writer.Write([]byte("busy"))
			return err
		}, http.StatusServiceUnavailable, "busy"},
		{"body through the Response without a status", func(c echov4.Context, rej shedhttp.Rejection) error {
			_, err := c.Response().Write([]byte("busy"))
			return err
		}, http.StatusServiceUnavailable, "busy"},
		{"flush only", func(c echov4.Context, rej shedhttp.Rejection) error {
			c.Response().Flush()
			return nil
		}, http.StatusServiceUnavailable, ""},
		{"early hints only", func(c echov4.Context, rej shedhttp.Rejection) error {
			c.Response().Header().Set("Link", "</app.css>; rel=preload")
			c.Response().WriteHeader(http.StatusEarlyHints) // Echo marks the Response committed
			return nil
		}, http.StatusServiceUnavailable, problem503},
		{"an explicit 200 is the handler's choice", func(c echov4.Context, rej shedhttp.Rejection) error {
			return c.String(http.StatusOK, "fine")
		}, http.StatusOK, "fine"},
	}
	for _, proto := range protocols {
		for _, tc := range cases {
			t.Run(proto.name+"/"+tc.name, func(t *testing.T) {
				l := twoClasses(t, 1)
				e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}, RejectHandler: tc.reject})
				var ran bool
				e.GET("/work", func(c echov4.Context) error { ran = true; return c.String(http.StatusOK, "done") })
				held, err := l.TryAcquire(shed.Request{Class: 0})
				if err != nil {
					t.Fatal(err)
				}
				defer held.Release(shed.Ignored)
				url, client := protoServer(t, e, proto.name)
				resp, body := fetch(t, client, url+"/work")
				if ran {
					t.Fatal("the handler of a rejected request ran")
				}
				if resp.StatusCode != tc.status || body != tc.body {
					t.Errorf("client read %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
				}
			})
		}
	}
}
