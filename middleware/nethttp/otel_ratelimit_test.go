package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

// TestRateLimitedInDecisionsMetric wires the middleware as Options.Observer
// documents (the limiter's shedotel.Metrics as the observer of the
// middleware's own rejections) and checks that the 429s it answers show in
// shedkit.admission.decisions with reason rate_limited: the dashboard's
// rejection panels and the shedding alert read nothing else.
func TestRateLimitedInDecisionsMetric(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	metrics, err := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := shed.New(shed.Config{Limit: 10, Observer: metrics})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := metrics.Register(lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{
		Limiter:    lim,
		Observer:   metrics,
		RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: rate.Every(time.Hour), Burst: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	codes := map[int]int{}
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		codes[w.Code]++
	}
	if codes[http.StatusOK] != 1 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("status codes %v, want one 200 and two 429", codes)
	}
	got := decisionCount(t, reader, "rejected", "rate_limited")
	if got != 2 {
		t.Errorf("shedkit.admission.decisions{decision=rejected, reason=rate_limited} = %d, want 2 (the 429s answered)", got)
	}
	if n := decisionCount(t, reader, "admitted", ""); n != 1 {
		t.Errorf("admitted = %d, want 1", n)
	}
}

// decisionCount sums the decisions counter's points of decision (and
// reason, when not empty).
func decisionCount(t *testing.T, r *sdkmetric.ManualReader, decision, reason string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "shedkit.admission.decisions" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				d, _ := p.Attributes.Value(shedotel.AttrDecision)
				rs, _ := p.Attributes.Value(shedotel.AttrReason)
				if d == attribute.StringValue(decision) && (reason == "" || rs == attribute.StringValue(reason)) {
					n += p.Value
				}
			}
		}
	}
	return n
}
