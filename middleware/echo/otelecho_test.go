package echo_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestWithOtelecho: mounted after otelecho, the middleware annotates
// otelecho's server span (decision, class, reason, the caller's attempt)
// and puts the queue wait under it, over real HTTP on loopback.
func TestWithOtelecho(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	lim, srv := otelechoServer(t, tp)
	defer srv.Close()
	rejectBatchQueueInteractive(t, lim, srv)

	servers, queue := endedSpans(rec)
	b, i := servers["GET /b/:id"], servers["GET /i/:id"]
	if b == nil || i == nil {
		t.Fatalf("otelecho server spans %v, want GET /b/:id and GET /i/:id", servers)
	}
	if a := spanAttrs(b); a[shedhttp.AttrDecision] != shedhttp.DecisionRejected || a[shedhttp.AttrReason] != "limit_exceeded" || a[shedhttp.AttrClass] != "batch" {
		t.Errorf("rejected span: %v", a)
	}
	if a := spanAttrs(i); a[shedhttp.AttrDecision] != shedhttp.DecisionAdmitted || a[shedhttp.AttrClass] != "interactive" || a[shedhttp.AttrAttempt] != int64(2) {
		t.Errorf("admitted span: %v", a)
	}
	if queue == nil || queue.Parent().SpanID() != i.SpanContext().SpanID() {
		t.Errorf("queue span %v, want one under the admitted request's otelecho span", queue)
	}
}

// otelechoServer serves /i/:id (interactive, which may queue) and /b/:id
// (batch) through otelecho, then the middleware, over a limit of 1; the
// caller closes the server.
func otelechoServer(t *testing.T, tp trace.TracerProvider) (*shed.Limiter, *httptest.Server) {
	t.Helper()
	lim, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{
		{Name: "interactive", QueueDepth: 1, MaxWait: 10 * time.Second},
		{Name: "batch"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{
		Limiter: lim, Routes: map[string]string{"/i/": "interactive", "/b/": "batch"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := echov4.New()
	e.Use(otelecho.Middleware("shop", otelecho.WithTracerProvider(tp)), mw)
	e.GET("/i/:id", func(c echov4.Context) error { return c.String(200, "ok") })
	e.GET("/b/:id", func(c echov4.Context) error { return c.String(200, "ok") })
	return lim, httptest.NewServer(e)
}

// rejectBatchQueueInteractive fills the limit: a batch request is then
// rejected, and an interactive one (the caller's second attempt) queues
// and is admitted once the slot is released.
func rejectBatchQueueInteractive(t *testing.T, lim *shed.Limiter, srv *httptest.Server) {
	t.Helper()
	held, _ := lim.TryAcquire(shed.Request{Class: 1})
	if code := getStatus(t, srv, "/b/1", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("batch with the limit full: %d, want 503", code)
	}
	done := make(chan int, 1)
	go func() { done <- getStatus(t, srv, "/i/1", http.Header{"Shedkit-Attempt": {"2"}}) }()
	for lim.Snapshot().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	held.Release(shed.Ignored)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("queued interactive: %d, want 200", code)
	}
}

// getStatus sends GET path with headers h to srv and returns the status.
func getStatus(t *testing.T, srv *httptest.Server, path string, h http.Header) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// endedSpans polls rec for up to 5 s, until two server spans have ended,
// and returns them by name with the queue span.
func endedSpans(rec *tracetest.SpanRecorder) (servers map[string]sdktrace.ReadOnlySpan, queue sdktrace.ReadOnlySpan) {
	servers = map[string]sdktrace.ReadOnlySpan{}
	deadline := time.Now().Add(5 * time.Second)
	for len(servers) < 2 && time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			switch {
			case s.SpanKind() == trace.SpanKindServer:
				servers[s.Name()] = s
			case s.Name() == shedhttp.SpanQueue:
				queue = s
			}
		}
		time.Sleep(time.Millisecond)
	}
	return servers, queue
}

// spanAttrs is s's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}
