package mwtest

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// DeadlineClient returns an HTTP client that sends the remaining time of
// each request's context in header, through retrybudget's Transport, with
// one attempt and no budget or breaker (so that only the deadline is
// under test). Its connections close when the test ends.
func DeadlineClient(t testing.TB, header string) *http.Client {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Base: base, MaxAttempts: 1, NoBudget: true, DeadlineHeader: header,
		Breaker: retrybudget.BreakerConfig{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

// Get sends a GET to url through c with ctx, and reads the body.
func Get(t testing.TB, c *http.Client, ctx context.Context, url string, header http.Header) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// slowApp counts its runs and takes d for each.
func slowApp(ran *atomic.Int64, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		time.Sleep(d)
		io.WriteString(w, "ok")
	})
}

// testDeadlineTooShort: a client with 100 ms left calls a handler that
// takes 500 ms. The limiter learned that from one earlier call, so the
// request is rejected at once, 503 deadline_too_short, without queueing
// and without running the handler. Without deadline propagation (or
// without the service time in the decision) it ran, and the client gave
// up while it did.
func testDeadlineTooShort(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{Limit: 4, DeadlineMargin: 0.5, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 4, MaxWait: time.Second}}})
	var ran atomic.Int64
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DeadlineHeader: shedhttp.ConnectTimeoutHeader}}, slowApp(&ran, 500*time.Millisecond))
	client := DeadlineClient(t, retrybudget.ConnectTimeoutHeader)
	if resp, _, err := Get(t, client, context.Background(), s.url+"/", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("learning call: %v %v", resp, err)
	}
	waitIdle(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, body, err := Get(t, client, ctx, s.url+"/", nil)
	if err != nil {
		t.Fatalf("no answer before the client's deadline: %v", err)
	}
	checkProblem(t, resp, body, 503, true, "deadline")
	if resp.Header.Get(noRetryHeader) != noRetryValue {
		t.Error("no no-retry header")
	}
	snap := l.Snapshot().Classes[0]
	if ran.Load() != 1 || snap.Rejected[shed.ReasonDeadline] != 1 || snap.Enqueued != 0 || snap.Admitted != 1 {
		t.Fatalf("handler ran %d times, %d deadline rejections, %d queued, %d admitted; want 1, 1, 0, 1",
			ran.Load(), snap.Rejected[shed.ReasonDeadline], snap.Enqueued, snap.Admitted)
	}
}

// testPassedDeadline: a request whose deadline has passed is never
// admitted, whether a trusted peer says so ("0" left) or the server's own
// context deadline has passed.
func testPassedDeadline(t *testing.T, a Adapter) {
	l := newLimiter(t, shed.Config{Limit: 4})
	var ran atomic.Int64
	expired := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Expire") != "" {
				ctx, cancel := context.WithDeadline(r.Context(), time.Now().Add(-time.Millisecond))
				defer cancel()
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
		})
	}
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DeadlineHeader: "x-deadline-ms"}, Outer: expired}, slowApp(&ran, 0))
	for _, h := range []http.Header{{"X-Deadline-Ms": {"0"}}, {"X-Expire": {"1"}}, {"X-Deadline-Ms": {"0"}, "X-Expire": {"1"}}} {
		resp, body := s.get("/", h)
		checkProblem(t, resp, body, 503, true)
	}
	if snap := l.Snapshot().Classes[0]; ran.Load() != 0 || snap.Admitted != 0 || snap.Rejected[shed.ReasonDeadline] != 3 {
		t.Fatalf("ran %d, admitted %d, %d deadline rejections; want 0, 0, 3", ran.Load(), snap.Admitted, snap.Rejected[shed.ReasonDeadline])
	}
}

// testUntrustedDeadline: a deadline header is read only when the
// configuration trusts it, exactly once and well formed; what is read is
// bounded by MaxDeadline and never extends the server's own deadline. The
// handler's context carries it. An ignored header cannot get a request
// rejected: the limiter knows that the handler takes 500 ms, and "1 ms
// left" is ignored.
func testUntrustedDeadline(t *testing.T, a Adapter) {
	own := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Own") != "" {
				ctx, cancel := context.WithTimeout(r.Context(), time.Second)
				defer cancel()
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
		})
	}
	left := func(w http.ResponseWriter, r *http.Request) {
		if dl, ok := r.Context().Deadline(); ok {
			w.Header().Set("X-Left", strconv.FormatInt(time.Until(dl).Milliseconds(), 10))
		}
	}
	for _, tc := range []struct {
		name    string
		trusted string
		header  http.Header
		max     int64 // ms the handler may have, -1: no deadline
	}{
		{"untrusted", "", http.Header{"Connect-Timeout-Ms": {"1"}}, -1},
		{"another header trusted", "X-Deadline-Ms", http.Header{"Connect-Timeout-Ms": {"1"}}, -1},
		{"repeated: the shortest", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"1800", "1200", "x"}}, 1200},
		{"negative", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"-1"}}, -1},
		{"fraction", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"1.5"}}, -1},
		{"grpc format in a millisecond header", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"1m"}}, -1},
		{"huge, bounded", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"9999999999"}}, 2000},
		{"grpc, bounded", "grpc-timeout", http.Header{"Grpc-Timeout": {"99999999H"}}, 2000},
		{"never beyond the server's own", "Connect-Timeout-Ms", http.Header{"Connect-Timeout-Ms": {"1500"}, "X-Own": {"1"}}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, shed.Config{Limit: 4})
			now := time.Now()
			p, _ := l.TryAcquireAt(now.Add(-500*time.Millisecond), shed.Request{})
			p.ReleaseAt(now, shed.Success) // the handler takes 500 ms
			s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DeadlineHeader: tc.trusted, MaxDeadline: maxIf(tc.trusted, 2*time.Second)}, Outer: own}, http.HandlerFunc(left))
			resp, body := s.get("/", tc.header)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d (%s): an ignored header got the request rejected", resp.StatusCode, body)
			}
			got := resp.Header.Get("X-Left")
			switch n, err := strconv.ParseInt(got, 10, 64); {
			case tc.max < 0 && got != "":
				t.Errorf("the handler has %s ms left, want no deadline", got)
			case tc.max >= 0 && (err != nil || n > tc.max || n <= 0):
				t.Errorf("the handler has %q ms left, want at most %d", got, tc.max)
			}
		})
	}
}

func maxIf(header string, d time.Duration) time.Duration {
	if header == "" {
		return 0
	}
	return d
}

// testDeadlineSpans: the server span carries the inbound attempt number
// and the deadline budget, on admission and on rejection.
func testDeadlineSpans(t *testing.T, a Adapter) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	outer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := tp.Tracer("test").Start(r.Context(), r.URL.Path)
			defer span.End()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	l := newLimiter(t, shed.Config{Limit: 4})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DeadlineHeader: shedhttp.EnvoyTimeoutHeader}, Outer: outer}, a.classApp(l))
	s.get("/admitted", http.Header{"Shedkit-Attempt": {"2"}, shedhttp.EnvoyTimeoutHeader: {"5000"}})
	s.get("/rejected", http.Header{"Shedkit-Attempt": {"1"}, shedhttp.EnvoyTimeoutHeader: {"0"}})
	s.get("/plain", http.Header{"Shedkit-Attempt": {"x"}})
	for _, want := range []struct {
		span    string
		attempt any
		budget  [2]float64 // bounds; nil attribute when both are 0
	}{
		{"/admitted", int64(2), [2]float64{4, 5}},
		{"/rejected", int64(1), [2]float64{0, 0.001}},
		{"/plain", nil, [2]float64{}},
	} {
		var attrs map[string]any
		WaitFor(t, "span "+want.span, func() bool {
			for _, sp := range rec.Ended() {
				if sp.Name() == want.span {
					attrs = map[string]any{}
					for _, kv := range sp.Attributes() {
						attrs[string(kv.Key)] = kv.Value.AsInterface()
					}
					return true
				}
			}
			return false
		})
		if attrs[shedhttp.AttrAttempt] != want.attempt {
			t.Errorf("%s: attempt %v, want %v", want.span, attrs[shedhttp.AttrAttempt], want.attempt)
		}
		b, ok := attrs[shedhttp.AttrDeadlineBudget].(float64)
		switch {
		case want.budget == [2]float64{} && attrs[shedhttp.AttrDeadlineBudget] != nil:
			t.Errorf("%s: deadline budget %v, want none", want.span, attrs[shedhttp.AttrDeadlineBudget])
		case want.budget != [2]float64{} && (!ok || b < want.budget[0] || b > want.budget[1]):
			t.Errorf("%s: deadline budget %v, want in %v", want.span, attrs[shedhttp.AttrDeadlineBudget], want.budget)
		}
	}
	waitIdle(t, l)
}
