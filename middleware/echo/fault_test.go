package echo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// releasedCounts sums the limiter's admissions and releases.
func releasedCounts(l *shed.Limiter) (admitted, success, ignored, other uint64) {
	for _, c := range l.Snapshot().Classes {
		admitted += c.Admitted
		success += c.Released[shed.Success]
		ignored += c.Released[shed.Ignored]
		other += c.Released[shed.Dropped] + c.Leaked
	}
	return
}

// waitAllReleased polls (bounded) until nothing is in flight and every
// admission has been counted as released.
func waitAllReleased(t *testing.T, l *shed.Limiter) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a, s, i, o := releasedCounts(l)
		if l.InFlight() == 0 && a == s+i+o {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d, admitted %d, released %d", l.InFlight(), a, s+i+o)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFaultPanicsUnderLoad: behind Echo's Recover middleware, 200
// concurrent requests of which half panic get 500 with Echo's generic
// error body (nothing of the panic); every permit is released (Ignored
// for the panics), nothing is left in flight and the server keeps serving.
func TestFaultPanicsUnderLoad(t *testing.T) {
	const n = 200
	l, err := shed.New(shed.Config{Limit: 16, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: n, MaxWait: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}}, middleware.Recover())
	var panics, oks atomic.Uint64
	e.GET("/panic", func(c echov4.Context) error {
		panics.Add(1)
		panic("handler bug: secret internal state")
	})
	e.GET("/ok", func(c echov4.Context) error {
		oks.Add(1)
		return c.String(http.StatusOK, "ok")
	})
	url := serve(t, e)
	tr := &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var internal, ok atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/ok"
			if i%2 == 0 {
				path = "/panic"
			}
			resp, err := client.Get(url + path)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case path == "/ok" && resp.StatusCode == 200:
				ok.Add(1)
			case path == "/panic" && resp.StatusCode == 500:
				var m map[string]any
				if json.Unmarshal(body, &m) != nil || strings.Contains(string(body), "secret") {
					t.Errorf("500 body %q", body)
				}
				internal.Add(1)
			default:
				t.Errorf("%s: status %d body %q", path, resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	waitAllReleased(t, l)
	a, s, ign, other := releasedCounts(l)
	if ok.Load() != n/2 || internal.Load() != n/2 {
		t.Errorf("200: %d, 500: %d, want %d each", ok.Load(), internal.Load(), n/2)
	}
	if a != panics.Load()+oks.Load() || s != oks.Load() || ign != panics.Load() || other != 0 {
		t.Errorf("admitted %d, success %d, ignored %d, other %d; handlers ran ok %d, panicked %d", a, s, ign, other, oks.Load(), panics.Load())
	}
	resp, err := client.Get(url + "/ok")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the panics: %v %v", resp, err)
	}
	resp.Body.Close()
	waitAllReleased(t, l)
}

// TestFaultResetMidRequestBody: an Echo handler binding a body that the
// client resets half way gets an error; the permit is released Ignored.
func TestFaultResetMidRequestBody(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}})
	reading := make(chan struct{}, 1)
	readErr := make(chan error, 1)
	e.POST("/upload", func(c echov4.Context) error {
		buf := make([]byte, 10)
		if _, err := io.ReadFull(c.Request().Body, buf); err != nil {
			readErr <- err
			return err
		}
		reading <- struct{}{}
		_, err := io.ReadAll(c.Request().Body)
		readErr <- err
		return err
	})
	url := serve(t, e)
	for i := range 3 {
		a0, _, i0, _ := releasedCounts(l)
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := conn.(*net.TCPConn)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("x", 10))
		<-reading
		if n := l.InFlight(); n != 1 {
			t.Errorf("in flight %d while the handler reads, want 1", n)
		}
		c.SetLinger(0)
		c.Close() // RST
		if err := <-readErr; err == nil {
			t.Fatal("the handler read the whole body of a reset connection")
		}
		waitAllReleased(t, l)
		a1, _, i1, _ := releasedCounts(l)
		if a1 != a0+1 || i1 != i0+1 {
			t.Errorf("round %d: admitted %d -> %d, ignored %d -> %d; want one more of each", i, a0, a1, i0, i1)
		}
	}
}

// TestFaultBaseContextCancelledWhileQueued: cancelling the server's
// BaseContext (graceful shutdown) while requests are queued answers each
// waiting client with the sanitized 503, never an empty 200; the handler
// does not run.
func TestFaultBaseContextCancelledWhileQueued(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 8, MaxWait: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	base, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{Limiter: l}})
	e.Server.BaseContext = func(net.Listener) context.Context { return base }
	var charged atomic.Int64
	e.POST("/charge", func(c echov4.Context) error {
		charged.Add(1)
		return c.String(http.StatusOK, `{"charged":true}`)
	})
	url := serve(t, e)
	holder, _ := l.TryAcquire(shed.Request{})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	const n = 3
	type result struct {
		status int
		body   string
		err    error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			resp, err := client.Post(url+"/charge", "application/json", strings.NewReader(`{"amount":100}`))
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, string(b), err}
		}()
	}
	deadline := time.Now().Add(15 * time.Second)
	for l.Snapshot().Queued != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", l.Snapshot().Queued, n)
		}
		time.Sleep(time.Millisecond)
	}
	shutdown()
	for range n {
		r := <-results
		var p map[string]any
		if r.err != nil || r.status != http.StatusServiceUnavailable || json.Unmarshal([]byte(r.body), &p) != nil || len(p) != 4 {
			t.Errorf("POST /charge during shutdown: status %d, body %q, %v; want the sanitized 503", r.status, r.body, r.err)
		}
	}
	holder.Release(shed.Ignored)
	waitAllReleased(t, l)
	if charged.Load() != 0 {
		t.Errorf("the handler ran %d times for requests whose context ended while queued", charged.Load())
	}
}
