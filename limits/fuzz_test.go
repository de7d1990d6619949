package limits_test

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

var fuzzEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzSamples turns bytes into a stream of samples, 4 bytes each: latency
// (quadratic in the byte, 0 to ~6.5 s), outcome (timed success, drop,
// untimed success with a zero Now as the wall-clock API sends), in-flight
// count and the time that passes before the sample (0 to ~2.5 s).
func fuzzSamples(data []byte, each func(shed.Sample)) {
	now := fuzzEpoch
	for i := 0; i+4 <= len(data); i += 4 {
		lat, kind, inflight, gap := data[i], data[i+1], data[i+2], data[i+3]
		now = now.Add(time.Duration(gap) * 10 * time.Millisecond)
		s := shed.Sample{
			Now:      now,
			Latency:  time.Duration(lat) * time.Duration(lat) * 100 * time.Microsecond,
			Timed:    true,
			InFlight: int(inflight) * (1 + int(kind>>4)),
			Cost:     1 + int64(kind>>6),
		}
		switch kind % 4 {
		case 1:
			s.Dropped = true
		case 2:
			s.Dropped, s.Timed = true, false
		case 3:
			s = shed.Sample{InFlight: s.InFlight, Cost: 1} // untimed success
		}
		each(s)
	}
}

// effectiveRange is the [min, max] a limit is documented to stay in.
func effectiveRange(initial, minL, maxL int) (int, int) {
	if minL == 0 {
		minL = limits.DefaultMinLimit
	}
	if maxL == 0 {
		maxL = max(limits.DefaultMaxLimit, minL, initial)
	}
	return minL, maxL
}

// TestLimitNearMaxInt: a MaxLimit near math.MaxInt, a natural way to write
// "no cap", once made the first window store int64 of a float64 rounded up
// to 2^63 (math.MinInt64, which shed clamped to 1). The constructors now
// reject a MaxLimit above shed.MaxLimit, and shed.MaxLimit itself works.
func TestLimitNearMaxInt(t *testing.T) {
	if _, err := limits.NewGradient(limits.GradientConfig{InitialLimit: math.MaxInt, MaxLimit: math.MaxInt}); !errors.Is(err, limits.ErrInvalidConfig) {
		t.Fatalf("NewGradient with MaxLimit math.MaxInt: %v, want ErrInvalidConfig", err)
	}
	if _, err := limits.NewAIMD(limits.AIMDConfig{MaxLimit: shed.MaxLimit + 1}); !errors.Is(err, limits.ErrInvalidConfig) {
		t.Fatalf("NewAIMD with MaxLimit shed.MaxLimit+1: %v, want ErrInvalidConfig", err)
	}
	g, err := limits.NewGradient(limits.GradientConfig{InitialLimit: shed.MaxLimit, MaxLimit: shed.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	a, err := limits.NewAIMD(limits.AIMDConfig{InitialLimit: shed.MaxLimit, MaxLimit: shed.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	now := fuzzEpoch
	for i := range 40 {
		now = now.Add(100 * time.Millisecond)
		s := shed.Sample{Now: now, Latency: 10 * time.Millisecond, Timed: true, InFlight: 100}
		g.Observe(s)
		a.Observe(s)
		if g.Limit() < 1 || a.Limit() < 1 {
			t.Fatalf("after %d samples: Gradient limit %d, AIMD limit %d", i+1, g.Limit(), a.Limit())
		}
	}
}

// FuzzGradient: NewGradient returns an ErrInvalidConfig error or a
// Gradient whose limit, through any stream of samples, stays within
// [MinLimit, MaxLimit] and whose state stays finite.
func FuzzGradient(f *testing.F) {
	steady := make([]byte, 0, 4*400)
	for i := range 400 {
		// Fast samples at growing in-flight counts, then a slowdown with
		// drops, then recovery.
		lat, kind := byte(10), byte(0)
		if i > 150 && i < 250 {
			lat, kind = 60, byte(i%3)
		}
		steady = append(steady, lat, kind, byte(min(i, 255)), 3)
	}
	f.Add(0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, int64(0), 0, 0, int64(0), 0, 0.0, steady)
	f.Add(5, 2, 50, 1.5, 0.2, 1.5, 0.8, 0.1, 0.9, int64(200*time.Millisecond), 3, 5, int64(100*time.Millisecond), 3, 0.9, steady)
	f.Add(1, 1, 1, 2.0, 1.0, 3.0, 0.5, 0.0, 1.0, int64(0), 1, 1, int64(time.Millisecond), 1, 1.0, steady)
	f.Add(math.MaxInt, 1, math.MaxInt, 0.0, 0.0, 1e300, 0.0, 0.0, 1.0, int64(0), 0, 0, int64(time.Millisecond), 1, 0.0, steady)
	f.Add(0, 0, 0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, int64(0), 0, 0, int64(0), 0, 0.0, steady)        // Tolerance 1: invalid
	f.Add(0, 0, 0, 0.0, math.NaN(), 0.0, 0.0, 0.0, 0.0, int64(0), 0, 0, int64(0), 0, 0.0, steady) // invalid
	f.Add(10, 20, 5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, int64(0), 0, 0, int64(0), 0, 0.0, steady)      // max < min: invalid
	f.Add(0, 0, 0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, int64(-1), -1, 0, int64(-5), -1, 2.0, steady)    // invalid
	f.Fuzz(func(t *testing.T, initial, minL, maxL int, tolerance, smoothing, growth, backoff, dropTol, minUtil float64, ceiling int64, relearn, baseline int, winMin int64, winSamples int, quantile float64, data []byte) {
		cfg := limits.GradientConfig{
			InitialLimit: initial, MinLimit: minL, MaxLimit: maxL,
			Tolerance: tolerance, Smoothing: smoothing, Growth: growth, Backoff: backoff,
			DropTolerance: dropTol, MinUtilization: minUtil, LatencyCeiling: time.Duration(ceiling),
			RelearnWindows: relearn, BaselineWindows: baseline,
			Window: limits.WindowConfig{MinDuration: time.Duration(winMin), MinSamples: winSamples, Quantile: quantile},
		}
		g, err := limits.NewGradient(cfg)
		if err != nil {
			if g != nil || !errors.Is(err, limits.ErrInvalidConfig) {
				t.Fatalf("NewGradient: %v, %v (want nil and ErrInvalidConfig)", g, err)
			}
			return
		}
		lo, hi := effectiveRange(initial, minL, maxL)
		check := func(when string) {
			t.Helper()
			// 0 is a closed limit (at the floor, after a window of drops).
			if n := g.Limit(); (n < lo && !(n == 0 && g.State().Closed)) || n > hi {
				t.Fatalf("%s: limit %d outside [%d, %d] (state %+v)", when, n, lo, hi, g.State())
			}
			st := g.State()
			if math.IsNaN(st.Limit) || math.IsInf(st.Limit, 0) || st.Limit < float64(lo) || st.Limit > float64(hi) {
				t.Fatalf("%s: state limit %v outside [%d, %d]", when, st.Limit, lo, hi)
			}
			if !(st.Spread >= 0) || math.IsInf(st.Spread, 0) || !(st.Background >= 0 && st.Background <= 1) || st.Baseline < 0 || st.Reason.String() == "unknown" {
				t.Fatalf("%s: state %+v", when, st)
			}
		}
		check("new")
		n := 0
		fuzzSamples(data, func(s shed.Sample) {
			g.Observe(s)
			n++
			check("after sample " + strconv.Itoa(n))
		})
	})
}

// FuzzAIMD: as FuzzGradient, for AIMD.
func FuzzAIMD(f *testing.F) {
	steady := make([]byte, 0, 4*300)
	for i := range 300 {
		kind := byte(0)
		if i%40 == 39 {
			kind = 1
		}
		steady = append(steady, byte(5+i%20), kind, byte(min(i, 255)), 5)
	}
	f.Add(0, 0, 0, 0, 0.0, int64(0), 0.0, 0.0, int64(0), 0, 0.0, steady)
	f.Add(4, 2, 30, 2, 0.5, int64(50*time.Millisecond), 0.2, 1.0, int64(100*time.Millisecond), 2, 0.5, steady)
	f.Add(math.MaxInt, 1, math.MaxInt, math.MaxInt, 0.0, int64(0), 0.0, 0.0, int64(time.Millisecond), 1, 0.0, steady)
	f.Add(0, 0, 0, -1, 0.0, int64(0), 0.0, 0.0, int64(0), 0, 0.0, steady) // invalid increase
	f.Add(0, 0, 0, 0, 1.0, int64(0), 0.0, 0.0, int64(0), 0, 0.0, steady)  // Backoff 1: invalid
	f.Add(0, 0, 0, 0, 0.0, int64(-1), 0.0, 0.0, int64(0), 0, 0.0, steady) // no latency signal
	f.Fuzz(func(t *testing.T, initial, minL, maxL, increase int, backoff float64, threshold int64, dropTol, minUtil float64, winMin int64, winSamples int, quantile float64, data []byte) {
		cfg := limits.AIMDConfig{
			InitialLimit: initial, MinLimit: minL, MaxLimit: maxL, Increase: increase,
			Backoff: backoff, LatencyThreshold: time.Duration(threshold), DropTolerance: dropTol, MinUtilization: minUtil,
			Window: limits.WindowConfig{MinDuration: time.Duration(winMin), MinSamples: winSamples, Quantile: quantile},
		}
		a, err := limits.NewAIMD(cfg)
		if err != nil {
			if a != nil || !errors.Is(err, limits.ErrInvalidConfig) {
				t.Fatalf("NewAIMD: %v, %v (want nil and ErrInvalidConfig)", a, err)
			}
			return
		}
		lo, hi := effectiveRange(initial, minL, maxL)
		n := 0
		check := func() {
			t.Helper()
			if l := a.Limit(); (l < lo && !(l == 0 && a.State().Closed)) || l > hi {
				t.Fatalf("after %d samples: limit %d outside [%d, %d]", n, l, lo, hi)
			}
		}
		check()
		fuzzSamples(data, func(s shed.Sample) {
			a.Observe(s)
			n++
			check()
		})
	})
}

// FuzzWindow: NewWindow returns an ErrInvalidConfig error or a Window
// whose summaries are consistent with the samples recorded.
func FuzzWindow(f *testing.F) {
	data := make([]byte, 0, 4*200)
	for i := range 200 {
		data = append(data, byte(i%50), byte(i%4), byte(i%30), byte(i%7))
	}
	f.Add(int64(0), int64(0), 0, 0.0, false, data)
	f.Add(int64(100*time.Millisecond), int64(time.Second), 5, 0.9, true, data)
	f.Add(int64(time.Millisecond), int64(time.Millisecond), 1, 1.0, false, data)
	f.Add(int64(time.Second), int64(time.Millisecond), 0, 0.0, false, data) // max < min: invalid
	f.Add(int64(0), int64(0), 0, math.NaN(), false, data)                   // invalid
	f.Fuzz(func(t *testing.T, minD, maxD int64, minSamples int, quantile float64, ignoreCost bool, data []byte) {
		w, err := limits.NewWindow(limits.WindowConfig{MinDuration: time.Duration(minD), MaxDuration: time.Duration(maxD), MinSamples: minSamples, Quantile: quantile, IgnoreCost: ignoreCost})
		if err != nil {
			if w != nil || !errors.Is(err, limits.ErrInvalidConfig) {
				t.Fatalf("NewWindow: %v, %v", w, err)
			}
			return
		}
		var timed, drops, maxIn int // since the last close
		var maxLat time.Duration
		fuzzSamples(data, func(s shed.Sample) {
			if s.Timed && !s.Dropped {
				timed++
				lat := s.Latency
				if !ignoreCost {
					lat /= time.Duration(s.Cost)
				}
				maxLat = max(maxLat, lat)
			}
			if s.Dropped {
				drops++
			}
			maxIn = max(maxIn, s.InFlight)
			sum, closed := w.Record(s)
			if !closed {
				return
			}
			if sum.Samples != timed || sum.Drops != drops || sum.MaxInFlight > maxIn || sum.MaxInFlight < 0 {
				t.Fatalf("summary %+v, recorded %d timed, %d drops, max in flight %d", sum, timed, drops, maxIn)
			}
			if sum.End.Before(sum.Start) || sum.Latency < 0 || sum.Mean < 0 || sum.Min < 0 || math.IsNaN(sum.MeanInFlight) || sum.MeanInFlight < 0 {
				t.Fatalf("summary %+v", sum)
			}
			if sum.Samples == 0 && (sum.Latency != 0 || sum.Mean != 0 || sum.Min != 0) {
				t.Fatalf("summary without timed samples has latencies: %+v", sum)
			}
			// Quantiles come from a histogram with an error under 3.2%.
			if sum.Samples > 0 && (sum.Mean > maxLat+1 || float64(sum.Latency) > 1.04*float64(maxLat)+1) {
				t.Fatalf("summary %+v above the largest latency recorded (%v)", sum, maxLat)
			}
			timed, drops, maxIn, maxLat = 0, 0, 0, 0
		})
	})
}
