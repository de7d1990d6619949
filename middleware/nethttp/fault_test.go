package nethttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// Fault tests: each fault runs against a real http.Server on 127.0.0.1
// and must leave nothing in flight, and every admitted request must end
// with a response or a counted cancellation (a permit released Ignored
// because its client went away, or a waiter counted Cancelled).

// faultServer is the middleware in front of app on a real server.
type faultServer struct {
	t      *testing.T
	l      *shed.Limiter
	srv    *httptest.Server
	client *http.Client
	addr   string
}

// startFault serves app behind the middleware, wrapped by outer if not
// nil; configure may adjust the http.Server before it starts.
func startFault(t *testing.T, l *shed.Limiter, app http.Handler, outer func(http.Handler) http.Handler, configure func(*http.Server)) *faultServer {
	t.Helper()
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(app)
	if outer != nil {
		h = outer(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panics and resets are expected
	if configure != nil {
		configure(srv.Config)
	}
	srv.Start()
	tr := &http.Transport{MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return &faultServer{t: t, l: l, srv: srv, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, addr: srv.Listener.Addr().String()}
}

// dial opens a raw connection to the server.
func (s *faultServer) dial() *net.TCPConn {
	s.t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn)
}

// reset closes c with an RST instead of a FIN.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// counts sums the limiter's counters over its classes.
type counts struct {
	admitted, success, dropped, ignored, cancelled, enqueued uint64
	rejected                                                 [shed.NumReasons]uint64
}

func countsOf(l *shed.Limiter) counts {
	var c counts
	for _, cs := range l.Snapshot().Classes {
		c.admitted += cs.Admitted
		c.success += cs.Released[shed.Success]
		c.dropped += cs.Released[shed.Dropped]
		c.ignored += cs.Released[shed.Ignored]
		c.cancelled += cs.Cancelled
		c.enqueued += cs.Enqueued
		for r, n := range cs.Rejected {
			c.rejected[r] += n
		}
	}
	return c
}

// waitReleased waits until nothing is in flight and every admission has
// been counted as released, and returns the counters.
func waitReleased(t *testing.T, l *shed.Limiter) counts {
	t.Helper()
	var c counts
	mwtest.WaitFor(t, "every permit released", func() bool {
		c = countsOf(l)
		snap := l.Snapshot()
		return snap.InFlight == 0 && snap.Queued == 0 && c.admitted == c.success+c.dropped+c.ignored
	})
	return c
}

// checkAlive checks that the server still answers.
func (s *faultServer) checkAlive(path string) {
	s.t.Helper()
	resp, err := s.client.Get(s.srv.URL + path)
	if err != nil {
		s.t.Fatalf("the server no longer answers: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		s.t.Fatalf("after the faults: status %d", resp.StatusCode)
	}
}

// recoverer is the recovery middleware applications put outside: a panic
// becomes a 500 with the sanitized problem body.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				shedhttp.WriteProblem(w, r, shedhttp.Rejection{Status: http.StatusInternalServerError})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// TestFaultPanicsUnderLoad: 200 concurrent requests, half of whose
// handlers panic. Behind a recovery middleware the panics are answered 500
// with the sanitized body; without one net/http aborts their connections.
// Either way every permit is released (Ignored for the panics), nothing is
// left in flight, and the server keeps serving.
func TestFaultPanicsUnderLoad(t *testing.T) {
	for _, recovered := range []bool{true, false} {
		t.Run(fmt.Sprintf("recovered=%v", recovered), func(t *testing.T) {
			const n = 200
			l, err := shed.New(shed.Config{Limit: 16, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: n, MaxWait: 30 * time.Second}}})
			if err != nil {
				t.Fatal(err)
			}
			// Server-side counts: the client's transport may resend a GET
			// whose connection broke, so the server can see more requests
			// than the client sent.
			var panics, oks atomic.Uint64
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/panic" {
					panics.Add(1)
					panic("handler bug: secret internal state")
				}
				oks.Add(1)
				io.WriteString(w, "ok")
			})
			var outer func(http.Handler) http.Handler
			if recovered {
				outer = recoverer
			}
			s := startFault(t, l, app, outer, nil)
			var wg sync.WaitGroup
			var ok, internal, aborted, other atomic.Int64
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := "/ok"
					if i%2 == 0 {
						path = "/panic"
					}
					resp, err := s.client.Get(s.srv.URL + path)
					if err != nil {
						if path == "/panic" && !recovered {
							aborted.Add(1)
						} else {
							t.Errorf("%s: %v", path, err)
						}
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case resp.StatusCode == 200 && path == "/ok":
						ok.Add(1)
					case resp.StatusCode == 500 && path == "/panic" && recovered:
						var p map[string]any
						if resp.Header.Get("Content-Type") != shedhttp.ProblemContentType || json.Unmarshal(body, &p) != nil || len(p) != 4 || strings.Contains(string(body), "secret") {
							t.Errorf("500 body %q (%s) is not the sanitized problem", body, resp.Header.Get("Content-Type"))
						}
						internal.Add(1)
					default:
						other.Add(1)
						t.Errorf("%s: status %d body %q", path, resp.StatusCode, body)
					}
				}()
			}
			wg.Wait()
			c := waitReleased(t, l)
			if ok.Load() != n/2 || internal.Load()+aborted.Load() != n/2 || other.Load() != 0 {
				t.Errorf("ok %d, 500 %d, aborted %d, other %d", ok.Load(), internal.Load(), aborted.Load(), other.Load())
			}
			// Every admitted request ended: a response (success) or a panic
			// released Ignored.
			if c.admitted != panics.Load()+oks.Load() || c.success != oks.Load() || c.ignored != panics.Load() || c.dropped != 0 || oks.Load() != n/2 || panics.Load() < n/2 {
				t.Errorf("admitted %d, released success %d, ignored %d, dropped %d; the handlers ran %d times ok and panicked %d times", c.admitted, c.success, c.ignored, c.dropped, oks.Load(), panics.Load())
			}
			s.checkAlive("/ok")
			waitReleased(t, l)
		})
	}
}

// TestFaultResetMidRequestBody: a client announces a body, sends part of
// it, and resets the connection while the handler reads it. The handler's
// read fails, the request context is cancelled, and the permit is
// released Ignored (the client went away: no latency sample).
func TestFaultResetMidRequestBody(t *testing.T) {
	l := newLimiter(t, 4)
	reading := make(chan struct{}, 1)
	readErr := make(chan error, 1)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upload" {
			return
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			readErr <- fmt.Errorf("first bytes: %w", err)
			return
		}
		reading <- struct{}{}
		_, err := io.ReadAll(r.Body)
		readErr <- err
		// A typical handler returns without writing when the body fails.
	})
	s := startFault(t, l, app, nil, nil)
	for i := range 3 {
		before := countsOf(l)
		c := s.dial()
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("x", 10))
		<-reading
		if n := l.InFlight(); n != 1 {
			t.Errorf("in flight %d while the handler reads the body, want 1", n)
		}
		reset(c)
		if err := <-readErr; err == nil {
			t.Fatal("the handler read the whole body of a reset connection")
		}
		after := waitReleased(t, l)
		if after.admitted != before.admitted+1 || after.ignored != before.ignored+1 || after.success != before.success {
			t.Errorf("round %d: counters %+v -> %+v, want one more admission released Ignored", i, before, after)
		}
	}
	s.checkAlive("/")
}

// TestFaultResetWhileStreaming: the client resets the connection while the
// handler streams its response. The handler sees its context end (or a
// write fail) and returns; the permit is released Ignored.
func TestFaultResetWhileStreaming(t *testing.T) {
	l := newLimiter(t, 4)
	streamed := make(chan error, 1)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			return
		}
		chunk := []byte(strings.Repeat("y", 1024) + "\n")
		for {
			if _, err := w.Write(chunk); err != nil {
				streamed <- err
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				streamed <- r.Context().Err()
				return
			default:
			}
		}
	})
	s := startFault(t, l, app, nil, nil)
	for i := range 3 {
		before := countsOf(l)
		c := s.dial()
		io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("status line %q, %v", line, err)
		}
		if n := l.InFlight(); n != 1 {
			t.Errorf("in flight %d while streaming, want 1", n)
		}
		reset(c)
		if err := <-streamed; err == nil {
			t.Fatal("the stream ended without an error")
		}
		after := waitReleased(t, l)
		if after.admitted != before.admitted+1 || after.ignored != before.ignored+1 || after.success != before.success {
			t.Errorf("round %d: counters %+v -> %+v, want one more admission released Ignored", i, before, after)
		}
	}
	s.checkAlive("/")
}

// TestFaultSlowRequestBody: the permit is taken when the headers arrive
// and covers the reading of the body, so a client that sends its body
// slowly holds a slot while it does. What bounds it is the client closing
// (the read fails at once) or the server's ReadTimeout (the read fails at
// the deadline); either way the permit is released Ignored and the slot
// comes back.
func TestFaultSlowRequestBody(t *testing.T) {
	for _, tc := range []struct {
		name        string
		readTimeout time.Duration
		closeClient bool
	}{
		{"client stops and closes", 0, true},
		{"client stalls, ReadTimeout fires", 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, 1)
			started := make(chan struct{}, 1)
			readErr := make(chan error, 1)
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/upload" {
					return
				}
				started <- struct{}{}
				_, err := io.ReadAll(r.Body)
				readErr <- err
			})
			s := startFault(t, l, app, nil, func(srv *http.Server) { srv.ReadTimeout = tc.readTimeout })
			c := s.dial()
			defer c.Close()
			io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
			<-started
			io.WriteString(c, "abc") // a few bytes, then nothing
			// The slot is held while the body trickles in: the limit is 1.
			resp, err := s.client.Get(s.srv.URL + "/other")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("a request during the slow upload: status %d, want 503 (the upload holds the only slot)", resp.StatusCode)
			}
			if tc.closeClient {
				c.Close()
			}
			if err := <-readErr; err == nil {
				t.Fatal("the handler read a whole body that never came")
			}
			got := waitReleased(t, l)
			if got.admitted != 1 || got.ignored != 1 {
				t.Errorf("admitted %d, released Ignored %d; want 1 and 1", got.admitted, got.ignored)
			}
			s.checkAlive("/")
		})
	}
}

// TestFaultSlowResponseReader: a client that reads the response slowly
// keeps the handler writing, so the permit is held until the response is
// written; once the client reads it all the permit is released Success,
// and if the client resets instead it is released without a success.
func TestFaultSlowResponseReader(t *testing.T) {
	const chunks, size = 64, 1 << 20 // far more than the sockets buffer
	l := newLimiter(t, 4)
	done := make(chan error, 1)
	buf := []byte(strings.Repeat("z", size))
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(chunks*size))
		for range chunks {
			if _, err := w.Write(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	})
	s := startFault(t, l, app, nil, nil)
	for _, readAll := range []bool{true, false} {
		before := countsOf(l)
		c := s.dial()
		io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 64<<10), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("response %v, %v", resp, err)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, size); err != nil {
			t.Fatal(err)
		}
		// The client has read 1 MB of 64: the handler cannot be done.
		select {
		case err := <-done:
			t.Fatalf("the handler finished (%v) while the client had read 1 MB", err)
		default:
		}
		if n := l.InFlight(); n != 1 {
			t.Errorf("in flight %d while the response is written, want 1", n)
		}
		if readAll {
			if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != (chunks-1)*size {
				t.Fatalf("read %d more bytes, %v", n, err)
			}
		} else {
			reset(c)
		}
		err = <-done
		if readAll && err != nil {
			t.Fatalf("the handler failed to write to a client that read everything: %v", err)
		}
		if !readAll && err == nil {
			t.Fatal("the handler wrote 64 MB to a reset connection without an error")
		}
		c.Close()
		after := waitReleased(t, l)
		if after.admitted != before.admitted+1 {
			t.Fatalf("admitted %d -> %d", before.admitted, after.admitted)
		}
		if readAll && after.success != before.success+1 {
			t.Errorf("full read: released success %d -> %d, want one more", before.success, after.success)
		}
		if !readAll && after.success != before.success {
			t.Errorf("reset mid-response: released %+v -> %+v; a response the client never got counted as a success", before, after)
		}
	}
	s.checkAlive("/")
}

// TestFaultCancelWhileQueued: with one slot and a queue, the clients of
// some queued requests give up (their request context is cancelled). They
// leave the queue at once and are counted Cancelled; the waiters behind
// them keep their places and get the slot in turn, so no slot is lost and
// every admitted request is answered.
func TestFaultCancelWhileQueued(t *testing.T) {
	q := startCancelQueue(t)
	q.send(context.Background(), "holder")
	if id := <-q.started; id != "holder" {
		t.Fatalf("started %q", id)
	}
	// Queue five requests in a known order; cancel the 1st, 3rd and 4th.
	cancels := q.queueInOrder(t, []string{"q1", "q2", "q3", "q4", "q5"})
	for _, id := range []string{"q1", "q3", "q4"} {
		cancels[id]()
	}
	mwtest.WaitFor(t, "the cancelled waiters to leave", func() bool {
		snap := q.l.Snapshot()
		return snap.Queued == 2 && snap.Classes[0].Cancelled == 3
	})
	if n := q.l.InFlight(); n != 1 {
		t.Errorf("in flight %d, want the holder only", n)
	}
	close(q.release)
	q.checkAnswers(t)
	// The waiters behind the cancelled ones were admitted in order.
	if a, b := <-q.started, <-q.started; a != "q2" || b != "q5" {
		t.Errorf("admitted %s then %s, want q2 then q5", a, b)
	}
	c := waitReleased(t, q.l)
	if c.admitted != 3 || c.success != 3 || c.enqueued != 5 || c.cancelled != 3 {
		t.Errorf("admitted %d, success %d, enqueued %d, cancelled %d; want 3, 3, 5, 3", c.admitted, c.success, c.enqueued, c.cancelled)
	}
	select {
	case id := <-q.started:
		t.Errorf("the handler ran for %s, whose client had gone", id)
	default:
	}
	q.checkAlive("/?id=alive")
}

// cancelQueue is the server of TestFaultCancelWhileQueued: one slot and a
// queue of 8; the handler reports the id of each request it starts, and
// the one for "holder" keeps the slot until release is closed.
type cancelQueue struct {
	*faultServer
	release chan struct{}
	started chan string
	results chan queuedResult
}

// queuedResult is what the client of one request got.
type queuedResult struct {
	id     string
	status int
	body   string
	err    error
}

func startCancelQueue(t *testing.T) *cancelQueue {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 8, MaxWait: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	q := &cancelQueue{release: make(chan struct{}), started: make(chan string, 16), results: make(chan queuedResult, 16)}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		q.started <- id
		if id == "holder" {
			<-q.release
		}
		io.WriteString(w, id)
	})
	q.faultServer = startFault(t, l, app, nil, nil)
	return q
}

// send sends the request id with ctx in the background; its result goes
// to q.results.
func (q *cancelQueue) send(ctx context.Context, id string) {
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, q.srv.URL+"/?id="+id, nil)
		resp, err := q.client.Do(req)
		if err != nil {
			q.results <- queuedResult{id: id, err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		q.results <- queuedResult{id, resp.StatusCode, string(b), err}
	}()
}

// queueInOrder sends ids one at a time, each once the one before it is
// queued, so the queue holds them in that order; it returns the cancel
// function of each.
func (q *cancelQueue) queueInOrder(t *testing.T, ids []string) map[string]context.CancelFunc {
	t.Helper()
	cancels := map[string]context.CancelFunc{}
	for i, id := range ids {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels[id] = cancel
		q.send(ctx, id)
		mwtest.WaitFor(t, id+" to queue", func() bool { return q.l.Snapshot().Queued == i+1 })
	}
	return cancels
}

// checkAnswers collects the six results: the holder and the waiters that
// stayed get their own id back, the cancelled clients their cancellation.
func (q *cancelQueue) checkAnswers(t *testing.T) {
	t.Helper()
	got := map[string]queuedResult{}
	for range 6 {
		r := <-q.results
		got[r.id] = r
	}
	for _, id := range []string{"holder", "q2", "q5"} {
		if r := got[id]; r.err != nil || r.status != 200 || r.body != id {
			t.Errorf("%s: %+v", id, r)
		}
	}
	for _, id := range []string{"q1", "q3", "q4"} {
		if r := got[id]; !errors.Is(r.err, context.Canceled) {
			t.Errorf("%s: %+v, want the client's cancellation", id, r)
		}
	}
}

// TestFaultDrainUnderLoad: Drain while requests run and wait. The waiters
// are answered 503 at once and new requests too; the running ones either
// finish within the drain's deadline or are reported by the DrainReport
// and finish after it; afterwards nothing is in flight and every admitted
// request got its response.
func TestFaultDrainUnderLoad(t *testing.T) {
	for _, finishInTime := range []bool{true, false} {
		t.Run(fmt.Sprintf("finish in time=%v", finishInTime), func(t *testing.T) {
			const limit, n = 6, 20
			s := startDrainLoad(t, limit, n)
			s.sendWork(t, n)
			mwtest.WaitFor(t, "the slots to fill and the rest to queue", func() bool {
				snap := s.l.Snapshot()
				return snap.InFlight == limit && snap.Queued == n-limit && s.started.Load() == limit
			})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			drained := drainAsync(ctx, s.l)
			// The waiters are rejected with 503 at once.
			count := map[int]int{}
			for range n - limit {
				count[<-s.statuses]++
			}
			if count[503] != n-limit {
				t.Fatalf("queued requests answered %v, want %d x 503", count, n-limit)
			}
			s.checkNewRejected(t)

			if finishInTime {
				close(s.release)
				checkDrainFinished(t, <-drained)
			} else {
				cancel() // the drain's deadline passes with all the work running
				checkDrainReportsRunning(t, <-drained, limit)
				close(s.release)
			}
			for range limit {
				count[<-s.statuses]++
			}
			if count[200] != limit || count[503] != n-limit {
				t.Errorf("responses %v, want %d x 200 and %d x 503", count, limit, n-limit)
			}
			c := waitReleased(t, s.l)
			if c.admitted != limit || c.success != limit || s.finished.Load() != limit || c.rejected[shed.ReasonDraining] != n-limit+1 {
				t.Errorf("admitted %d, success %d, handlers finished %d, draining rejections %d", c.admitted, c.success, s.finished.Load(), c.rejected[shed.ReasonDraining])
			}
		})
	}
}

// drainLoad is the server of TestFaultDrainUnderLoad: its /work handlers
// run until release is closed, and statuses receives what each client of
// sendWork got (0: no response).
type drainLoad struct {
	*faultServer
	release           chan struct{}
	started, finished atomic.Int64
	statuses          chan int
}

// startDrainLoad serves with limit slots and a queue for all n requests.
func startDrainLoad(t *testing.T, limit, n int) *drainLoad {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: limit, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: n, MaxWait: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &drainLoad{release: make(chan struct{}), statuses: make(chan int, n)}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/work" {
			s.started.Add(1)
			<-s.release
			s.finished.Add(1)
		}
		io.WriteString(w, "done")
	})
	s.faultServer = startFault(t, l, app, nil, nil)
	return s
}

// sendWork sends n GET /work at once in the background.
func (s *drainLoad) sendWork(t *testing.T, n int) {
	for range n {
		go func() {
			resp, err := s.client.Get(s.srv.URL + "/work")
			if err != nil {
				t.Errorf("GET: %v", err)
				s.statuses <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.statuses <- resp.StatusCode
		}()
	}
}

// checkNewRejected checks that a new request during the drain gets a 503
// with Retry-After whose body does not mention the drain.
func (s *drainLoad) checkNewRejected(t *testing.T) {
	t.Helper()
	resp, err := s.client.Get(s.srv.URL + "/new")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || strings.Contains(string(body), "drain") {
		t.Errorf("during the drain: status %d, Retry-After %q, body %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// drainResult is what Limiter.Drain returned.
type drainResult struct {
	rep shed.DrainReport
	err error
}

// drainAsync runs l.Drain(ctx) in the background; its result arrives on
// the channel returned.
func drainAsync(ctx context.Context, l *shed.Limiter) <-chan drainResult {
	done := make(chan drainResult, 1)
	go func() {
		rep, err := l.Drain(ctx)
		done <- drainResult{rep, err}
	}()
	return done
}

// checkDrainFinished checks a drain that saw every running request finish.
func checkDrainFinished(t *testing.T, d drainResult) {
	t.Helper()
	if d.err != nil || d.rep.InFlight != 0 {
		t.Errorf("Drain: %+v, %v; want everything finished", d.rep, d.err)
	}
}

// checkDrainReportsRunning checks a drain whose deadline passed with limit
// requests running: it reports them, all in the one class.
func checkDrainReportsRunning(t *testing.T, d drainResult, limit int) {
	t.Helper()
	if !errors.Is(d.err, context.Canceled) || d.rep.InFlight != limit || len(d.rep.Classes) != 1 || d.rep.Classes[0].InFlight != limit {
		t.Errorf("Drain: %+v, %v; want the %d running requests reported", d.rep, d.err, limit)
	}
}

// TestFaultBaseContextCancelledWhileQueued: graceful shutdown that cancels
// the http.Server's BaseContext ends the context of every queued request
// while their clients wait. Each client gets the sanitized 503 with
// Retry-After, never an empty 200 for a charge that did not happen, and the
// handler does not run; the waiters are counted Cancelled.
func TestFaultBaseContextCancelledWhileQueued(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 8, MaxWait: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	base, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	var charged atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charged.Add(1)
		io.WriteString(w, `{"charged":true}`)
	})
	s := startFault(t, l, app, nil, func(srv *http.Server) {
		srv.BaseContext = func(net.Listener) context.Context { return base }
	})
	holder, _ := l.TryAcquire(shed.Request{})
	const n = 3
	type result struct {
		status int
		body   string
		header http.Header
		err    error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			resp, err := s.client.Post(s.srv.URL+"/charge", "application/json", strings.NewReader(`{"amount":100}`))
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, string(b), resp.Header, err}
		}()
	}
	mwtest.WaitFor(t, "the charges to queue", func() bool { return l.Snapshot().Queued == n })
	shutdown()
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("POST /charge: %v", r.err)
			continue
		}
		var p map[string]any
		if r.status != http.StatusServiceUnavailable || r.header.Get("Content-Type") != shedhttp.ProblemContentType ||
			r.header.Get("Retry-After") == "" || json.Unmarshal([]byte(r.body), &p) != nil || len(p) != 4 {
			t.Errorf("POST /charge during shutdown: status %d, header %v, body %q; want the sanitized 503", r.status, r.header, r.body)
		}
	}
	holder.Release(shed.Ignored)
	c := waitReleased(t, l)
	if charged.Load() != 0 || c.admitted != 1 || c.cancelled != n {
		t.Errorf("handler ran %d times, admitted %d, cancelled %d; want 0, 1 (the holder), %d", charged.Load(), c.admitted, c.cancelled, n)
	}
}

// TestEncodedPathServeMux: behind net/http's ServeMux, whatever the
// percent-encoding of a path, the expensive handler never runs unlimited:
// SkipPaths and Routes see the path as the client sent it, which is never
// more permissive than what the mux routes. /%68ealthz, which the mux
// serves with the health handler, is then limited too (safe), and /a%2Fb,
// which the mux does not split at the encoded slash and so routes to
// /{report}, is not taken for the skipped /a/b.
func TestEncodedPathServeMux(t *testing.T) {
	l := newLimiter(t, 1)
	var reports atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "healthy") })
	mux.HandleFunc("/a/b", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ab") })
	mux.HandleFunc("/{report}", func(w http.ResponseWriter, r *http.Request) {
		reports.Add(1)
		io.WriteString(w, "report "+r.PathValue("report"))
	})
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l, SkipPaths: []string{"/healthz", "/a/b"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	p, _ := l.TryAcquire(shed.Request{})
	defer p.Release(shed.Ignored)
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/healthz", 200, "healthy"},
		{"/a/b", 200, "ab"},
		{"/a%2Fb", 503, ""},
		{"/%68ealthz", 503, ""},
		{"/q", 503, ""},
	} {
		status, body := get(tc.path)
		if status != tc.status || (tc.body != "" && body != tc.body) {
			t.Errorf("%s with the limit full: %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
		}
	}
	if n := reports.Load(); n != 0 {
		t.Errorf("the report handler ran %d times with the limit full", n)
	}
}
