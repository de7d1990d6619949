package gcl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// feed passes n 1 s windows of 100 samples (one per 10 ms) at latency
// lat(window), with the limit in use, to s; a window with drop set has one
// drop. It returns the time after the last window, to chain calls. A
// window closes on the sample after its 100th (1 s after its first), so
// the last window fed stays open until the next call.
func feed(s *Source, from time.Time, n int, lat func(w int) time.Duration, drop bool) time.Time {
	now := from
	for w := range n {
		for i := range 100 {
			now = now.Add(10 * time.Millisecond)
			s.Observe(shed.Sample{Now: now, Timed: true, Latency: lat(w), InFlight: s.Limit(), Dropped: drop && i == 50})
		}
	}
	return now
}

func steady(int) time.Duration { return 10 * time.Millisecond }

// resolve fills in each algorithm's defaults, and the defaults give way to
// the values given.
func TestTuningResolve(t *testing.T) {
	for _, tc := range []struct {
		d       tuningDefaults
		in      Tuning
		initial int
		minL    int
		maxL    int
	}{
		{gradient2Defaults, Tuning{}, 20, 20, 200},
		{vegasDefaults, Tuning{}, 20, 1, 1000},
		{aimdDefaults, Tuning{}, 10, 1, 0},
		{gradient2Defaults, Tuning{InitialLimit: 500}, 500, 20, 500}, // max raised to initial
		{gradient2Defaults, Tuning{MinLimit: 300}, 300, 300, 300},    // max raised to min, initial clamped
		{gradient2Defaults, Tuning{MaxLimit: 10}, 10, 10, 10},        // min lowered to max
		{gradient2Defaults, Tuning{InitialLimit: 500, MaxLimit: 2000}, 500, 20, 2000},
		{vegasDefaults, Tuning{MaxLimit: 5}, 5, 1, 5},          // initial clamped
		{aimdDefaults, Tuning{InitialLimit: 5000}, 5000, 1, 0}, // still uncapped
		{aimdDefaults, Tuning{MaxLimit: 5000}, 10, 1, 5000},
	} {
		r, err := tc.in.resolve(tc.d)
		if err != nil {
			t.Errorf("%s %+v: %v", tc.d.alg, tc.in, err)
			continue
		}
		if r.InitialLimit != tc.initial || r.MinLimit != tc.minL || r.MaxLimit != tc.maxL {
			t.Errorf("%s %+v: resolved %+v, want initial %d, min %d, max %d", tc.d.alg, tc.in, r, tc.initial, tc.minL, tc.maxL)
		}
	}
}

func TestTuningErrors(t *testing.T) {
	g2, vegas, aimd := NewGradient2Tuned, NewVegasTuned, NewAIMDTuned
	for _, tc := range []struct {
		name  string
		new   func(Config, Tuning) (*Source, error)
		t     Tuning
		field string
	}{
		{"negative initial", g2, Tuning{InitialLimit: -1}, "Tuning.InitialLimit"},
		{"negative min", g2, Tuning{MinLimit: -1}, "Tuning.MinLimit"},
		{"negative max", aimd, Tuning{MaxLimit: -1}, "Tuning.MaxLimit"},
		{"max above shed.MaxLimit", vegas, Tuning{MaxLimit: shed.MaxLimit + 1}, "Tuning.MaxLimit"},
		{"default max lifted past shed.MaxLimit", g2, Tuning{InitialLimit: shed.MaxLimit + 1}, "Tuning.InitialLimit"},
		{"uncapped initial past shed.MaxLimit", aimd, Tuning{InitialLimit: shed.MaxLimit + 1}, "Tuning.InitialLimit"},
		{"min above max", g2, Tuning{MinLimit: 50, MaxLimit: 40}, "Tuning.MaxLimit"},
		{"initial above max", g2, Tuning{InitialLimit: 300, MaxLimit: 250}, "Tuning.InitialLimit"},
		{"initial below min", g2, Tuning{InitialLimit: 30, MinLimit: 40}, "Tuning.InitialLimit"},
		{"Vegas min", vegas, Tuning{MinLimit: 5}, "Tuning.MinLimit"},
		{"AIMD min", aimd, Tuning{MinLimit: 5}, "Tuning.MinLimit"},
		{"Gradient2 probe", g2, Tuning{NoProbe: true}, "Tuning.NoProbe"},
		{"AIMD probe", aimd, Tuning{NoProbe: true}, "Tuning.NoProbe"},
	} {
		s, err := tc.new(Config{}, tc.t)
		if s != nil || !errors.Is(err, limits.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: %v, %v; want an ErrInvalidConfig naming %s", tc.name, s, err, tc.field)
		}
	}
}

// The zero Tuning is the library's default tuning: the same limit, window
// after window, as the library's default constructors.
func TestTuningZeroIsDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		tuned func() (*Source, error)
		lib   func() (*Source, error)
	}{
		"Gradient2": {
			func() (*Source, error) { return NewGradient2Tuned(Config{}, Tuning{}) },
			func() (*Source, error) { return FromCore(limit.NewDefaultGradient2Limit(Name, nil, nil), Config{}) },
		},
		"Vegas": {
			func() (*Source, error) { return NewVegasTuned(Config{}, Tuning{NoProbe: true}) },
			func() (*Source, error) {
				return FromCore(limit.NewVegasLimitWithRegistry(Name, 20, nil, 1000, 1.0, nil, nil, nil, nil, nil, 1<<31-1, nil, nil), Config{})
			},
		},
		"AIMD": {
			func() (*Source, error) { return NewAIMDTuned(Config{}, Tuning{}) },
			func() (*Source, error) { return FromCore(limit.NewDefaultAIMDLimit(Name, nil), Config{}) },
		},
	} {
		a, err := tc.tuned()
		if err != nil {
			t.Fatal(err)
		}
		b, err := tc.lib()
		if err != nil {
			t.Fatal(err)
		}
		// Healthy, then ten-fold slower with drops, then healthy again.
		lat := func(w int) time.Duration {
			if w >= 20 && w < 30 {
				return 100 * time.Millisecond
			}
			return 10 * time.Millisecond
		}
		seen := map[int]bool{}
		for w := range 40 {
			seen[a.Limit()] = true
			feed(a, t0.Add(time.Duration(w)*time.Second), 1, func(int) time.Duration { return lat(w) }, w >= 20 && w < 25)
			feed(b, t0.Add(time.Duration(w)*time.Second), 1, func(int) time.Duration { return lat(w) }, w >= 20 && w < 25)
			if a.Limit() != b.Limit() {
				t.Fatalf("%s: window %d: tuned limit %d, library default %d", name, w, a.Limit(), b.Limit())
			}
		}
		if len(seen) < 3 {
			t.Errorf("%s: the limit took %d values in 40 windows: the comparison is vacuous", name, len(seen))
		}
	}
}

// Started warm with a raised maximum, Gradient2 starts at the initial
// limit and grows past its default maximum of 200; with a floor it does
// not sink below it.
func TestTuningGradient2(t *testing.T) {
	s, err := NewGradient2Tuned(Config{}, Tuning{InitialLimit: 500, MaxLimit: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if s.Limit() != 500 {
		t.Fatalf("initial limit %d, want 500", s.Limit())
	}
	feed(s, t0, 20, steady, false)
	if s.Limit() <= 500 {
		t.Errorf("limit after 20 healthy windows %d, want > 500 (default max 200)", s.Limit())
	}

	s, err = NewGradient2Tuned(Config{}, Tuning{InitialLimit: 100, MinLimit: 50})
	if err != nil {
		t.Fatal(err)
	}
	now := feed(s, t0, 10, steady, false)
	feed(s, now, 60, func(int) time.Duration { return 200 * time.Millisecond }, false)
	if s.Limit() != 50 {
		t.Errorf("limit after 60 windows at 20 x the latency %d, want the floor 50", s.Limit())
	}
}

// Vegas starts at the initial limit, grows without queueing, and stops at
// its maximum.
func TestTuningVegas(t *testing.T) {
	s, err := NewVegasTuned(Config{}, Tuning{InitialLimit: 500, MaxLimit: 600, NoProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Limit() != 500 {
		t.Fatalf("initial limit %d, want 500", s.Limit())
	}
	feed(s, t0, 30, steady, false)
	if s.Limit() != 600 {
		t.Errorf("limit after 30 healthy windows %d, want the maximum 600", s.Limit())
	}
}

// The library's AIMD has no maximum: the Source caps what it reports, and
// the library's estimate stops one increase above the cap, because the
// in-flight count, held to the cap by the limiter, no longer reaches it.
func TestTuningAIMDMax(t *testing.T) {
	s, err := NewAIMDTuned(Config{}, Tuning{InitialLimit: 10, MaxLimit: 12})
	if err != nil {
		t.Fatal(err)
	}
	now := feed(s, t0, 10, steady, false)
	if s.Limit() != 12 || s.Core().EstimatedLimit() != 13 {
		t.Fatalf("after 10 windows at the limit: limit %d, library %d; want 12 and 13", s.Limit(), s.Core().EstimatedLimit())
	}
	// A drop backs off from the library's estimate: 13 x 0.9 = 11 (the
	// second window with a drop is still open).
	feed(s, now, 2, steady, true)
	if s.Limit() != 11 {
		t.Errorf("after a window with a drop: limit %d, want 11", s.Limit())
	}
}
