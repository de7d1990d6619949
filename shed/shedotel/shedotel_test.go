package shedotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func setup(t *testing.T, cfg shed.Config) (*shed.Limiter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = m
	l, err := shed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := m.Register(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	return l, reader
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != shedotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// value finds the int64 data point whose attributes contain all of kv.
func value(t *testing.T, agg metricdata.Aggregation, kv ...attribute.KeyValue) int64 {
	t.Helper()
	var points []metricdata.DataPoint[int64]
	switch a := agg.(type) {
	case metricdata.Sum[int64]:
		points = a.DataPoints
	case metricdata.Gauge[int64]:
		points = a.DataPoints
	default:
		t.Fatalf("unexpected aggregation %T", agg)
	}
	for _, p := range points {
		match := true
		for _, want := range kv {
			if v, ok := p.Attributes.Value(want.Key); !ok || v != want.Value {
				match = false
			}
		}
		if match {
			return p.Value
		}
	}
	t.Fatalf("no data point with %v in %+v", kv, points)
	return 0
}

func TestMetrics(t *testing.T) {
	l, reader := setup(t, shed.Config{Limit: 2, MaxCost: 100, Classes: []shed.ClassConfig{
		{Name: "interactive", Protected: 0.5, QueueDepth: 2, MaxWait: time.Second},
		{Name: "batch"},
	}})
	a, _ := l.TryAcquireAt(at(0), shed.Request{Class: 1, Cost: 10, Tenant: "acme"})
	b, _ := l.TryAcquireAt(at(0), shed.Request{Class: 0, Cost: 20, Tenant: "acme"})
	if _, err := l.TryAcquireAt(at(1), shed.Request{Class: 1}); err == nil {
		t.Fatal("admitted over the limit")
	}
	w := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, _ := l.EnqueueAt(at(2), shed.Request{Class: 0}, w); !queued {
		t.Fatal("not queued")
	}
	a.ReleaseAt(at(52), shed.Dropped) // grants the waiter after 50 ms
	p, err := w.Result()
	if err != nil {
		t.Fatal(err)
	}

	got := collect(t, reader)
	gw := shedotel.AttrLimiter.String("gw")
	i := shedotel.AttrClass.String("interactive")
	bt := shedotel.AttrClass.String("batch")
	checks := []struct {
		name string
		kv   []attribute.KeyValue
		want int64
	}{
		{"shedkit.admission.limit", []attribute.KeyValue{gw}, 2},
		{"shedkit.admission.cost.budget", []attribute.KeyValue{gw}, 100},
		{"shedkit.admission.inflight", []attribute.KeyValue{gw, i}, 2},
		{"shedkit.admission.inflight", []attribute.KeyValue{gw, bt}, 0},
		{"shedkit.admission.inflight.cost", []attribute.KeyValue{gw, i}, 21},
		{"shedkit.admission.queue.depth", []attribute.KeyValue{gw, i}, 0},
		{"shedkit.admission.tenants", []attribute.KeyValue{gw, i}, 1},
		{"shedkit.admission.tenants", []attribute.KeyValue{gw, bt}, 0},
		{"shedkit.admission.decisions", []attribute.KeyValue{i, shedotel.AttrDecision.String("admitted")}, 2},
		{"shedkit.admission.decisions", []attribute.KeyValue{i, shedotel.AttrDecision.String("queued")}, 1},
		{"shedkit.admission.decisions", []attribute.KeyValue{bt, shedotel.AttrDecision.String("rejected"), shedotel.AttrReason.String("limit_exceeded")}, 1},
		{"shedkit.admission.releases", []attribute.KeyValue{bt, shedotel.AttrOutcome.String("dropped")}, 1},
	}
	for _, c := range checks {
		agg, ok := got[c.name]
		if !ok {
			t.Errorf("%s not reported", c.name)
			continue
		}
		if v := value(t, agg, c.kv...); v != c.want {
			t.Errorf("%s %v = %d, want %d", c.name, c.kv, v, c.want)
		}
	}
	wait, ok := got["shedkit.admission.queue.wait"].(metricdata.Histogram[float64])
	if !ok || len(wait.DataPoints) != 1 || wait.DataPoints[0].Count != 1 || wait.DataPoints[0].Sum != 0.05 {
		t.Errorf("queue wait histogram %+v", got["shedkit.admission.queue.wait"])
	}
	lat, ok := got["shedkit.admission.latency"].(metricdata.Histogram[float64])
	if !ok || len(lat.DataPoints) != 1 || lat.DataPoints[0].Sum != 0.052 {
		t.Errorf("latency histogram %+v", got["shedkit.admission.latency"])
	}
	p.ReleaseAt(at(60), shed.Success)
	b.ReleaseAt(at(60), shed.Success)
}

func TestObserveDoesNotAllocate(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := shedotel.New(shedotel.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := shed.New(shed.Config{Limit: 10, Observer: m})
	if _, err := m.Register(l); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := l.TryAcquireAt(t0, shed.Request{})
		p.ReleaseAt(at(5), shed.Success) // timed: records the latency histogram
	})
	if allocs != 0 {
		t.Fatalf("an observed acquire + release allocates %v times", allocs)
	}
}

func TestRegisterNil(t *testing.T) {
	m, err := shedotel.New(shedotel.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Register(nil); err == nil {
		t.Fatal("Register(nil) succeeded")
	}
}

// RegisterLimit exports an adaptive limit's windows by the reason of its
// decisions.
// registeredGradient returns a default Gradient registered with
// RegisterLimit on Metrics m, and the reader that collects it.
func registeredGradient(t *testing.T) (*limits.Gradient, *shedotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := limits.NewGradient(limits.GradientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := m.RegisterLimit(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	return g, m, reader
}

func TestRegisterLimit(t *testing.T) {
	g, m, reader := registeredGradient(t)
	now := t0
	g.Observe(shed.Sample{Now: now})
	for range 3 { // three windows of slow start
		for range 40 {
			now = now.Add(25 * time.Millisecond)
			g.Observe(shed.Sample{Now: now, Timed: true, Latency: 10 * time.Millisecond, InFlight: g.Limit()})
		}
	}
	got := collect(t, reader)["shedkit.admission.limit.decisions"]
	if v := value(t, got, shedotel.AttrLimiter.String("gw"), shedotel.AttrLimitReason.String("slow-start")); v != 3 {
		t.Fatalf("slow-start windows: %v, want 3", v)
	}
	if _, err := m.RegisterLimit(nil); err == nil {
		t.Fatal("RegisterLimit(nil) accepted")
	}
}

// TestCountersStartAtZero: every rejection reason, the leaks and every
// decision reason of an adaptive limit are exported before their first
// count. A series that appears with its first count hides that count from
// rate() and increase(): an alert on the first leak, or on a single cut,
// would never fire.
func TestCountersStartAtZero(t *testing.T) {
	_, reader := setup(t, shed.Config{Limit: 2, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	got := collect(t, reader)
	for _, class := range []string{"interactive", "batch"} {
		cl := shedotel.AttrClass.String(class)
		for r := shed.Reason(1); r < shed.NumReasons; r++ {
			kv := []attribute.KeyValue{cl, shedotel.AttrDecision.String("rejected"), shedotel.AttrReason.String(r.String())}
			if v := value(t, got["shedkit.admission.decisions"], kv...); v != 0 {
				t.Errorf("%s rejected %s = %d, want 0", class, r, v)
			}
		}
		if v := value(t, got["shedkit.admission.releases"], cl, shedotel.AttrOutcome.String("leaked")); v != 0 {
			t.Errorf("%s leaked = %d, want 0", class, v)
		}
	}

	_, _, reader2 := registeredGradient(t)
	decisions := collect(t, reader2)["shedkit.admission.limit.decisions"]
	for _, reason := range []string{"cut-drops", "cut-latency", "relearn", "hold"} {
		if v := value(t, decisions, shedotel.AttrLimitReason.String(reason)); v != 0 {
			t.Errorf("limit reason %s = %d, want 0", reason, v)
		}
	}
}
