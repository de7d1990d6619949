package shedotel_test

import (
	"context"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

// TestRegisterOneAtATime: the series of a Metrics carry only its Name, so
// a second limiter (or the same one twice: a retried init) would add its
// numbers to the first's. The second Register fails with ErrRegistered
// until the first is unregistered, and the in-flight gauge counts once.
func TestRegisterOneAtATime(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, _ := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gw"})
	l, _ := shed.New(shed.Config{Limit: 10, Observer: m})
	other, _ := shed.New(shed.Config{Limit: 70})
	reg, err := m.Register(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range []*shed.Limiter{l, other} {
		if _, err := m.Register(again); !errors.Is(err, shedotel.ErrRegistered) {
			t.Fatalf("second Register: %v, want ErrRegistered", err)
		}
	}
	for i := range 3 {
		if _, err := l.TryAcquireAt(at(i), shed.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	if v := value(t, collect(t, reader)["shedkit.admission.inflight"], shedotel.AttrLimiter.String("gw")); v != 3 {
		t.Errorf("inflight = %d, want 3", v)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	reg, err = m.Register(other)
	if err != nil {
		t.Fatalf("Register after Unregister: %v", err)
	}
	reg.Unregister()
}

// TestRegisterLimitOneAtATime: the same for the limit's decisions, and a
// nil *Gradient (a failed NewGradient's result) registers without a panic
// and reports nothing.
func TestRegisterLimitOneAtATime(t *testing.T) {
	m, _ := shedotel.New(shedotel.Config{MeterProvider: sdkmetric.NewMeterProvider()})
	g, _ := limits.NewGradient(limits.GradientConfig{})
	reg, err := m.RegisterLimit(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterLimit(g); !errors.Is(err, shedotel.ErrRegistered) {
		t.Fatalf("second RegisterLimit: %v, want ErrRegistered", err)
	}
	reg.Unregister()
	var none *limits.Gradient
	if reg, err = m.RegisterLimit(none); err != nil {
		t.Fatalf("RegisterLimit after Unregister: %v", err)
	}
	reg.Unregister()
}

// TestObserveUnknownOutcome: Metrics is a public shed.Observer, and an
// event with an outcome it does not know (a forwarding observer's, or a
// later shed's) is not recorded rather than a panic.
func TestObserveUnknownOutcome(t *testing.T) {
	m, _ := shedotel.New(shedotel.Config{MeterProvider: sdkmetric.NewMeterProvider()})
	m.Observe(shed.Event{Kind: shed.EventReleased, Timed: true, Outcome: shed.Outcome(3)})
}
