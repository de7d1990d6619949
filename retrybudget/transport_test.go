package retrybudget

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestNewTransportValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   TransportConfig
		field string
	}{
		{"zero is defaults", TransportConfig{}, ""},
		{"negative attempts", TransportConfig{MaxAttempts: -1}, "MaxAttempts"},
		{"too many attempts", TransportConfig{MaxAttempts: 101}, "MaxAttempts"},
		{"negative base backoff", TransportConfig{BaseBackoff: -1}, "BaseBackoff"},
		{"negative max backoff", TransportConfig{MaxBackoff: -1}, "MaxBackoff"},
		{"max below base", TransportConfig{BaseBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
		{"negative retry-after", TransportConfig{MaxRetryAfter: -1}, "MaxRetryAfter"},
		{"huge retry-after", TransportConfig{MaxRetryAfter: 25 * time.Hour}, "MaxRetryAfter"},
		{"negative attempt timeout", TransportConfig{AttemptTimeout: -1}, "AttemptTimeout"},
		{"negative min attempt", TransportConfig{MinAttemptTime: -1}, "MinAttemptTime"},
		{"negative drain time", TransportConfig{MaxDrainTime: -1}, "MaxDrainTime"},
		{"bad inbound policy", TransportConfig{Inbound: 9}, "Inbound"},
		{"bad deadline header", TransportConfig{DeadlineHeader: "x timeout"}, "DeadlineHeader"},
		{"deadline header", TransportConfig{DeadlineHeader: "grpc-timeout"}, ""},
		{"no budget and a budget", TransportConfig{NoBudget: true, Budget: Default()}, "NoBudget"},
		{"bad breaker", TransportConfig{Breaker: BreakerConfig{OpenTimeout: -1}}, "BreakerConfig.OpenTimeout"},
		{"bad breaker hosts", TransportConfig{Breaker: BreakerConfig{MaxHosts: -1}}, "BreakerConfig.MaxHosts"},
		{"base backoff above default max", TransportConfig{BaseBackoff: 2 * time.Second}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTransport(tt.cfg)
			if tt.field == "" {
				if err != nil || tr == nil {
					t.Fatalf("NewTransport: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("NewTransport error = %v, want one naming %s and wrapping ErrInvalidConfig", err, tt.field)
			}
		})
	}
}

// whatIsRetriedCase is one request of TestTransportWhatIsRetried: what is
// sent, how the upstream answers, and what the caller must see.
type whatIsRetriedCase struct {
	name       string
	method     string
	body       func() (io.Reader, bool) // reader, replayable
	header     http.Header
	answer     func(int, http.ResponseWriter, *http.Request)
	wantHits   int
	wantStatus int
	wantDenied Reason
}

// whatIsRetriedCases lists which methods, statuses and bodies are retried.
func whatIsRetriedCases() []whatIsRetriedCase {
	const key = "Idempotency-Key"
	return []whatIsRetriedCase{
		{name: "GET 503 until attempts run out", method: "GET", answer: statuses(503), wantHits: 3, wantStatus: 503, wantDenied: ReasonMaxAttempts},
		{name: "GET 503 then 200", method: "GET", answer: statuses(503, 200), wantHits: 2, wantStatus: 200},
		{name: "GET 502 504 200", method: "GET", answer: statuses(502, 504, 200), wantHits: 3, wantStatus: 200},
		{name: "GET 429 then 200", method: "GET", answer: statuses(429, 200), wantHits: 2, wantStatus: 200},
		{name: "HEAD 503 then 200", method: "HEAD", answer: statuses(503, 200), wantHits: 2, wantStatus: 200},
		{name: "DELETE 503 then 200", method: "DELETE", answer: statuses(503, 200), wantHits: 2, wantStatus: 200},
		{name: "GET 500 is not retryable", method: "GET", answer: statuses(500, 200), wantHits: 1, wantStatus: 500},
		{name: "GET 404 is not retryable", method: "GET", answer: statuses(404, 200), wantHits: 1, wantStatus: 404},
		{name: "POST without key", method: "POST", answer: statuses(503, 200), wantHits: 1, wantStatus: 503,
			body: func() (io.Reader, bool) { return strings.NewReader("payload"), true }},
		{name: "POST with key and replayable body", method: "POST", header: http.Header{key: {"k1"}},
			answer: statuses(503, 503, 200), wantHits: 3, wantStatus: 200,
			body: func() (io.Reader, bool) { return strings.NewReader("payload"), true }},
		{name: "POST with empty key", method: "POST", header: http.Header{key: {""}},
			answer: statuses(503, 200), wantHits: 1, wantStatus: 503},
		{name: "PUT with a body that cannot be replayed", method: "PUT", answer: statuses(503, 200), wantHits: 1, wantStatus: 503,
			body: func() (io.Reader, bool) { return strings.NewReader("payload"), false }},
		{name: "503 with the no-retry header", method: "GET", wantHits: 1, wantStatus: 503, wantDenied: ReasonNoRetryHeader,
			answer: func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set(NoRetryHeader, NoRetryValue)
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(503)
				io.WriteString(w, "Service Unavailable")
			}},
		{name: "429 with the no-retry header", method: "GET", wantHits: 1, wantStatus: 429, wantDenied: ReasonNoRetryHeader,
			answer: func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set(NoRetryHeader, "anything")
				w.WriteHeader(429)
				io.WriteString(w, "Too Many Requests")
			}},
	}
}

// TestTransportWhatIsRetried checks which requests and outcomes are
// retried, against a loopback server with scripted failures.
func TestTransportWhatIsRetried(t *testing.T) {
	for _, tt := range whatIsRetriedCases() {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t, tt.answer)
			tr, _ := testTransport(t, TransportConfig{})
			req := newWhatIsRetriedRequest(t, tt, up.url())
			status, respBody, rep, err := do(t, tr, req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			checkWhatIsRetried(t, tt, up, status, respBody, rep)
			if req.Header.Get(AttemptHeader) != "" {
				t.Error("the caller's request was modified")
			}
		})
	}
}

// newWhatIsRetriedRequest builds the case's request; a body that cannot be
// replayed loses GetBody so that the transport cannot rewind it.
func newWhatIsRetriedRequest(t *testing.T, tt whatIsRetriedCase, url string) *http.Request {
	t.Helper()
	var body io.Reader
	replayable := true
	if tt.body != nil {
		body, replayable = tt.body()
	}
	req, err := http.NewRequest(tt.method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if !replayable {
		req.Body = io.NopCloser(body)
		req.GetBody = nil
	}
	for k, v := range tt.header {
		req.Header[k] = v
	}
	return req
}

// checkWhatIsRetried compares what the caller got and what the upstream
// saw (attempts, attempt headers, bodies) with the case's expectations.
func checkWhatIsRetried(t *testing.T, tt whatIsRetriedCase, up *upstream, status int, respBody string, rep Report) {
	t.Helper()
	if got := int(up.hits.Load()); got != tt.wantHits {
		t.Errorf("server hits = %d, want %d", got, tt.wantHits)
	}
	if status != tt.wantStatus {
		t.Errorf("status = %d, want %d", status, tt.wantStatus)
	}
	if tt.method != "HEAD" && respBody != http.StatusText(status) {
		t.Errorf("body = %q: the returned response must be untouched", respBody)
	}
	if rep.Attempts != tt.wantHits || rep.Denied != tt.wantDenied {
		t.Errorf("report = %+v, want %d attempts, denied %v", rep, tt.wantHits, tt.wantDenied)
	}
	var wantAttempts []string
	for i := 1; i <= tt.wantHits; i++ {
		wantAttempts = append(wantAttempts, string(rune('0'+i)))
	}
	if got := up.seenAttempts(); !slices.Equal(got, wantAttempts) {
		t.Errorf("%s seen by the server = %q, want %q", AttemptHeader, got, wantAttempts)
	}
	if tt.body != nil {
		up.mu.Lock()
		for i, b := range up.bodies {
			if b != "payload" {
				t.Errorf("attempt %d sent body %q", i+1, b)
			}
		}
		up.mu.Unlock()
	}
}

func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/"
}

func TestTransportConnectionErrors(t *testing.T) {
	url := refusedURL(t)
	tr, fs := testTransport(t, TransportConfig{})
	_, _, rep, err := do(t, tr, get(t, url))
	var re *RetryError
	if !errors.As(err, &re) || re.Reason != ReasonMaxAttempts || re.Attempts != 3 {
		t.Fatalf("err = %v, want a *RetryError for max_attempts after 3 attempts", err)
	}
	if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v must match ErrAttemptsExhausted and ECONNREFUSED", err)
	}
	if rep.Attempts != 3 || len(fs.all()) != 2 {
		t.Fatalf("report %+v, waits %v", rep, fs.all())
	}

	// A connection dropped by the server is retried.
	up := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		io.WriteString(w, "ok")
	})
	status, body, rep, err := do(t, tr, get(t, up.url()))
	if err != nil || status != 200 || body != "ok" || rep.Attempts != 2 {
		t.Fatalf("after a dropped connection: status %d body %q report %+v err %v", status, body, rep, err)
	}
}

func TestTransportBudgetDenial(t *testing.T) {
	empty := mustBudget(t, BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: -1})
	up := newUpstream(t, statuses(503, 200))
	tr, fs := testTransport(t, TransportConfig{Budget: empty})
	status, body, rep, err := do(t, tr, get(t, up.url()))
	if err != nil || status != 503 || body != "Service Unavailable" {
		t.Fatalf("status %d body %q err %v: want the 503 response untouched", status, body, err)
	}
	if rep.Denied != ReasonBudget || rep.Attempts != 1 || up.hits.Load() != 1 || len(fs.all()) != 0 {
		t.Fatalf("report %+v hits %d waits %v", rep, up.hits.Load(), fs.all())
	}
	if s := empty.Snapshot(); s.Denials != 1 || s.Deposits != 1 {
		t.Fatalf("budget snapshot %+v", s)
	}

	_, _, _, err = do(t, tr, get(t, refusedURL(t)))
	var re *RetryError
	if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &re) || re.Attempts != 1 {
		t.Fatalf("err = %v, want budget exhausted after 1 attempt, wrapping the connection error", err)
	}
}

func TestTransportPerDestinationBudget(t *testing.T) {
	m, err := NewBudgetMap(BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: 0.1}, 8) // one retry per host
	if err != nil {
		t.Fatal(err)
	}
	a := newUpstream(t, statuses(503))
	b := newUpstream(t, statuses(503))
	tr, _ := testTransport(t, TransportConfig{BudgetFor: m.ForHost, MaxAttempts: 2})
	for range 2 {
		do(t, tr, get(t, a.url()))
	}
	do(t, tr, get(t, b.url()))
	// a: 2 requests, one retry; b: 1 request, its own retry.
	if a.hits.Load() != 3 || b.hits.Load() != 2 || m.Len() != 2 {
		t.Fatalf("hits a=%d b=%d, budgets %d", a.hits.Load(), b.hits.Load(), m.Len())
	}
}

func TestTransportRetryAfter(t *testing.T) {
	retryAfter := func(v string) func(int, http.ResponseWriter, *http.Request) {
		return func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Retry-After", v)
				w.WriteHeader(503)
				return
			}
			io.WriteString(w, "ok")
		}
	}
	t.Run("seconds", func(t *testing.T) {
		up := newUpstream(t, retryAfter("2"))
		tr, fs := testTransport(t, TransportConfig{})
		status, _, _, err := do(t, tr, get(t, up.url()))
		if err != nil || status != 200 || !slices.Equal(fs.all(), []time.Duration{2 * time.Second}) {
			t.Fatalf("status %d err %v waits %v, want one wait of 2s", status, err, fs.all())
		}
	})
	t.Run("http-date", func(t *testing.T) {
		up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
			retryAfter(time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))(n, w, r)
		})
		tr, fs := testTransport(t, TransportConfig{})
		status, _, _, err := do(t, tr, get(t, up.url()))
		w := fs.all()
		// The date has a 1 s resolution: the wait is in (1s, 3s].
		if err != nil || status != 200 || len(w) != 1 || w[0] <= time.Second || w[0] > 3*time.Second {
			t.Fatalf("status %d err %v waits %v, want one wait of about 3s", status, err, w)
		}
	})
	t.Run("longer than MaxRetryAfter", func(t *testing.T) {
		up := newUpstream(t, retryAfter("30"))
		tr, fs := testTransport(t, TransportConfig{MaxRetryAfter: 10 * time.Second})
		status, _, rep, err := do(t, tr, get(t, up.url()))
		if err != nil || status != 503 || rep.Denied != ReasonRetryAfter || up.hits.Load() != 1 || len(fs.all()) != 0 {
			t.Fatalf("status %d err %v report %+v hits %d", status, err, rep, up.hits.Load())
		}
	})
	t.Run("malformed is ignored", func(t *testing.T) {
		up := newUpstream(t, retryAfter("soon"))
		tr, fs := testTransport(t, TransportConfig{BaseBackoff: 100 * time.Millisecond})
		status, _, _, err := do(t, tr, get(t, up.url()))
		// Full jitter with u = 0.5 over [0, 100ms).
		if err != nil || status != 200 || !slices.Equal(fs.all(), []time.Duration{50 * time.Millisecond}) {
			t.Fatalf("status %d err %v waits %v, want the backoff of 50ms", status, err, fs.all())
		}
	})
	t.Run("shorter than the backoff", func(t *testing.T) {
		up := newUpstream(t, retryAfter("0"))
		tr, fs := testTransport(t, TransportConfig{BaseBackoff: 100 * time.Millisecond})
		do(t, tr, get(t, up.url()))
		if !slices.Equal(fs.all(), []time.Duration{50 * time.Millisecond}) {
			t.Fatalf("waits %v, want the backoff of 50ms", fs.all())
		}
	})
}

func TestTransportBackoff(t *testing.T) {
	up := newUpstream(t, statuses(503))
	tr, fs := testTransport(t, TransportConfig{MaxAttempts: 6, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 30 * time.Millisecond})
	do(t, tr, get(t, up.url()))
	want := []time.Duration{5, 10, 15, 15, 15}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(fs.all(), want) {
		t.Fatalf("waits %v, want %v", fs.all(), want)
	}
	// The jitter spans the whole interval.
	for _, u := range []float64{0, 0.999999, 1, -1, nan()} {
		tr.rand = func() float64 { return u }
		if d := tr.backoff(3); d < 0 || d >= 30*time.Millisecond {
			t.Fatalf("backoff with u=%v = %v", u, d)
		}
	}
	// The cap holds for large n, without overflow.
	tr.rand = func() float64 { return 0.5 }
	if d := tr.backoff(maxAttemptsLimit); d != 15*time.Millisecond {
		t.Fatalf("backoff(100) = %v, want the capped 15ms", d)
	}
}

func TestTransportDeadline(t *testing.T) {
	t.Run("wait does not fit", testDeadlineWaitDoesNotFit)
	t.Run("previous attempt duration counts", testDeadlinePreviousAttemptCounts)
	t.Run("first attempt not started", testDeadlineFirstAttemptNotStarted)
	t.Run("already expired", testDeadlineAlreadyExpired)
	t.Run("cancelled during the backoff wait", testDeadlineCancelledDuringBackoff)
	t.Run("attempt timeout", testDeadlineAttemptTimeout)
}

// testDeadlineWaitDoesNotFit: a Retry-After longer than the time left is
// not waited for.
func testDeadlineWaitDoesNotFit(t *testing.T) {
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(503)
	})
	tr, fs := testTransport(t, TransportConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	status, _, rep, err := do(t, tr, get(t, up.url()).WithContext(ctx))
	if err != nil || status != 503 || rep.Denied != ReasonDeadline || up.hits.Load() != 1 || len(fs.all()) != 0 {
		t.Fatalf("status %d err %v report %+v hits %d waits %v", status, err, rep, up.hits.Load(), fs.all())
	}
}

// testDeadlinePreviousAttemptCounts: the expected duration of a retry
// includes how long the previous attempt took.
func testDeadlinePreviousAttemptCounts(t *testing.T) {
	clock := newFakeClock()
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		clock.advance(1800 * time.Millisecond)
		w.WriteHeader(503)
	})
	tr, _ := testTransport(t, TransportConfig{Now: clock.now})
	// About 1.2s left after a 1.8s attempt: the retry (25ms wait +
	// about 1.8s) cannot finish before the deadline.
	ctx, cancel := context.WithDeadline(context.Background(), clock.now().Add(3*time.Second))
	defer cancel()
	_, _, rep, err := do(t, tr, get(t, up.url()).WithContext(ctx))
	if err != nil || rep.Denied != ReasonDeadline || up.hits.Load() != 1 {
		t.Fatalf("err %v report %+v hits %d", err, rep, up.hits.Load())
	}
}

// testDeadlineFirstAttemptNotStarted: with less than MinAttemptTime left
// nothing is sent, and the request body is still closed.
func testDeadlineFirstAttemptNotStarted(t *testing.T) {
	up := newUpstream(t, statuses(200))
	tr, _ := testTransport(t, TransportConfig{MinAttemptTime: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	body := &trackedBody{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, up.url(), body)
	_, _, rep, err := do(t, tr, req)
	var re *RetryError
	if !errors.Is(err, ErrDeadline) || !errors.As(err, &re) || re.Attempts != 0 || up.hits.Load() != 0 || rep.Attempts != 0 {
		t.Fatalf("err %v hits %d report %+v", err, up.hits.Load(), rep)
	}
	if !body.closed.Load() {
		t.Fatal("the request body was not closed")
	}
}

// testDeadlineAlreadyExpired: a cancelled context sends nothing.
func testDeadlineAlreadyExpired(t *testing.T) {
	up := newUpstream(t, statuses(200))
	tr, _ := testTransport(t, TransportConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _, err := do(t, tr, get(t, up.url()).WithContext(ctx))
	if !errors.Is(err, context.Canceled) || up.hits.Load() != 0 {
		t.Fatalf("err %v hits %d", err, up.hits.Load())
	}
}

// testDeadlineCancelledDuringBackoff: cancelling the context cuts a long
// backoff wait short.
func testDeadlineCancelledDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.AfterFunc(20*time.Millisecond, cancel)
		w.WriteHeader(503)
	})
	// The real sleep, with a wait of about 10s that the cancellation
	// must cut short.
	tr, _ := testTransport(t, TransportConfig{Sleep: sleepContext, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second,
		Rand: func() float64 { return 0.999 }})
	start := time.Now()
	_, _, rep, err := do(t, tr, get(t, up.url()).WithContext(ctx))
	if !errors.Is(err, context.Canceled) || up.hits.Load() != 1 || rep.Attempts != 1 {
		t.Fatalf("err %v hits %d report %+v", err, up.hits.Load(), rep)
	}
	if elapsed := time.Since(start); elapsed > 9*time.Second {
		t.Fatalf("the wait was not cut short: %v", elapsed)
	}
}

// testDeadlineAttemptTimeout: AttemptTimeout bounds each attempt's
// headers (and is retried), but not the body.
func testDeadlineAttemptTimeout(t *testing.T) {
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select { // hang until the client gives up on the attempt
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond) // body after the timeout
		io.WriteString(w, "hello")
	})
	tr, _ := testTransport(t, TransportConfig{AttemptTimeout: 200 * time.Millisecond})
	status, body, rep, err := do(t, tr, get(t, up.url()))
	// The body comes after AttemptTimeout: only the headers are bounded.
	if err != nil || status != 200 || body != "hello" || rep.Attempts < 2 {
		t.Fatalf("status %d body %q err %v report %+v", status, body, err, rep)
	}
	// Without retries the timeout surfaces as an error.
	tr1, _ := testTransport(t, TransportConfig{AttemptTimeout: 50 * time.Millisecond, MaxAttempts: 1})
	up.hits.Store(0)
	_, _, _, err = do(t, tr1, get(t, up.url()))
	if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("err = %v, want an attempt timeout", err)
	}
}

func TestTransportBreaker(t *testing.T) {
	var healthy atomic.Bool
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "ok")
	})
	tr, _ := testTransport(t, TransportConfig{MaxAttempts: 1,
		Breaker: BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: 500 * time.Millisecond}})
	for i := range 3 {
		if status, _, _, err := do(t, tr, get(t, up.url())); err != nil || status != 503 {
			t.Fatalf("request %d: status %d err %v", i, status, err)
		}
	}
	if s, ok := tr.BreakerState(up.host()); !ok || s != gobreaker.StateOpen {
		t.Fatalf("breaker state %v (%v), want open", s, ok)
	}
	body := &trackedBody{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPut, up.url(), body)
	_, _, rep, err := do(t, tr, req)
	var re *RetryError
	if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &re) || re.Attempts != 0 || rep.Attempts != 0 {
		t.Fatalf("err %v report %+v, want ErrCircuitOpen with no attempt", err, rep)
	}
	if up.hits.Load() != 3 || !body.closed.Load() {
		t.Fatalf("hits %d (want 3: an open circuit sends nothing), body closed %v", up.hits.Load(), body.closed.Load())
	}

	// The upstream recovers; after OpenTimeout the breaker half-opens and
	// one successful probe closes it.
	healthy.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s, _ := tr.BreakerState(up.host()); s == gobreaker.StateHalfOpen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker never half-opened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, _, _, err := do(t, tr, get(t, up.url())); err != nil || status != 200 {
		t.Fatalf("probe: status %d err %v", status, err)
	}
	if s, _ := tr.BreakerState(up.host()); s != gobreaker.StateClosed {
		t.Fatalf("breaker state %v after a successful probe, want closed", s)
	}
	if _, ok := tr.BreakerState("unknown:1"); ok {
		t.Fatal("BreakerState reported a breaker for an unknown host")
	}
}

func TestTransportThrottle(t *testing.T) {
	th, err := NewThrottle(ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The backend rejected everything lately: p = 100/101.
	for range 100 {
		th.Reject()
	}
	up := newUpstream(t, statuses(200))
	tr, _ := testTransport(t, TransportConfig{Throttle: th, Rand: func() float64 { return 0.5 }})
	_, _, rep, err := do(t, tr, get(t, up.url()))
	if !errors.Is(err, ErrThrottled) || up.hits.Load() != 0 || rep.Denied != ReasonThrottle {
		t.Fatalf("err %v hits %d report %+v", err, up.hits.Load(), rep)
	}
	// A healthy throttle lets attempts through and learns the accepts.
	th2, _ := NewThrottle(ThrottleConfig{})
	tr2, _ := testTransport(t, TransportConfig{ThrottleFor: func(*http.Request) *Throttle { return th2 }})
	if status, _, _, err := do(t, tr2, get(t, up.url())); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	if s := th2.Snapshot(); s.Requests != 1 || s.Accepts != 1 {
		t.Fatalf("throttle snapshot %+v", s)
	}
}

// TestTransportDrainsAndReuses checks that discarded responses are
// drained and closed: with one connection allowed per host, an undrained
// body would force a new connection for every retry, and an unclosed one
// would block the next attempt forever.
func TestTransportDrainsAndReuses(t *testing.T) {
	answer := func(n int, w http.ResponseWriter, _ *http.Request) {
		if n%3 != 0 {
			w.WriteHeader(503)
			w.Write(bytes.Repeat([]byte("x"), 4096))
			return
		}
		io.WriteString(w, "ok")
	}
	for _, tt := range []struct {
		drain     int64
		wantConns func(int64) bool
	}{
		{0, func(n int64) bool { return n == 1 }},  // default drain: one connection reused throughout
		{-1, func(n int64) bool { return n > 10 }}, // no drain: a new connection per retry
	} {
		up := newUpstream(t, answer)
		base := newBase(t)
		base.MaxConnsPerHost = 1
		tr, _ := testTransport(t, TransportConfig{Base: base, MaxDrainBytes: tt.drain})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for i := range 10 {
			status, _, _, err := do(t, tr, get(t, up.url()).WithContext(ctx))
			if err != nil || status != 200 {
				t.Fatalf("drain %d, request %d: status %d err %v", tt.drain, i, status, err)
			}
		}
		cancel()
		if n := up.conns.Load(); !tt.wantConns(n) {
			t.Errorf("drain %d: %d connections for 10 requests with 2 retries each", tt.drain, n)
		}
	}
}

// TestTransportInboundPolicy runs three layers: a client, a middle service
// that calls the upstream with its own retrying transport, and an upstream
// that always fails. The policy decides how much the middle layer adds.
func TestTransportInboundPolicy(t *testing.T) {
	for _, tt := range []struct {
		policy InboundPolicy
		hits   int64
	}{
		{InboundIgnore, 9},         // 3 x 3
		{InboundNoRetryOnRetry, 5}, // 3 on the first outer attempt, 1 on each retry
		{InboundNoRetry, 3},        // only the outer layer retries
	} {
		up := newUpstream(t, statuses(503))
		inner, _ := testTransport(t, TransportConfig{Inbound: tt.policy})
		middle := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			Propagate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, up.url(), nil)
				resp, err := inner.RoundTrip(req)
				if err != nil {
					w.WriteHeader(502)
					return
				}
				resp.Body.Close()
				w.WriteHeader(resp.StatusCode)
			})).ServeHTTP(w, r)
		})
		outer, _ := testTransport(t, TransportConfig{})
		status, _, _, err := do(t, outer, get(t, middle.url()))
		if err != nil || status != 503 {
			t.Fatalf("policy %d: status %d err %v", tt.policy, status, err)
		}
		if got := up.hits.Load(); got != tt.hits {
			t.Errorf("policy %d: upstream hits %d, want %d", tt.policy, got, tt.hits)
		}
	}
}

func TestTransportMisc(t *testing.T) {
	tr, _ := testTransport(t, TransportConfig{})
	body := &trackedBody{Reader: strings.NewReader("x")}
	_, err := tr.RoundTrip(&http.Request{Method: "PUT", Body: body, Header: http.Header{}})
	if err == nil || !body.closed.Load() {
		t.Fatalf("a request without URL: err %v, body closed %v", err, body.closed.Load())
	}
	// The zero-config transport (default budget, breaker, providers)
	// works end to end, and CloseIdleConnections reaches the base.
	up := newUpstream(t, statuses(503, 200))
	base := newBase(t)
	def, err := NewTransport(TransportConfig{Base: base, BaseBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _, err := do(t, def, get(t, up.url())); err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}
	def.CloseIdleConnections()
	if r := (Reason(200)).String(); r != "unknown" {
		t.Fatalf("Reason(200).String() = %q", r)
	}
	// http.Client works with it, and the body of a custom method too.
	c := &http.Client{Transport: def}
	req, _ := http.NewRequest("PURGE", up.url(), nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// Slowness and deliberate shedding are not failures of the host: they must
// not open the circuit, or a slowdown becomes an outage.
func TestTransportBreakerIgnoresSlownessAndShedding(t *testing.T) {
	cases := []struct {
		name   string
		answer func(int, http.ResponseWriter, *http.Request)
		cfg    TransportConfig
	}{
		{"attempt timeout", func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}, TransportConfig{AttemptTimeout: 5 * time.Millisecond}},
		{"the base transport's timeout", func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}, TransportConfig{Base: &http.Transport{ResponseHeaderTimeout: 5 * time.Millisecond}}},
		{"504 from a proxy", statuses(504), TransportConfig{}},
		{"503 with the no-retry header", func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(NoRetryHeader, NoRetryValue)
			w.WriteHeader(503)
		}, TransportConfig{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, tc.answer)
			cfg := tc.cfg
			cfg.MaxAttempts = 1
			cfg.Breaker = BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: time.Minute}
			tr, _ := testTransport(t, cfg)
			for i := 0; i < 6; i++ {
				_, _, rep, err := do(t, tr, get(t, up.url()))
				if errors.Is(err, ErrCircuitOpen) || rep.Denied == ReasonBreaker || rep.Attempts != 1 {
					t.Fatalf("request %d: %v, report %+v: want one attempt sent, none refused by the breaker", i, err, rep)
				}
			}
			if s, ok := tr.BreakerState(up.host()); !ok || s != gobreaker.StateClosed {
				t.Fatalf("breaker %v after 6 such attempts, want closed", s)
			}
			// A 5 ms attempt can time out before it reaches the host on a
			// loaded machine; the other answers always arrive.
			if cfg.AttemptTimeout == 0 && cfg.Base == nil && up.hits.Load() != 6 {
				t.Fatalf("%d of 6 attempts reached the host", up.hits.Load())
			}
		})
	}
}

// TestTransportThrottleDeniedRetryCostsNoBudget: the throttle is asked
// before the budget, which every host shares: a retry the throttle
// rejects withdraws nothing. (Before the fix, the budget paid first.)
func TestTransportThrottleDeniedRetryCostsNoBudget(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MinRetriesPerSecond: 0.1, RetryRatio: -1}) // 1 retry per 10s
	th, err := NewThrottle(ThrottleConfig{K: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // the backend rejected 10 requests: p = 10/11
		th.Reject()
	}
	up := newUpstream(t, statuses(503))
	// Rand: the first attempt's throttle draw (allowed), the backoff, the
	// retry's throttle draw (rejected).
	seq := []float64{0.999, 0.5, 0}
	i := 0
	tr, _ := testTransport(t, TransportConfig{Budget: b, Throttle: th,
		Rand: func() float64 { v := seq[min(i, len(seq)-1)]; i++; return v }})
	status, _, rep, err := do(t, tr, get(t, up.url()))
	if err != nil || status != 503 || rep.Denied != ReasonThrottle || up.hits.Load() != 1 {
		t.Fatalf("status %d err %v report %+v hits %d; want the 503, retry throttled", status, err, rep, up.hits.Load())
	}
	if s := b.Snapshot(); s.Withdrawals != 0 {
		t.Fatalf("the budget paid %d retries for a retry the throttle rejected", s.Withdrawals)
	}
}

// TestTransportCallerGoneSpendsNoBudget: once the caller is gone, no
// retry can help it, whatever the attempt returned: the retryable
// response is returned as it is and nothing is withdrawn. (Before the
// fix, only an error with the caller gone stopped the retry.)
func TestTransportCallerGoneSpendsNoBudget(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MinRetriesPerSecond: 0.1, RetryRatio: -1})
	ctx, cancel := context.WithCancel(context.Background())
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		cancel() // the caller leaves as the response arrives
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr, _ := testTransport(t, TransportConfig{Base: base, Budget: b})
	status, _, rep, err := do(t, tr, get(t, "http://127.0.0.1:1/").WithContext(ctx))
	if err != nil || status != 503 || rep.Attempts != 1 {
		t.Fatalf("status %d err %v report %+v; want the 503 after 1 attempt", status, err, rep)
	}
	if s := b.Snapshot(); s.Withdrawals != 0 {
		t.Fatalf("a caller gone withdrew %d retries", s.Withdrawals)
	}
}

// TestTransportNilNilBaseWithTracing: a base that returns neither a
// response nor an error breaks the RoundTripper contract; the attempt
// turns it into an error, which is not retried, so that nothing (a
// recording span among others) reads the missing response. (Before the
// fix, RoundTrip panicked with a recording tracer.)
func TestTransportNilNilBaseWithTracing(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	base := roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	tr, _ := testTransport(t, TransportConfig{Base: base, TracerProvider: tp})
	_, _, rep, err := do(t, tr, get(t, "http://127.0.0.1:1/"))
	if !errors.Is(err, errNilResponse) || rep.Attempts != 1 {
		t.Fatalf("err %v report %+v; want errNilResponse after 1 attempt", err, rep)
	}
	if n := len(sr.Ended()); n != 2 {
		t.Fatalf("%d spans ended, want 2 (logical, attempt)", n)
	}
}

// TestTransportNoRetryHeaderAnyValue: a response carrying NoRetryHeader
// with any non-empty value, not only as its first, is not retried.
// (Before the fix, only the first value was read.)
func TestTransportNoRetryHeaderAnyValue(t *testing.T) {
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header()[NoRetryHeader] = []string{"", NoRetryValue}
		w.WriteHeader(503)
	})
	tr, _ := testTransport(t, TransportConfig{})
	_, _, rep, _ := do(t, tr, get(t, up.url()))
	if up.hits.Load() != 1 || rep.Denied != ReasonNoRetryHeader {
		t.Fatalf("503 with %s [\"\", %q]: %d hits, report %+v; want 1 hit, denied no_retry_header",
			NoRetryHeader, NoRetryValue, up.hits.Load(), rep)
	}
}

// TestTransportReportsGetBodyFailure: a retry wanted but impossible
// because GetBody failed is a denial like any other, visible in Report
// (and the metric) as ReasonBodyNotReplayable; the caller still gets the
// last response. (Before the fix, Report.Denied said none.)
func TestTransportReportsGetBodyFailure(t *testing.T) {
	up := newUpstream(t, statuses(503))
	tr, _ := testTransport(t, TransportConfig{})
	req, _ := http.NewRequest(http.MethodPut, up.url(), strings.NewReader("payload"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
	status, _, rep, err := do(t, tr, req)
	if err != nil || status != 503 || rep.Denied != ReasonBodyNotReplayable || up.hits.Load() != 1 {
		t.Fatalf("status %d err %v report %+v hits %d; want the 503, denied body_not_replayable",
			status, err, rep, up.hits.Load())
	}
}

// TestAttemptTimeoutReadsAsATimeout: an attempt that AttemptTimeout ended
// is a timeout for the usual checks a handler makes to answer 504 and
// release its permit as Dropped (errors.Is context.DeadlineExceeded, the
// url.Error's Timeout), never a cancellation, which handlers read as
// "the client went away" (a 499, a permit released Ignored) and which
// would hide the dependency's slowness from the adaptive limit.
func TestAttemptTimeoutReadsAsATimeout(t *testing.T) {
	hang := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done() // as net/http's transport: the context's cause
		return nil, context.Cause(r.Context())
	})
	for _, attempts := range []int{1, 2} {
		tr, _ := testTransport(t, TransportConfig{Base: hang, AttemptTimeout: time.Millisecond, MaxAttempts: attempts})
		_, err := (&http.Client{Transport: tr}).Get("http://upstream.invalid/")
		var ue *url.Error
		if !errors.As(err, &ue) {
			t.Fatalf("attempts %d: err %v, want a *url.Error", attempts, err)
		}
		if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) || !ue.Timeout() {
			t.Errorf("attempts %d: err %q: Is(ErrAttemptTimeout) %v, Is(context.DeadlineExceeded) %v, Timeout() %v; want all true",
				attempts, err, errors.Is(err, ErrAttemptTimeout), errors.Is(err, context.DeadlineExceeded), ue.Timeout())
		}
		if errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "canceled") {
			t.Errorf("attempts %d: err %q reads as a cancellation", attempts, err)
		}
	}
}
