package mwtest

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

// ClosedSource is a shed.Prober whose limit is closed (0): Probe grants
// one request per Every on the clock it is given, the first a whole Every
// after the start NewClosedSource was given.
type ClosedSource struct {
	Every time.Duration

	mu   sync.Mutex
	next time.Time
}

// NewClosedSource returns a closed source whose first probe is due every
// after start.
func NewClosedSource(start time.Time, every time.Duration) *ClosedSource {
	return &ClosedSource{Every: every, next: start.Add(every)}
}

// Limit implements shed.LimitSource: closed.
func (s *ClosedSource) Limit() int { return 0 }

// Observe implements shed.LimitSource; a closed source learns nothing here.
func (s *ClosedSource) Observe(shed.Sample) {}

// Probe implements shed.Prober.
func (s *ClosedSource) Probe(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(s.Every)
	return true
}

// countingObserver counts the limiter's events by kind and reason.
type countingObserver struct {
	mu        sync.Mutex
	rejected  [shed.NumReasons]int
	cancelled int
}

func (o *countingObserver) Observe(e shed.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e.Kind {
	case shed.EventRejected:
		o.rejected[e.Reason]++
	case shed.EventCancelled:
		o.cancelled++
	}
}

func (o *countingObserver) counts(r shed.Reason) (rejected, cancelled int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rejected[r], o.cancelled
}

// testClosed: behind a closed limit a request gets the sanitized 503 with
// a Retry-After and the no-retry header, and is counted as a limit
// rejection; the probe the source grants is served and released once;
// the shedkit.admission.limit gauge reads 0.
func testClosed(t *testing.T, a Adapter) {
	clk := NewFakeClock()
	obs := &countingObserver{}
	l := newLimiter(t, shed.Config{Source: NewClosedSource(clk.Now(), 5*time.Second), Clock: clk.Now, Observer: obs})
	var ran atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		io.WriteString(w, "ok")
	})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l}}, app)
	for i, st := range []struct {
		advance time.Duration
		status  int
	}{
		{0, http.StatusServiceUnavailable},
		{5 * time.Second, http.StatusOK}, // the probe
		{0, http.StatusServiceUnavailable},
		{4 * time.Second, http.StatusServiceUnavailable},
	} {
		clk.Advance(st.advance)
		resp, body := s.get("/", nil)
		if st.status == http.StatusOK {
			if resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Fatalf("request %d, the probe: %d %q, want 200 from the handler", i, resp.StatusCode, body)
			}
			continue
		}
		checkProblem(t, resp, body, st.status, true, "limit", "probe", "closed")
		if ra := resp.Header.Get("Retry-After"); ra != "1" || resp.Header.Get(noRetryHeader) != noRetryValue {
			t.Errorf("request %d: Retry-After %q, %s %q; want 1 (RetryAfterMin) and %q", i, ra, noRetryHeader, resp.Header.Get(noRetryHeader), noRetryValue)
		}
	}
	waitIdle(t, l)
	c := l.Snapshot().Classes[0]
	if rej, _ := obs.counts(shed.ReasonLimit); ran.Load() != 1 || c.Admitted != 1 || c.Released != [3]uint64{1, 0, 0} ||
		c.Rejected[shed.ReasonLimit] != 3 || rej != 3 {
		t.Fatalf("handler ran %d, admitted %d, released %v, %d limit rejections (%d observed); want 1, 1, [1 0 0], 3 (3)",
			ran.Load(), c.Admitted, c.Released, c.Rejected[shed.ReasonLimit], rej)
	}
	if g := limitGauge(t, l); g != 0 {
		t.Fatalf("shedkit.admission.limit = %d while closed, want 0", g)
	}
}

// limitGauge reads l's shedkit.admission.limit gauge through shedotel.
func limitGauge(t *testing.T, l *shed.Limiter) int64 {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := shedotel.New(shedotel.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := m.Register(l)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if g, ok := mt.Data.(metricdata.Gauge[int64]); ok && mt.Name == "shedkit.admission.limit" && len(g.DataPoints) == 1 {
				return g.DataPoints[0].Value
			}
		}
	}
	t.Fatal("no shedkit.admission.limit gauge")
	return -1
}

// testClosedQueuedDeadline: requests that queue behind a closed limit can
// only wait out their deadline (DeadlineHeader's). Each gets the sanitized
// 503 with a Retry-After, and is counted, and observed, as a queue
// timeout: the limiter turned it away. Whenever the request context's
// timer fired before the limiter's own (always behind a limiter clock
// that lags the wall clock, as a coarse cached one does), the limiter
// counted a cancellation, and a closed limit read on the dashboards as
// clients that gave up.
func testClosedQueuedDeadline(t *testing.T, a Adapter) {
	obs := &countingObserver{}
	lagging := func() time.Time { return time.Now().Add(-10 * time.Millisecond) }
	l := newLimiter(t, shed.Config{Source: NewClosedSource(time.Now(), time.Hour), Clock: lagging, Observer: obs,
		Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 4, MaxWait: time.Minute}}})
	s := a.start(t, Options{Options: shedhttp.Options{Limiter: l, DeadlineHeader: shedhttp.ConnectTimeoutHeader}}, a.classApp(l))
	const n = 3
	for range n {
		resp, body := s.get("/", http.Header{shedhttp.ConnectTimeoutHeader: {"50"}})
		checkProblem(t, resp, body, http.StatusServiceUnavailable, true, "deadline", "queue", "cancel")
	}
	c := l.Snapshot().Classes[0]
	if rej, cancelled := obs.counts(shed.ReasonQueueTimeout); c.Rejected[shed.ReasonQueueTimeout] != n || c.Cancelled != 0 || rej != n || cancelled != 0 {
		t.Fatalf("counted %d queue timeouts and %d cancellations (observed %d and %d), want %d and 0",
			c.Rejected[shed.ReasonQueueTimeout], c.Cancelled, rej, cancelled, n)
	}
}
