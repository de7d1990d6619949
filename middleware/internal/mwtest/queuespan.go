package mwtest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// testQueueSpan: a request that waited in the queue has a child span
// covering its wait, under its own span, whether the wait ended in an
// admission or in a queue timeout; a request that did not wait has none.
func testQueueSpan(t *testing.T, a Adapter) {
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
	l := newLimiter(t, shed.Config{Limit: 1, Classes: []shed.ClassConfig{
		{Name: "interactive", QueueDepth: 1, MaxWait: 30 * time.Second},
		{Name: "batch", QueueDepth: 1, MaxWait: 50 * time.Millisecond},
	}})
	s := a.start(t, Options{Outer: outer, Options: shedhttp.Options{Limiter: l,
		Routes: map[string]string{"/wait": "interactive", "/timeout": "batch"}}}, a.classApp(l))

	s.get("/wait/free", nil) // a free slot: no wait, no queue span
	held, _ := l.TryAcquire(shed.Request{})
	done := make(chan int, 1)
	go func() {
		resp, _ := s.get("/wait/queued", nil)
		done <- resp.StatusCode
	}()
	WaitFor(t, "the request to queue", func() bool { return l.Snapshot().Queued == 1 })
	held.Release(shed.Ignored)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("queued request: status %d, want 200", code)
	}
	held, _ = l.TryAcquire(shed.Request{})
	if resp, _ := s.get("/timeout", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("queue timeout: status %d, want 503", resp.StatusCode)
	}
	held.Release(shed.Ignored)

	checkQueueSpans(t, rec)
	waitIdle(t, l)
}

// checkQueueSpans: the recorded queue spans are the two testQueueSpan made,
// each under its request's span, within it, with the class and the reason.
func checkQueueSpans(t *testing.T, rec *tracetest.SpanRecorder) {
	t.Helper()
	byName := func(name string) sdktrace.ReadOnlySpan {
		for _, sp := range rec.Ended() {
			if sp.Name() == name {
				return sp
			}
		}
		return nil
	}
	WaitFor(t, "the request spans", func() bool { return byName("/timeout") != nil && byName("/wait/queued") != nil })
	var queues []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == shedhttp.SpanQueue {
			queues = append(queues, sp)
		}
	}
	if len(queues) != 2 {
		t.Fatalf("%d queue spans, want 2 (the admitted wait and the timeout)", len(queues))
	}
	for _, c := range []struct{ parent, class, reason string }{
		{"/wait/queued", "interactive", ""},
		{"/timeout", "batch", "queue_timeout"},
	} {
		parent := byName(c.parent)
		var q sdktrace.ReadOnlySpan
		for _, sp := range queues {
			if sp.Parent().SpanID() == parent.SpanContext().SpanID() {
				q = sp
			}
		}
		if q == nil {
			t.Errorf("%s: no queue span under it", c.parent)
			continue
		}
		got := map[string]any{}
		for _, kv := range q.Attributes() {
			got[string(kv.Key)] = kv.Value.AsInterface()
		}
		if got[shedhttp.AttrClass] != c.class || (c.reason != "") != (got[shedhttp.AttrReason] != nil) ||
			(c.reason != "" && got[shedhttp.AttrReason] != c.reason) {
			t.Errorf("%s: queue span attributes %v, want class %s reason %q", c.parent, got, c.class, c.reason)
		}
		if !q.EndTime().After(q.StartTime()) || q.StartTime().Before(parent.StartTime()) || q.EndTime().After(parent.EndTime()) {
			t.Errorf("%s: queue span %v-%v outside its parent %v-%v", c.parent, q.StartTime(), q.EndTime(), parent.StartTime(), parent.EndTime())
		}
	}
}
