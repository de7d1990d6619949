package echo_test

// Paths a second hostile review found: a hostile client over loopback and
// a careless integrator.

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestFlushedThenErrorIsWireStatus: a streaming handler that flushes its
// header through c.Response().Flush (which sends net/http's implicit 200
// but leaves Echo's Response uncommitted) and then returns an HTTPError
// 503 has sent a 200: the client reads 200, so the permit's outcome and
// the recorded status follow the 200 on the wire, as the net/http
// middleware's do, not the 503 Echo's error handler can no longer send
// (a Dropped would cut the limit for a request that succeeded).
func TestFlushedThenErrorIsWireStatus(t *testing.T) {
	l := twoClasses(t, 4)
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}, Recorder: rec})
	e.GET("/events", func(c echov4.Context) error {
		c.Response().Header().Set("Content-Type", "text/event-stream")
		c.Response().Flush()
		return echov4.NewHTTPError(http.StatusServiceUnavailable)
	})
	url := serve(t, e)
	resp, _ := get(t, url+"/events")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client read %d, want the flushed 200", resp.StatusCode)
	}
	mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
	got := l.Snapshot().Classes[1].Released
	if got[shed.Success] != 1 || got[shed.Dropped] != 0 {
		t.Errorf("released %v, want one Success (the client got a 200)", got)
	}
	mwtest.WaitFor(t, "the record", func() bool { return rec.Pending() >= 1 })
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, reqs, _ := rectest.ReadRecording(t, buf.Bytes())
	if len(reqs) != 1 || reqs[0].Status != http.StatusOK {
		t.Errorf("recorded %+v, want one request with status 200", reqs)
	}
}

// TestMountedTwice: the middleware mounted twice on one route (Echo.Use
// and again on the route or its group, a careless integrator's mistake)
// must not take two permits of one limiter for one request: at a limit of
// 1 the second would wait for the first, held by the same request, and
// an idle server would answer 503 to everyone.
func TestMountedTwice(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 1, MaxWait: 200 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	mw2, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	e.Use(mw)
	e.GET("/same", func(c echov4.Context) error { return c.String(200, "ok") }, mw)
	g := e.Group("/g", mw2)
	g.GET("/other", func(c echov4.Context) error { return c.String(200, "ok") })
	url := serve(t, e)
	for _, path := range []string{"/same", "/g/other"} {
		if resp, body := get(t, url+path); resp.StatusCode != 200 {
			t.Errorf("%s on an idle server: %d %q, want 200", path, resp.StatusCode, body)
		}
		mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
	}
	var admitted uint64
	for _, c := range l.Snapshot().Classes {
		admitted += c.Admitted
	}
	if admitted != 2 {
		t.Errorf("%d permits admitted for 2 requests, want one each", admitted)
	}
}

// TestUnroutedRequests: with Echo.Use, requests Echo routes to no handler
// go through the middleware like any other, as the package documents: a
// 404 is admitted in DefaultClass and released Ignored; a 405 for a
// known path takes the class of the route whose path it matched; a
// Skipper on an empty Context.Path keeps the unmatched ones out.
func TestUnroutedRequests(t *testing.T) {
	l := twoClasses(t, 4)
	var paths []string
	e := shedEcho(t, shedecho.Config{
		Options: shedhttp.Options{Limiter: l, Routes: map[string]string{"/users/:id": "interactive"}},
		Skipper: func(c echov4.Context) bool { paths = append(paths, c.Path()); return false },
	})
	e.GET("/users/:id", func(c echov4.Context) error { return c.String(200, "ok") })
	url := serve(t, e)
	check := func(method, path string, status int, class int) {
		t.Helper()
		before := l.Snapshot().Classes[class].Released[shed.Ignored]
		req, _ := http.NewRequest(method, url+path, nil)
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("%s %s: %d, want %d", method, path, resp.StatusCode, status)
		}
		mwtest.WaitFor(t, "the release", func() bool { return l.InFlight() == 0 })
		if got := l.Snapshot().Classes[class].Released[shed.Ignored]; got != before+1 {
			t.Errorf("%s %s: class %d released Ignored %d times, want %d", method, path, class, got, before+1)
		}
	}
	check("GET", "/nowhere", 404, 1)
	check("DELETE", "/users/7", 405, 0)
	if len(paths) != 2 || paths[0] != "" || paths[1] != "/users/:id" {
		t.Errorf("Context.Path seen by the Skipper: %q, want [\"\" \"/users/:id\"]", paths)
	}
}

// TestRejectHandlerWritesNothing: a RejectHandler that only logs (it
// writes nothing and returns nil) must not let Echo answer an empty 200
// to a request that never ran: the default problem response goes out.
func TestRejectHandlerWritesNothing(t *testing.T) {
	l := twoClasses(t, 1)
	var rejected int
	e := shedEcho(t, shedecho.Config{
		Options:       shedhttp.Options{Limiter: l},
		RejectHandler: func(c echov4.Context, rej shedhttp.Rejection) error { rejected++; return nil },
	})
	var ran bool
	e.GET("/work", func(c echov4.Context) error { ran = true; return c.String(200, "done") })
	held, err := l.TryAcquire(shed.Request{Class: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(shed.Ignored)
	url := serve(t, e)
	resp, body := get(t, url+"/work")
	if ran || rejected != 1 {
		t.Fatalf("handler ran %v, RejectHandler called %d times", ran, rejected)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("rejected request answered %d %q (Retry-After %q), want 503", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
}
