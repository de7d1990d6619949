package shedredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

func TestConfigErrors(t *testing.T) {
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	noCtx := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noCtx.Close()
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"Client", Config{Replicas: 1}},
		{"Client", Config{Client: noCtx, Replicas: 1}},
		{"Replicas", Config{Client: ok}},
		{"Timeout", Config{Client: ok, Replicas: 1, Timeout: -1}},
		{"BreakerFailures", Config{Client: ok, Replicas: 1, BreakerFailures: -1}},
		{"BreakerOpen", Config{Client: ok, Replicas: 1, BreakerOpen: -1}},
		{"FallbackMaxKeys", Config{Client: ok, Replicas: 1, FallbackMaxKeys: -1}},
		{"LeaseTTL", Config{Client: ok, Replicas: 1, LeaseTTL: -1}},
		{"LeaseTTL", Config{Client: ok, Replicas: 1, Timeout: time.Second, LeaseTTL: time.Second}},
	} {
		_, err := NewStore(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !contains(err.Error(), tc.field+":") {
			t.Errorf("NewStore(%+v) = %v, want ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
		c, err := NewConcurrency(tc.cfg)
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewConcurrency(%+v) = %v, want ErrInvalidConfig", tc.cfg, err)
		}
	}
	if _, err := ConcurrencyMiddleware(MiddlewareConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ConcurrencyMiddleware({}) = %v, want ErrInvalidConfig", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// Without any Redis at all (nothing listens), every decision falls back to
// the local share, within the budget, and the breaker opens.
func TestNoRedisFallsBack(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	s, err := NewStore(Config{Client: c, Replicas: 4, Timeout: 20 * time.Millisecond, BreakerOpen: time.Minute, MeterProvider: mp, Name: "quotas"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lim := shedhttp.RateLimit{Rate: 40, Burst: 8} // share: 10/s, burst 2
	var allowed int
	for range 10 {
		d := s.Decide(t.Context(), now, 0, "k", lim, 1)
		if !d.FellBack || d.Cause == "" {
			t.Fatalf("decision %+v did not fall back", d)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("allowed %d at once, want the share's burst 2", allowed)
	}
	if d := s.Decide(t.Context(), now, 0, "k", lim, 1); d.Cause != CauseBreakerOpen {
		t.Errorf("after 10 failures the cause is %q, want %q", d.Cause, CauseBreakerOpen)
	}
	if !s.FellBack() {
		t.Error("FellBack false after a fallback")
	}
	// A cost larger than the share's burst is charged as a full bucket.
	if d := s.Decide(t.Context(), now, 0, "cost", lim, 5); !d.Allowed {
		t.Errorf("cost 5 within the fleet's burst 8 refused on an idle key: %+v", d)
	}
	if d := s.Decide(t.Context(), now, 0, "cost", lim, 9); d.Allowed {
		t.Error("cost 9 over the fleet's burst 8 allowed")
	}
	if st := s.Stats(); st.Decisions != 12 || st.FellBack != 12 {
		t.Errorf("stats %+v, want 12 decisions, all fallen back", st)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	var calls uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value(AttrStore); v.AsString() != "quotas" {
						t.Errorf("%s without the store's name: %v", m.Name, p.Attributes)
					}
					k := m.Name
					if v, ok := p.Attributes.Value(AttrCause); ok {
						k += "/" + v.AsString()
					}
					sums[k] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					calls += p.Count
				}
			}
		}
	}
	// 5 calls fail (the breaker opens at 5), the other 7 decisions skip
	// Redis.
	if sums[MetricErrors] != 5 || sums[MetricFallbacks+"/"+CauseBreakerOpen] != 7 ||
		sums[MetricFallbacks+"/"+CauseError]+sums[MetricFallbacks+"/"+CauseTimeout] != 5 || calls != 5 {
		t.Errorf("metrics %v, %d calls timed; want 5 errors, 5 error or timeout fallbacks, 7 breaker_open, 5 calls", sums, calls)
	}
}

// Without Redis, a tenant gets its share of the fleet's concurrency on
// each replica: limit/Replicas, rounded up.
func TestConcurrencyFallbackShare(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	conc, err := NewConcurrency(Config{Client: c, Replicas: 3, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer conc.Close()
	var held []*Lease
	for i := range 4 {
		l, err := conc.Acquire(t.Context(), "t", 10)
		if err != nil || !l.FellBack() {
			t.Fatalf("lease %d of the share 4: %v, %v", i, l, err)
		}
		held = append(held, l)
	}
	_, err = conc.Acquire(t.Context(), "t", 10)
	var le *LimitError
	if !errors.As(err, &le) || !le.FellBack || le.InFlight != 4 || le.RetryAfter != time.Second {
		t.Fatalf("fifth lease: %v (%+v), want a fallen-back LimitError at 4 in flight", err, le)
	}
	if got := conc.InFlightLocal(); got != 4 {
		t.Errorf("InFlightLocal %d, want 4", got)
	}
	held[0].Release()
	held[0].Release()
	if l, err := conc.Acquire(t.Context(), "t", 10); err != nil {
		t.Errorf("after a release: %v", err)
	} else {
		l.Release()
	}
	for _, l := range held[1:] {
		l.Release()
	}
	if got := conc.InFlightLocal(); got != 0 {
		t.Errorf("InFlightLocal %d after every release, want 0", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := conc.Acquire(ctx, "t", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with an ended context: %v, want context.Canceled", err)
	}
	if _, err := conc.Acquire(t.Context(), "t", 0); err == nil {
		t.Error("limit 0 accepted")
	}
}
