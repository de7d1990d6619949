package sim

import (
	"math"
	"slices"
	"testing"
	"time"
)

// tinyTune is small enough for a tune of a few candidates in seconds: two
// classes at about 85% of the upstream's capacity.
func tinyTune() *Scenario {
	return &Scenario{
		Name: "tiny", Duration: 30 * time.Second, Warmup: 5 * time.Second,
		Classes: []Class{
			{Name: "interactive", Rate: 150, Timeout: time.Second},
			{Name: "batch", Rate: 150, Timeout: 2 * time.Second},
		},
		Upstream: Upstream{Capacity: 20, ServiceTime: Dist{Kind: LogNormal, Median: float64(50 * time.Millisecond), Sigma: 0.5}, Degradation: 0.5},
	}
}

func variant(t *testing.T, sc *Scenario, suffix string) *Scenario {
	t.Helper()
	vs, err := StressVariants(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Name == sc.Name+suffix {
			return v
		}
	}
	t.Fatalf("no variant %s", suffix)
	return nil
}

// TestStressVariantsShape checks what each variant changes, on a fitted-
// like staircase schedule with a ramp, and that the original is intact.
func TestStressVariantsShape(t *testing.T) {
	sc := tinyTune()
	sc.Duration = 60 * time.Second
	sc.Classes[0].Schedule = []RateChange{{At: 15 * time.Second, Rate: 200}, {At: 25 * time.Second, Rate: 100, Ramp: 10 * time.Second}, {At: 50 * time.Second, Rate: 120}}
	sc.Classes[1].Users, sc.Classes[1].Rate = 10, 0
	orig := cloneScenario(sc, "", Span{})
	win := Span{At: 20 * time.Second, For: 20 * time.Second}
	tests := []struct {
		suffix string
		check  func(t *testing.T, v *Scenario)
	}{
		{"", func(t *testing.T, v *Scenario) {
			if v.Trigger != nil || len(v.Upstream.Events) != 0 {
				t.Errorf("healthy variant changed: trigger %v, events %v", v.Trigger, v.Upstream.Events)
			}
		}},
		{"-slowdown", func(t *testing.T, v *Scenario) {
			want := []UpstreamEvent{{At: win.At, For: win.For, Slowdown: TuneSlowdown}}
			if !slices.Equal(v.Upstream.Events, want) || *v.Trigger != win {
				t.Errorf("events %v trigger %v, want %v at %v", v.Upstream.Events, v.Trigger, want, win)
			}
		}},
		{"-spike", func(t *testing.T, v *Scenario) {
			was, _ := buildRate(orig.Classes[0].Rate, orig.Classes[0].Schedule, "")
			now, err := buildRate(v.Classes[0].Rate, v.Classes[0].Schedule, "")
			if err != nil {
				t.Fatal(err)
			}
			for s := 0.5; s < 60; s += 0.5 {
				want := was.at(s)
				if s >= win.At.Seconds() && s < win.End().Seconds() {
					want *= TuneSpike
				}
				if got := now.at(s); math.Abs(got-want) > 1e-9 {
					t.Errorf("rate at %vs = %v, want %v", s, got, want)
				}
			}
			if v.Classes[1].Users != 10 {
				t.Errorf("closed-loop class changed: %d users", v.Classes[1].Users)
			}
		}},
		{"-retry-storm", func(t *testing.T, v *Scenario) {
			r := v.Classes[0]
			if r.Retry.MaxAttempts != TuneStormAttempts || r.AttemptTimeout != time.Second/TuneStormAttempts || r.Retry.HonorNoRetry {
				t.Errorf("retry %+v attempt timeout %v", r.Retry, r.AttemptTimeout)
			}
			if len(v.Upstream.Events) != 1 || v.Upstream.Events[0].Slowdown != TuneSlowdown || v.Upstream.Events[0].For != win.For/2 {
				t.Errorf("events %v", v.Upstream.Events)
			}
		}},
	}
	for _, tt := range tests {
		t.Run("variant"+tt.suffix, func(t *testing.T) { tt.check(t, variant(t, sc, tt.suffix)) })
	}
	if sc.Classes[0].Retry.MaxAttempts != 0 || len(sc.Upstream.Events) != 0 || len(sc.Classes[0].Schedule) != 3 {
		t.Errorf("the original scenario was modified: %+v", sc)
	}
}

// TestStressSlowdownMultipliesServiceTime runs the slowdown variant of a
// lightly loaded constant-time upstream: latency in the window is the
// service time times TuneSlowdown.
func TestStressSlowdownMultipliesServiceTime(t *testing.T) {
	sc := &Scenario{Name: "light", Duration: 30 * time.Second, Warmup: 5 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 50, Timeout: 2 * time.Second}},
		Upstream: Upstream{Capacity: 100, ServiceTime: Const(float64(20 * time.Millisecond))}}
	p, _ := ParsePolicy("none")
	r, err := Run(variant(t, sc, "-slowdown"), p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	if math.Abs(s.HealthyP99-0.020) > 0.002 || math.Abs(s.TriggerP99-TuneSlowdown*0.020) > 0.01 {
		t.Errorf("healthy p99 %v, trigger p99 %v: want 20ms and %vx", s.HealthyP99, s.TriggerP99, TuneSlowdown)
	}
}

func TestStressVariantsTooShort(t *testing.T) {
	sc := tinyTune()
	sc.Duration, sc.Warmup = 3*time.Second, 2*time.Second
	if _, err := StressVariants(sc); err == nil {
		t.Error("a 3 s scenario with a 2 s warm-up got a stress window")
	}
}
