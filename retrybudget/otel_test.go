package retrybudget

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func attrOf(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())

	up := newUpstream(t, statuses(503, 502, 200))
	tr, _ := testTransport(t, TransportConfig{TracerProvider: tp, Propagator: propagation.TraceContext{}})
	status, _, _, err := do(t, tr, get(t, up.url()))
	if err != nil || status != 200 {
		t.Fatalf("status %d err %v", status, err)
	}

	spans := sr.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 1 logical + 3 attempts", len(spans))
	}
	logical, attempts := splitLogicalAndAttemptSpans(t, spans)
	checkLogicalSpan(t, logical)

	up.mu.Lock()
	headers := up.headers
	up.mu.Unlock()
	for i, s := range attempts {
		checkAttemptSpan(t, i, s, logical, headers, up.url())
	}
}

// splitLogicalAndAttemptSpans separates the one internal (logical request)
// span from the client (attempt) spans, failing on anything else.
func splitLogicalAndAttemptSpans(t *testing.T, spans []sdktrace.ReadOnlySpan) (logical sdktrace.ReadOnlySpan, attempts []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindInternal:
			if logical != nil {
				t.Fatal("more than one logical span")
			}
			logical = s
		case trace.SpanKindClient:
			attempts = append(attempts, s)
		default:
			t.Fatalf("unexpected span kind %v", s.SpanKind())
		}
	}
	return logical, attempts
}

// checkLogicalSpan checks the span of a GET served after 503, 502, 200:
// its name, totals and one backoff event per retry.
func checkLogicalSpan(t *testing.T, logical sdktrace.ReadOnlySpan) {
	t.Helper()
	if logical == nil || logical.Name() != "retry GET" {
		t.Fatalf("logical span %v", logical)
	}
	if v, _ := attrOf(logical.Attributes(), attrAttempts); v.AsInt64() != 3 {
		t.Errorf("logical shedkit.retry.attempts = %v", v)
	}
	if v, _ := attrOf(logical.Attributes(), attrStatusCode); v.AsInt64() != 200 {
		t.Errorf("logical status code = %v", v)
	}
	var backoffs int
	for _, e := range logical.Events() {
		if e.Name == eventBackoff {
			backoffs++
			// Full jitter at u = 0.5 of 50ms, then of 100ms.
			want := []float64{0.025, 0.05}[min(backoffs, 2)-1]
			if v, ok := attrOf(e.Attributes, attrDelay); !ok || v.AsFloat64() != want {
				t.Errorf("backoff event %d delay = %v, want %v", backoffs, v, want)
			}
			if v, _ := attrOf(e.Attributes, attrAttempt); v.AsInt64() != int64(backoffs+1) {
				t.Errorf("backoff event %d attempt = %v", backoffs, v)
			}
		}
	}
	if backoffs != 2 {
		t.Errorf("%d backoff events, want 2", backoffs)
	}
}

// checkAttemptSpan checks attempt i (0-based) of a GET to url answered
// 503, 502, 200: its parent, HTTP attributes, error status, and that the
// traceparent the upstream saw (headers[i]) names this span.
func checkAttemptSpan(t *testing.T, i int, s, logical sdktrace.ReadOnlySpan, headers []http.Header, url string) {
	t.Helper()
	wantStatus := []int64{503, 502, 200}
	if s.Name() != "GET" {
		t.Errorf("attempt %d name %q", i, s.Name())
	}
	if s.Parent().SpanID() != logical.SpanContext().SpanID() || s.SpanContext().TraceID() != logical.SpanContext().TraceID() {
		t.Errorf("attempt %d is not a child of the logical span", i)
	}
	attrs := s.Attributes()
	rc, ok := attrOf(attrs, attrResendCount)
	if i == 0 && ok {
		t.Errorf("first attempt carries http.request.resend_count = %v", rc)
	}
	if i > 0 && (!ok || rc.AsInt64() != int64(i)) {
		t.Errorf("attempt %d resend count = %v (%v), want %d", i, rc, ok, i)
	}
	if v, _ := attrOf(attrs, attrStatusCode); v.AsInt64() != wantStatus[i] {
		t.Errorf("attempt %d status %v, want %d", i, v, wantStatus[i])
	}
	if v, _ := attrOf(attrs, attrMethod); v.AsString() != "GET" {
		t.Errorf("attempt %d method %v", i, v)
	}
	if v, _ := attrOf(attrs, attrServerAddr); v.AsString() != "127.0.0.1" {
		t.Errorf("attempt %d server.address %v", i, v)
	}
	if v, _ := attrOf(attrs, attrServerPort); v.AsInt64() == 0 {
		t.Errorf("attempt %d server.port missing", i)
	}
	if v, _ := attrOf(attrs, attrURLFull); v.AsString() != url {
		t.Errorf("attempt %d url.full %v", i, v)
	}
	et, hasET := attrOf(attrs, attrErrorType)
	if i < 2 && (et.AsString() != []string{"503", "502"}[i] || s.Status().Code != codes.Error) {
		t.Errorf("attempt %d error.type %v status %v", i, et, s.Status())
	}
	if i == 2 && (hasET || s.Status().Code == codes.Error) {
		t.Errorf("successful attempt has error.type %v / status %v", et, s.Status())
	}
	// The trace context sent on the wire is the attempt span's.
	want := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(headers[i]))
	if sc := trace.SpanContextFromContext(want); sc.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("attempt %d: traceparent %q does not name the attempt span", i, headers[i].Get("Traceparent"))
	}
}

func TestSpansOnDenialAndErrors(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	empty := mustBudget(t, BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: -1})
	tr, _ := testTransport(t, TransportConfig{TracerProvider: tp, Budget: empty})
	host := strings.TrimPrefix(strings.TrimSuffix(refusedURL(t), "/"), "http://")
	req := get(t, "http://user:secret@"+host+"/")
	if _, _, _, err := do(t, tr, req); err == nil {
		t.Fatal("want an error")
	}
	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error {
			t.Errorf("span %q status %v, want error", s.Name(), s.Status())
		}
		et, _ := attrOf(s.Attributes(), attrErrorType)
		if et.AsString() != "*net.OpError" {
			t.Errorf("span %q error.type %q", s.Name(), et.AsString())
		}
		if s.SpanKind() == trace.SpanKindClient {
			if u, _ := attrOf(s.Attributes(), attrURLFull); u.AsString() != "http://REDACTED:REDACTED@"+host+"/" {
				t.Errorf("url.full %q is not redacted", u.AsString())
			}
			continue
		}
		found := false
		for _, e := range s.Events() {
			if v, _ := attrOf(e.Attributes, attrReason); e.Name == eventDenied && v.AsString() == "budget" {
				found = true
			}
		}
		if !found {
			t.Errorf("no denied event with reason budget on the logical span: %v", s.Events())
		}
	}
}

// sumOf returns the value of an Int64 sum data point with the attribute
// k=v (or any point when k is empty).
func sumOf(t *testing.T, rm metricdata.ResourceMetrics, name string, k attribute.Key, v string) int64 {
	t.Helper()
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if got, ok := p.Attributes.Value(k); k == "" || (ok && got.String() == v) {
						total += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if got, ok := p.Attributes.Value(k); k == "" || (ok && got.String() == v) {
						total += p.Value
					}
				}
			default:
				t.Fatalf("%s has data of type %T", name, m.Data)
			}
		}
	}
	return total
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	// One retry in the budget: floor 0.1/s x 10s.
	b := mustBudget(t, BudgetConfig{Name: "test", RetryRatio: -1, MinRetriesPerSecond: 0.1})
	up := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 2 {
			io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(503)
	})
	tr, _ := testTransport(t, TransportConfig{Name: "api", MeterProvider: mp, Budget: b,
		Breaker: BreakerConfig{ConsecutiveFailures: 2}})
	do(t, tr, get(t, up.url())) // 503, retry, 200: served, a success for the breaker
	do(t, tr, get(t, up.url())) // 503, the budget denies the retry: a failure
	do(t, tr, get(t, up.url())) // the same: the 2nd failed request in a row trips the breaker
	do(t, tr, get(t, up.url())) // breaker open: nothing sent

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		k    attribute.Key
		v    string
		want int64
	}{
		{"shedkit.retry.requests", attrClient, "api", 4},
		{"shedkit.retry.attempts", "", "", 4},
		{"shedkit.retry.attempts", attrResend, "false", 3},
		{"shedkit.retry.attempts", attrResend, "true", 1},
		{"shedkit.retry.denied", attrReason, "budget", 2},  // 2nd and 3rd requests' retries
		{"shedkit.retry.denied", attrReason, "breaker", 1}, // 4th request
		{"shedkit.retry.breaker.transitions", attrBreakerState, "open", 1},
		{"shedkit.retry.budget.balance", attrBudget, "test", 0},
	}
	for _, c := range checks {
		if got := sumOf(t, rm, c.name, c.k, c.v); got != c.want {
			t.Errorf("%s{%s=%s} = %d, want %d", c.name, c.k, c.v, got, c.want)
		}
	}
	// No attribute carries a URL, host or port.
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						switch kv.Key {
						case attrClient, attrReason, attrResend, attrBreakerState:
						default:
							t.Errorf("%s has unexpected attribute %s", m.Name, kv.Key)
						}
					}
				}
			}
		}
	}
}

// TestCountersStartAtZero: a Transport exports its denial reasons and
// breaker transitions from zero, before any count. A series that appears
// with its first count hides that count from rate() and increase(): an
// alert on the first time a breaker opens would not fire.
func TestCountersStartAtZero(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	testTransport(t, TransportConfig{Name: "api", MeterProvider: mp})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					if p.Value != 0 {
						t.Errorf("%s %v = %d before any request", m.Name, p.Attributes.ToSlice(), p.Value)
					}
					points[m.Name]++
				}
			}
		}
	}
	if got, want := points["shedkit.retry.denied"], int(ReasonBodyNotReplayable); got != want {
		t.Errorf("shedkit.retry.denied has %d series before any denial, want one per reason (%d)", got, want)
	}
	if got := points["shedkit.retry.breaker.transitions"]; got != 3 {
		t.Errorf("shedkit.retry.breaker.transitions has %d series before any transition, want 3", got)
	}
}
