package limits

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func TestAIMDDefaults(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := AIMDConfig{
		InitialLimit: DefaultInitialLimit, MinLimit: DefaultMinLimit, MaxLimit: DefaultMaxLimit,
		Increase: DefaultIncrease, Backoff: DefaultBackoff, Growth: DefaultGrowth, MinUtilization: DefaultMinUtilization,
		Window: WindowConfig{MinDuration: DefaultMinWindow, MaxDuration: DefaultMaxWindow, MinSamples: DefaultMinSamples},
	}
	if a.cfg != want {
		t.Fatalf("defaults\n got %+v\nwant %+v", a.cfg, want)
	}
	if a.Limit() != DefaultInitialLimit {
		t.Fatalf("initial limit %d", a.Limit())
	}
}

func TestAIMDConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   AIMDConfig
		field string
	}{
		{AIMDConfig{MinLimit: -1}, "AIMDConfig.MinLimit"},
		{AIMDConfig{MinLimit: 10, MaxLimit: 5}, "AIMDConfig.MaxLimit"},
		{AIMDConfig{InitialLimit: 2000, MaxLimit: 1500}, "AIMDConfig.InitialLimit"},
		{AIMDConfig{Increase: -1}, "AIMDConfig.Increase"},
		{AIMDConfig{Backoff: 1.5}, "AIMDConfig.Backoff"},
		{AIMDConfig{Growth: 0.5}, "AIMDConfig.Growth"},
		{AIMDConfig{Growth: math.Inf(1)}, "AIMDConfig.Growth"},
		{AIMDConfig{Backoff: math.NaN()}, "AIMDConfig.Backoff"},
		{AIMDConfig{MinUtilization: -1}, "AIMDConfig.MinUtilization"},
		{AIMDConfig{DropTolerance: -0.1}, "AIMDConfig.DropTolerance"},
		{AIMDConfig{LatencyThreshold: -1}, "AIMDConfig.LatencyThreshold"},
		{AIMDConfig{Window: WindowConfig{Quantile: 2}}, "AIMDConfig.Window.Quantile"},
	} {
		_, err := NewAIMD(tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("NewAIMD(%+v) = %v, want an ErrInvalidConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}

// Additive increase only while the limit is in use and nothing dropped;
// multiplicative decrease on a drop or a slow window.
func TestAIMDRules(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{InitialLimit: 100, Increase: 5, LatencyThreshold: 50 * time.Millisecond, Window: WindowConfig{MinSamples: 1}})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	a.Observe(shed.Sample{Now: now})
	window := func(s shed.Sample) int {
		now = now.Add(time.Second)
		s.Now = now
		a.Observe(s)
		return a.Limit()
	}
	for _, step := range []struct {
		name string
		s    shed.Sample
		want int
	}{
		{"in use, fast", shed.Sample{Timed: true, Latency: 10 * time.Millisecond, InFlight: 50}, 105},
		{"not in use", shed.Sample{Timed: true, Latency: 10 * time.Millisecond, InFlight: 52}, 105},
		{"slow", shed.Sample{Timed: true, Latency: 60 * time.Millisecond, InFlight: 105}, 94},
		{"drop", shed.Sample{Dropped: true, InFlight: 94}, 85},
		{"in use again", shed.Sample{Timed: true, Latency: 10 * time.Millisecond, InFlight: 85}, 90},
	} {
		if got := window(step.s); got != step.want {
			t.Fatalf("%s: limit %d, want %d", step.name, got, step.want)
		}
	}
}

// TestAIMDSlowStart: from 20, with 1,000 requests in flight if nothing
// limits them, AIMD doubles per window until the first congested window,
// never past twice the in-flight peak, then grows by Increase only.
func TestAIMDSlowStart(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{LatencyThreshold: 15 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(100_000, healthyLatency)
	m.latency = knee(healthyLatency, 500) // 15 ms at 750 in flight
	ramp := m.run(a, 8)
	t.Logf("ramp: %v", ramp)
	if ramp[0] != 40 || ramp[1] != 80 {
		t.Fatalf("slow start %v: want 40, 80, ... (x2 per window in use)", ramp)
	}
	if slices.Max(ramp) < 500 {
		t.Fatalf("slow start %v never reached the knee at 500", ramp)
	}
	cut := -1
	for i := 1; i < len(ramp); i++ {
		if ramp[i] < ramp[i-1] {
			cut = i
			break
		}
	}
	if cut < 0 {
		t.Fatalf("no congestion in %v", ramp)
	}
	after := m.run(a, 20)
	t.Logf("after the first congestion: %v", after)
	for i := 1; i < len(after); i++ {
		if d := after[i] - after[i-1]; d > DefaultIncrease {
			t.Fatalf("after slow start the limit grew by %d in a window (%v), want <= %d", d, after, DefaultIncrease)
		}
	}

	// Growth 1 is Netflix's AIMD: +Increase per window from the start.
	b, err := NewAIMD(AIMDConfig{Growth: 1})
	if err != nil {
		t.Fatal(err)
	}
	m = newModel(100_000, healthyLatency)
	if got := m.run(b, 3); !slices.Equal(got, []int{21, 22, 23}) {
		t.Fatalf("Growth 1: %v, want [21 22 23]", got)
	}
}
