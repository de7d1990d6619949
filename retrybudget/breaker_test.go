package retrybudget

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// withRetryAfter answers code with a Retry-After of one second.
func withRetryAfter(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(code)
	}
}

// TestBreakerIgnoresRequestErrors: a status that speaks of the request,
// or of a live server managing its load, must not open the circuit. In a
// gateway, a user who can make one URL fail must not cut a host off for
// every other user. (Before the fix, five POST /500 opened the breaker,
// and GET /ok to the same host then failed with ErrCircuitOpen.)
func TestBreakerIgnoresRequestErrors(t *testing.T) {
	tests := []struct {
		name   string
		method string
		answer func(int, http.ResponseWriter, *http.Request)
	}{
		{"POST 500", http.MethodPost, statuses(500)},
		{"GET 500", http.MethodGet, statuses(500)},
		{"501", http.MethodGet, statuses(501)},
		{"505", http.MethodGet, statuses(505)},
		{"507", http.MethodGet, statuses(507)},
		{"404", http.MethodGet, statuses(404)},
		{"429", http.MethodGet, statuses(429)},
		{"503 with Retry-After", http.MethodGet, withRetryAfter(503)},
		{"502 with Retry-After", http.MethodGet, withRetryAfter(502)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/ok" {
					io.WriteString(w, "ok")
					return
				}
				tt.answer(n, w, r)
			})
			// The default breaker: 5 consecutive failures open it for 5 s.
			tr, _ := testTransport(t, TransportConfig{Breaker: BreakerConfig{OpenTimeout: DefaultBreakerOpenTimeout}})
			for i := range 10 {
				req, _ := http.NewRequest(tt.method, up.srv.URL+"/fail", strings.NewReader("x"))
				if _, _, _, err := do(t, tr, req); err != nil {
					t.Fatalf("request %d to /fail: %v", i, err)
				}
			}
			status, _, rep, err := do(t, tr, get(t, up.srv.URL+"/ok"))
			if err != nil || status != 200 || rep.Attempts != 1 {
				t.Fatalf("GET /ok after 10 %s: status %d, report %+v, err %v; want 200", tt.name, status, rep, err)
			}
			if s, _ := tr.BreakerState(up.host()); s != gobreaker.StateClosed {
				t.Fatalf("breaker %v, want closed", s)
			}
		})
	}
}

// TestBreakerTripsOnHostFailures: what says the host cannot serve opens
// the circuit, counted once per logical request, however many attempts
// it made. (Before the fix, every attempt counted: one request retried 3
// times opened a breaker set to trip after 3 failures.)
func TestBreakerTripsOnHostFailures(t *testing.T) {
	reset := func(_ int, w http.ResponseWriter, _ *http.Request) {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}
	tests := []struct {
		name    string
		refused bool
		answer  func(int, http.ResponseWriter, *http.Request)
	}{
		{name: "connection refused", refused: true},
		{name: "connection closed before the response", answer: reset},
		{name: "502", answer: statuses(502)},
		{name: "503", answer: statuses(503)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var target string
			if tt.refused {
				target = refusedURL(t)
			} else {
				target = newUpstream(t, tt.answer).url()
			}
			u, _ := url.Parse(target)
			tr, _ := testTransport(t, TransportConfig{MaxAttempts: 3,
				Breaker: BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: time.Minute}})
			for i := 1; i <= 3; i++ {
				_, _, rep, err := do(t, tr, get(t, target))
				if errors.Is(err, ErrCircuitOpen) || rep.Attempts != 3 || rep.Denied != ReasonMaxAttempts {
					t.Fatalf("request %d: report %+v, err %v; want 3 attempts, none refused by the breaker", i, rep, err)
				}
				want := gobreaker.StateClosed
				if i == 3 {
					want = gobreaker.StateOpen
				}
				if s, _ := tr.BreakerState(u.Host); s != want {
					t.Fatalf("breaker %v after %d failed requests, want %v", s, i, want)
				}
			}
			_, _, rep, err := do(t, tr, get(t, target))
			var re *RetryError
			if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &re) || re.Attempts != 0 || rep.Attempts != 0 {
				t.Fatalf("with the circuit open: report %+v, err %v; want ErrCircuitOpen and nothing sent", rep, err)
			}
		})
	}
}

// TestBreakerCountsTheFinalOutcome: a request whose retry succeeds was
// served: it counts as a success, not as a failure and a success.
func TestBreakerCountsTheFinalOutcome(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n%2 == 1 {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "ok")
	})
	tr, _ := testTransport(t, TransportConfig{Breaker: BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Minute}})
	for i := range 5 {
		status, _, rep, err := do(t, tr, get(t, up.url()))
		if err != nil || status != 200 || rep.Attempts != 2 {
			t.Fatalf("request %d: status %d report %+v err %v; want 200 after a retry", i, status, rep, err)
		}
	}
	if s, _ := tr.BreakerState(up.host()); s != gobreaker.StateClosed {
		t.Fatalf("breaker %v, want closed: every request was served", s)
	}
}

// TestBreakerOpenedMeanwhileStopsRetries: a breaker opened by other
// requests while one is in flight stops that one's retries: the caller
// gets its response, untouched.
func TestBreakerOpenedMeanwhileStopsRetries(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" && n == 1 {
			close(arrived)
			<-release
		}
		w.WriteHeader(503)
		io.WriteString(w, "Service Unavailable")
	})
	tr, _ := testTransport(t, TransportConfig{MaxAttempts: 3,
		Breaker: BreakerConfig{ConsecutiveFailures: 2, OpenTimeout: time.Minute}})
	type result struct {
		status int
		body   string
		rep    Report
		err    error
	}
	done := make(chan result, 1)
	slow := get(t, up.srv.URL+"/slow")
	go func() {
		var r result
		r.status, r.body, r.rep, r.err = do(t, tr, slow)
		done <- r
	}()
	<-arrived
	for range 2 { // two failed requests open the circuit
		if _, _, rep, err := do(t, tr, get(t, up.srv.URL+"/fail")); err != nil || rep.Attempts != 3 {
			close(release)
			t.Fatalf("report %+v err %v; want 3 attempts", rep, err)
		}
	}
	close(release)
	r := <-done
	if r.err != nil || r.status != 503 || r.body != "Service Unavailable" || r.rep.Denied != ReasonBreaker || r.rep.Attempts != 1 {
		t.Fatalf("in-flight request: status %d body %q report %+v err %v; want its 503, not retried (breaker)",
			r.status, r.body, r.rep, r.err)
	}
}

// TestBreakerRecoversFromPanickedProbe: a panic below the Transport (a
// later RoundTripper) during the half-open probe still reports the probe
// to the breaker, as excluded, so that a healthy host is called again:
// gobreaker counts an unreported probe in flight for ever, and half-open
// has no timeout.
func TestBreakerRecoversFromPanickedProbe(t *testing.T) {
	var mode atomic.Int32 // 0: refused, 1: panic, 2: ok
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		switch mode.Load() {
		case 0:
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		case 1:
			panic("a RoundTripper bug")
		}
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	tr, _ := testTransport(t, TransportConfig{Base: base, MaxAttempts: 1,
		Breaker: BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Millisecond}})
	req := func() (*http.Response, error) {
		r, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
		return tr.RoundTrip(r)
	}
	if _, err := req(); err == nil {
		t.Fatal("a refused connection succeeded")
	}
	for s, _ := tr.BreakerState("upstream.test"); s != gobreaker.StateHalfOpen; s, _ = tr.BreakerState("upstream.test") {
		time.Sleep(time.Millisecond) // OpenTimeout, on gobreaker's clock
	}
	mode.Store(1)
	func() {
		defer func() { _ = recover() }()
		_, _ = req()
	}()
	mode.Store(2)
	resp, err := req()
	if err != nil {
		s, _ := tr.BreakerState("upstream.test")
		t.Fatalf("healthy host refused after the panicked probe: breaker %v, err %v", s, err)
	}
	resp.Body.Close()
}

// abortedUpload is a request body that yields a few bytes, then fails: an
// upload its client aborts mid-stream, as a gateway proxying it sees it.
type abortedUpload struct{ read bool }

func (b *abortedUpload) Read(p []byte) (int, error) {
	if b.read {
		return 0, errors.New("client aborted the upload")
	}
	b.read = true
	return copy(p, "partial"), nil
}

func (b *abortedUpload) Close() error { return nil }

// TestBreakerIgnoresRequestSideTransportErrors: a transport error that
// speaks of the request only (its body failed to read, net/http refused a
// header value or the scheme) must not open the circuit, any more than a
// 500: whoever can send five such requests in a row would cut the host off
// for every caller. (Before the fix, every non-timeout transport error
// counted as a host failure, and GET /ok then failed with ErrCircuitOpen.)
func TestBreakerIgnoresRequestSideTransportErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  func(url string) *http.Request
	}{
		{"aborted upload", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, url, &abortedUpload{})
			req.ContentLength = 100
			return req
		}},
		{"invalid header value", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header["X-User"] = []string{"a\r\nb"}
			return req
		}},
		{"unsupported scheme", func(url string) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, "ftp"+strings.TrimPrefix(url, "http"), nil)
			return req
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
			tr, _ := testTransport(t, TransportConfig{Breaker: BreakerConfig{OpenTimeout: DefaultBreakerOpenTimeout}})
			for i := range 10 {
				if _, _, _, err := do(t, tr, tt.req(up.srv.URL+"/bad")); err == nil {
					t.Fatalf("bad request %d succeeded", i)
				}
			}
			status, _, _, err := do(t, tr, get(t, up.srv.URL+"/ok"))
			if s, _ := tr.BreakerState(up.host()); err != nil || status != 200 || s != gobreaker.StateClosed {
				t.Fatalf("GET /ok after 10 bad requests: status %d err %v breaker %v; want 200, closed", status, err, s)
			}
		})
	}
}

// TestClassifyError: only errors known to come from the host or the
// connection are host failures; a request body's read error is the
// request's even when it is a *net.OpError (a gateway's inbound
// connection), and an unknown error fails safe as the request's.
func TestClassifyError(t *testing.T) {
	opErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tt := range []struct {
		err  error
		want errKind
	}{
		{opErr, errHost},
		{&url.Error{Op: "Get", URL: "x", Err: syscall.ECONNREFUSED}, errHost},
		{fmt.Errorf("broken: %w", io.ErrUnexpectedEOF), errHost},
		{tls.RecordHeaderError{Msg: "bad record"}, errHost},
		{&attemptTimeoutError{err: context.Canceled}, errTimeout},
		{context.DeadlineExceeded, errTimeout},
		{&net.OpError{Op: "readfrom", Net: "tcp", Err: &requestError{err: opErr}}, errRequest},
		{errNilResponse, errRequest},
		{errors.New(`net/http: invalid header field value for "X"`), errOther},
	} {
		if got := classifyError(tt.err); got != tt.want {
			t.Errorf("classifyError(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
