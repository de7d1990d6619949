package shedredis

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The names are spelled out rather than taken from the constants: the
// dashboards query them, so renaming one must break a test.
const (
	leaseMetricName = "shedkit.store.lease.decisions"
	leaseAttrDec    = attribute.Key("shedkit.decision")
	leaseAttrFB     = attribute.Key("shedkit.store.fallback")
)

// leaseCounts collects the lease decisions counter as
// "decision/fallback" -> value, and fails t on a data point whose
// attributes are not exactly the store's name, the decision and the
// fallback flag: the tenant key must never become an attribute.
func leaseCounts(t *testing.T, reader *sdkmetric.ManualReader, store string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != leaseMetricName {
				continue
			}
			if m.Unit != "{decision}" {
				t.Errorf("%s: unit %q, want {decision}", m.Name, m.Unit)
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic {
				t.Fatalf("%s is a %T, want a monotonic Sum[int64] (a counter)", m.Name, m.Data)
			}
			for _, p := range sum.DataPoints {
				name, _ := p.Attributes.Value(AttrStore)
				dec, okD := p.Attributes.Value(leaseAttrDec)
				fb, okF := p.Attributes.Value(leaseAttrFB)
				if p.Attributes.Len() != 3 || name.AsString() != store || !okD || !okF || fb.Type() != attribute.BOOL {
					t.Errorf("%s: attributes %v, want exactly %s=%q, %s and %s (bool)", m.Name, p.Attributes.ToSlice(), AttrStore, store, leaseAttrDec, leaseAttrFB)
				}
				out[dec.AsString()+"/"+strconv.FormatBool(fb.AsBool())] += p.Value
			}
		}
	}
	return out
}

// A tenant at its fleet limit is refused with a 429 that the metrics
// count (rejected, not fallen back), beside the lease it was refused
// for; a request whose context ended counts as cancelled (its 503).
func TestLeaseDecisionsMetric(t *testing.T) {
	p := startRedis(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	c, err := NewConcurrency(Config{Client: p.client(t), Replicas: 3, Timeout: 250 * time.Millisecond, LeaseTTL: time.Minute, MeterProvider: mp, Name: "tenants"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mw, err := ConcurrencyMiddleware(MiddlewareConfig{
		Concurrency: c,
		Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Limit:       1,
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, unblock := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(entered)
			<-unblock
		}
	}))
	serve := func(ctx context.Context, path string) int {
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	held := make(chan int)
	go func() { held <- serve(context.Background(), "/hold") }()
	<-entered
	if code := serve(context.Background(), "/"); code != http.StatusTooManyRequests {
		t.Errorf("a second request of a tenant at its limit of 1: %d, want 429", code)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if code := serve(ended, "/"); code != http.StatusServiceUnavailable {
		t.Errorf("a request whose context ended: %d, want 503", code)
	}
	close(unblock)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the held request: %d, want 200", code)
	}
	got := leaseCounts(t, reader, "tenants")
	want := map[string]int64{"admitted/false": 1, "rejected/false": 1, "cancelled/false": 1}
	if len(got) != len(want) || got["admitted/false"] != 1 || got["rejected/false"] != 1 || got["cancelled/false"] != 1 {
		t.Errorf("%s = %v, want %v", leaseMetricName, got, want)
	}
}

// Without Redis the decisions are taken on this replica's share, and the
// metric says so: the share of a limit of 2 over 2 replicas is 1.
func TestLeaseDecisionsMetricFallback(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rc.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	c, err := NewConcurrency(Config{Client: rc, Replicas: 2, Timeout: 20 * time.Millisecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := c.Acquire(t.Context(), "acme", 2); err == nil {
		t.Fatal("a second lease over the share of 1 granted")
	}
	got := leaseCounts(t, reader, "redis")
	if len(got) != 2 || got["admitted/true"] != 1 || got["rejected/true"] != 1 {
		t.Errorf("%s = %v, want admitted/true 1 and rejected/true 1", leaseMetricName, got)
	}
}

// Counting a decision allocates nothing, whichever the decision: Acquire
// is on every request's path.
func TestLeaseMetricDoesNotAllocate(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	cfg := Config{Name: "tenants", MeterProvider: mp}
	m, err := newLeaseMetrics(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, local := &Lease{}, &Lease{local: true}
	limited, limitedLocal := &LimitError{InFlight: 1}, &LimitError{InFlight: 1, FellBack: true}
	allocs := testing.AllocsPerRun(1000, func() {
		m.record(ctx, lease, nil)
		m.record(ctx, local, nil)
		m.record(ctx, nil, limited)
		m.record(ctx, nil, limitedLocal)
		m.record(ctx, nil, context.Canceled)
		m.record(ctx, nil, context.DeadlineExceeded)
		m.record(ctx, nil, ErrClosed)
	})
	if allocs != 0 {
		t.Fatalf("counting lease decisions allocates %v times", allocs)
	}
	got := leaseCounts(t, reader, "tenants")
	if got["cancelled/false"] != 2*got["admitted/true"] || got["admitted/false"] == 0 || got["rejected/true"] == 0 || len(got) != 5 {
		t.Errorf("%s = %v, want every decision counted, twice as many cancelled, nothing for ErrClosed", leaseMetricName, got)
	}
}

// TestStoreMetricsDoNotAllocate: while the breaker is open a decision
// costs no Redis call, and counting its fallback must not cost an
// allocation either.
func TestStoreMetricsDoNotAllocate(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	cfg := Config{Name: "tenants", MeterProvider: mp, Timeout: time.Millisecond, BreakerFailures: 1, BreakerOpen: time.Hour}
	g, err := newGuard(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("down") }
	if cause := g.do(ctx, OpAllow, fail); cause != CauseError {
		t.Fatalf("first call: cause %q, want %q", cause, CauseError)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if g.do(ctx, OpAllow, fail) != CauseBreakerOpen {
			t.Fatal("the breaker did not open")
		}
	})
	if allocs != 0 {
		t.Fatalf("a fallback while the breaker is open allocates %v times", allocs)
	}
}
