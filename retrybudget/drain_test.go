package retrybudget

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// hangBound is how long a test waits for a RoundTrip that the bugs it
// guards against make hang forever. It detects hangs; it measures nothing.
const hangBound = 5 * time.Second

// endlessBody answers 503 headers at once, then a body that never ends:
// nothing more, or one byte every 100 ms (10 B/s), until the client goes
// away or stop is closed.
func endlessBody(trickle, connClose bool, length int, stop <-chan struct{}) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, r *http.Request) {
		if length > 0 {
			w.Header().Set("Content-Length", strconv.Itoa(length))
		}
		if connClose {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				return
			case <-tick.C:
				if trickle {
					w.Write([]byte{'x'})
					w.(http.Flusher).Flush()
				}
			}
		}
	}
}

// TestTransportEndlessBody: a retryable response whose body never ends
// (or trickles) must not hold the retrying client. The drain of a
// discarded body is bounded in time; a cut drain closes its connection;
// the caller gets the last 503 promptly, as a bare http.Transport would
// give the first; nothing is left behind, goroutine or connection.
// (Before the fix, the drain read until the body ended: forever without
// a deadline, and until the deadline with one, which the caller then got
// as an error instead of the 503.)
func TestTransportEndlessBody(t *testing.T) {
	tests := []endlessBodyCase{
		{name: "endless, no deadline"},
		{name: "endless, 3s deadline", deadline: 3 * time.Second},
		{name: "60 KB at 10 B/s", trickle: true, length: 60 << 10},
		{name: "trickle, chunked", trickle: true},
		// A connection the server closes is not reused: draining it is
		// wasted time, however long the drain may take.
		{name: "Connection: close is not drained", trickle: true, connClose: true,
			cfg: TransportConfig{MaxDrainTime: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testEndlessBody(t, tt) })
	}
}

// endlessBodyCase is an upstream answer of TestTransportEndlessBody and
// the client that retries it.
type endlessBodyCase struct {
	name      string
	trickle   bool
	connClose bool
	length    int           // Content-Length; 0: chunked
	deadline  time.Duration // of the caller; 0: none
	cfg       TransportConfig
}

// testEndlessBody runs one case of TestTransportEndlessBody.
func testEndlessBody(t *testing.T, tt endlessBodyCase) {
	ignore := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	up := newUpstream(t, endlessBody(tt.trickle, tt.connClose, tt.length, stop))
	base := &http.Transport{MaxIdleConnsPerHost: 16}
	cfg := tt.cfg
	cfg.Base = base
	tr, _ := testTransport(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if tt.deadline > 0 {
		ctx, cancel = context.WithTimeout(ctx, tt.deadline)
		defer cancel()
	}
	var rep Report
	req := get(t, up.url()).WithContext(WithReport(ctx, &rep))
	resp := roundTripWithinHangBound(t, tr, req, cancel, stop)
	if resp.StatusCode != 503 || rep.Attempts != 3 || rep.Denied != ReasonMaxAttempts {
		t.Errorf("status %d, report %+v: want the 3rd 503, after 3 attempts", resp.StatusCode, rep)
	}
	resp.Body.Close() // unread: the caller gives up on it
	// Every attempt had its own connection: a cut drain closes it
	// rather than return it to the pool. And all are closed now.
	if n := up.conns.Load(); n != 3 {
		t.Errorf("%d connections for 3 attempts, want one each", n)
	}
	waitFor(t, "the server to see every connection closed", func() bool {
		return up.closed.Load() == up.conns.Load()
	})
	base.CloseIdleConnections()
	close(stop)
	up.srv.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Error(err)
	}
}

// roundTripWithinHangBound sends req through tr and returns its response,
// failing the test if RoundTrip is still blocked after hangBound or
// returns an error. On failure it first calls cancel and closes stop, so
// that the upstream and the blocked RoundTrip end with the test.
func roundTripWithinHangBound(t *testing.T, tr http.RoundTripper, req *http.Request, cancel context.CancelFunc, stop chan<- struct{}) *http.Response {
	t.Helper()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		done <- result{resp, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(hangBound):
		cancel() // unblocks the bug, so that the test can end
		close(stop)
		if r = <-done; r.resp != nil {
			r.resp.Body.Close()
		}
		t.Fatalf("RoundTrip still blocked after %v on a body that never ends", hangBound)
	}
	if r.err != nil {
		close(stop)
		t.Fatalf("RoundTrip: %v, want the 503", r.err)
	}
	return r.resp
}

// waitFor polls cond until it holds, failing the test after hangBound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTransportServerShutdown: a server that shuts down answers its last
// requests with Connection: close. The client does not drain such a
// response before it retries: it closes the connection at once, so the
// server's Shutdown is not held up by a client reading a body it will
// throw away, and the retry does not try to reuse the closing connection.
// (Before the fix, the client drained a trickling body until it ended,
// and Shutdown waited with it.)
func TestTransportServerShutdown(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	arrived, shuttingDown, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(stop)
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			close(arrived)
			<-shuttingDown
		}
		endlessBody(true, false, 0, stop)(n, w, r)
	})
	base := &http.Transport{}
	tr, _ := testTransport(t, TransportConfig{Base: base, MaxAttempts: 2, MaxDrainTime: time.Hour})
	done := make(chan error, 1)
	req := get(t, up.url())
	go func() {
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived
	shut := make(chan error, 1)
	go func() { shut <- up.srv.Config.Shutdown(context.Background()) }()
	// Shutdown refuses new work before it closes the listener.
	waitFor(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", up.host())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(shuttingDown)

	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatalf("Shutdown still waiting after %v: the client holds the connection", hangBound)
	}
	// The retry finds no server; what matters is that it was not stuck.
	var re *RetryError
	if err := <-done; !errors.As(err, &re) || re.Attempts != 2 || re.Status != 0 {
		t.Fatalf("RoundTrip: %v; want a *RetryError after 2 attempts", err)
	}
	base.CloseIdleConnections()
	if err := goleak.Find(ignore); err != nil {
		t.Error(err)
	}
}

// TestDiscardChunkedBodyOfExactlyMaxDrainBytes: a discarded chunked body
// no longer than MaxDrainBytes is read to its end, terminating chunk
// included, so its connection is reused. (Before the fix, the drain
// stopped after MaxDrainBytes bytes, short of the terminating chunk, and
// a body of exactly that size lost its connection.)
func TestDiscardChunkedBodyOfExactlyMaxDrainBytes(t *testing.T) {
	for _, size := range []int{DefaultMaxDrainBytes - 1, DefaultMaxDrainBytes} {
		up := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n%2 == 1 {
				w.WriteHeader(503)
				w.(http.Flusher).Flush() // chunked: no Content-Length
				w.Write(bytes.Repeat([]byte("x"), size))
				return
			}
			io.WriteString(w, "ok")
		})
		base := newBase(t)
		base.MaxConnsPerHost = 1
		tr, _ := testTransport(t, TransportConfig{Base: base})
		for i := range 3 {
			if status, _, _, err := do(t, tr, get(t, up.url())); err != nil || status != 200 {
				t.Fatalf("size %d request %d: status %d err %v", size, i, status, err)
			}
		}
		if n := up.conns.Load(); n != 1 {
			t.Errorf("discarded chunked body of %d bytes (MaxDrainBytes %d): %d connections for 3 requests, want 1",
				size, DefaultMaxDrainBytes, n)
		}
	}
}

// TestTransportDeadlineCountsDrainTime: the drain of the discarded body
// comes before the backoff wait, so the deadline rule counts it, at its
// bound MaxDrainTime, unless the body is known to be empty. Attempts take
// 0.9s on a fake clock and the deadline is 2s away: 0.9 + 0.9 fits, 0.9 +
// 0.4 (drain) + 0.9 does not, and the caller gets the 503 rather than a
// doomed retry. (Before the fix, the drain was left out and the retry sent.)
func TestTransportDeadlineCountsDrainTime(t *testing.T) {
	for _, tt := range []struct {
		name string
		body func() io.ReadCloser
		clen int64 // Content-Length; -1: unknown
		hits int64
		rule Reason
	}{
		{"body to drain", func() io.ReadCloser { return io.NopCloser(strings.NewReader("busy")) }, -1, 1, ReasonDeadline},
		{"empty body", func() io.ReadCloser { return http.NoBody }, 0, 2, ReasonMaxAttempts},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			var hits atomic.Int64
			base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				hits.Add(1)
				clk.advance(900 * time.Millisecond)
				return &http.Response{StatusCode: 503, Header: http.Header{}, ContentLength: tt.clen,
					Body: tt.body(), Request: r}, nil
			})
			tr, _ := testTransport(t, TransportConfig{Base: base, Now: clk.now, MaxAttempts: 2,
				MaxDrainTime: 400 * time.Millisecond, Rand: func() float64 { return 0 }})
			ctx, cancel := context.WithDeadline(context.Background(), clk.now().Add(2*time.Second))
			defer cancel()
			status, _, rep, err := do(t, tr, get(t, "http://127.0.0.1:1/").WithContext(ctx))
			if err != nil || status != 503 || hits.Load() != tt.hits || rep.Denied != tt.rule {
				t.Fatalf("status %d err %v hits %d report %+v; want the 503 after %d hits, denied %v",
					status, err, hits.Load(), rep, tt.hits, tt.rule)
			}
		})
	}
}
