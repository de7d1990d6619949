package limits

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newWin(t *testing.T, cfg WindowConfig) *Window {
	t.Helper()
	w, err := NewWindow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func timed(now time.Time, lat time.Duration, inFlight int) shed.Sample {
	return shed.Sample{Now: now, Latency: lat, Timed: true, InFlight: inFlight}
}

func TestWindowClosesAtMinDurationWithMinSamples(t *testing.T) {
	w := newWin(t, WindowConfig{MinDuration: time.Second, MinSamples: 3})
	steps := []struct {
		at     time.Duration
		closes bool
	}{
		{0, false},                      // opens the window
		{500 * time.Millisecond, false}, // too early
		{time.Second, true},             // 3 samples, 1 s
	}
	for _, s := range steps {
		_, ok := w.Record(timed(at(s.at), 10*time.Millisecond, 1))
		if ok != s.closes {
			t.Fatalf("sample at %v: closed %v, want %v", s.at, ok, s.closes)
		}
	}
	// Too few samples at MinDuration: the window stays open.
	w.Record(timed(at(1500*time.Millisecond), 10*time.Millisecond, 1))
	if _, ok := w.Record(timed(at(2*time.Second), 10*time.Millisecond, 1)); ok {
		t.Fatal("closed with 2 of 3 samples")
	}
	sum, ok := w.Record(timed(at(2100*time.Millisecond), 10*time.Millisecond, 1))
	if !ok || sum.Samples != 3 || !sum.Start.Equal(at(time.Second)) || !sum.End.Equal(at(2100*time.Millisecond)) {
		t.Fatalf("third sample: %+v %v", sum, ok)
	}
}

func TestWindowClosesAtMaxDurationWithFewSamples(t *testing.T) {
	w := newWin(t, WindowConfig{MinDuration: time.Second, MaxDuration: 5 * time.Second, MinSamples: 100})
	w.Record(timed(at(0), time.Millisecond, 1))
	for i := 1; i < 5; i++ {
		if _, ok := w.Record(timed(at(time.Duration(i)*time.Second), time.Millisecond, 1)); ok {
			t.Fatalf("closed at %ds with %d samples", i, i+1)
		}
	}
	sum, ok := w.Record(shed.Sample{Now: at(5 * time.Second), Dropped: true, InFlight: 7})
	if !ok || sum.Samples != 5 || sum.Drops != 1 || sum.MaxInFlight != 7 {
		t.Fatalf("at MaxDuration: %+v %v", sum, ok)
	}
}

// A window lasts at least twice its fastest latency, so that slow work has
// a chance to finish inside it.
func TestWindowLastsTwiceItsFastestLatency(t *testing.T) {
	w := newWin(t, WindowConfig{MinDuration: time.Second, MaxDuration: time.Minute, MinSamples: 1})
	w.Record(shed.Sample{Now: at(0)})
	if _, ok := w.Record(timed(at(time.Second), 2*time.Second, 1)); ok {
		t.Fatal("closed after 1 s with a 2 s sample")
	}
	if _, ok := w.Record(timed(at(3999*time.Millisecond), 2*time.Second, 1)); ok {
		t.Fatal("closed before 4 s")
	}
	if sum, ok := w.Record(timed(at(4*time.Second), 3*time.Second, 1)); !ok || sum.Min != 2*time.Second || sum.Mean != 7*time.Second/3 {
		t.Fatalf("at 4 s: %+v %v", sum, ok)
	}
}

// Every latency counts: zero and sub-millisecond samples are not thrown
// away, and drops do not enter the latency statistics (their own mean is
// DropMean).
func TestWindowStatistics(t *testing.T) {
	w := newWin(t, WindowConfig{MinSamples: 1})
	w.Record(shed.Sample{Now: at(0)})
	lat := []time.Duration{0, 50 * time.Microsecond, 99 * time.Millisecond, 10 * time.Millisecond}
	for i, l := range lat {
		w.Record(timed(at(time.Duration(i)*time.Millisecond), l, 10+i))
	}
	w.Record(shed.Sample{Now: at(10 * time.Millisecond), Latency: time.Hour, Timed: true, Dropped: true, InFlight: 3})
	w.Record(shed.Sample{Dropped: true, InFlight: 50}) // untimed drop, no clock
	w.Record(shed.Sample{InFlight: 60})                // untimed success, no clock
	sum, ok := w.Record(timed(at(time.Second), 40*time.Millisecond, 1))
	if !ok {
		t.Fatal("window did not close")
	}
	want := WindowSummary{
		Start: at(0), End: at(time.Second),
		Samples: 5, Drops: 2,
		Mean: (50*time.Microsecond + 149*time.Millisecond) / 5, Min: 0,
		MaxInFlight: 60,
		// In flight at the timed successes and the drops, not the untimed
		// success: (10+11+12+13 + 3 + 50 + 1) / 7.
		MeanInFlight: 100.0 / 7,
		// The timed drop's latency, apart; the untimed one has none.
		DropMean: time.Hour, TimedDrops: 1,
		// Admitted since the window opened at 0: the successes of 0 and
		// 50 us at 0 and 1 ms, and the one of 40 ms at 1 s.
		Fresh: 3,
	}
	want.Latency = want.Mean
	if !sum.Start.Equal(want.Start) || !sum.End.Equal(want.End) {
		t.Fatalf("bounds %v..%v", sum.Start, sum.End)
	}
	sum.Start, sum.End, want.Start, want.End = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	// The relative standard error of the mean of the five timed
	// successes, from squares summed in units of 1,024 ns: within 1%.
	all := append(lat, 40*time.Millisecond)
	var s1, s2 float64
	for _, l := range all {
		s1 += float64(l)
		s2 += float64(l) * float64(l)
	}
	n := float64(len(all))
	mean := s1 / n
	exact := math.Sqrt((s2-n*mean*mean)/(n-1)/n) / mean
	if math.Abs(sum.RelErr-exact) > 0.01*exact {
		t.Errorf("RelErr %v, want %v within 1%%", sum.RelErr, exact)
	}
	sum.RelErr = 0
	// The median (10 ms) and its error from the quartiles (50 us and
	// 40 ms), through the histogram's buckets: within 3.2%.
	if math.Abs(float64(sum.Median)/float64(10*time.Millisecond)-1) > 0.032 {
		t.Errorf("Median %v, want 10ms within 3.2%%", sum.Median)
	}
	if want := 1.2533 * math.Log(40/0.05) / 1.349 / math.Sqrt(5); math.Abs(sum.MedianErr-want) > 0.05 {
		t.Errorf("MedianErr %v, want %v", sum.MedianErr, want)
	}
	sum.Median, sum.MedianErr = 0, 0
	if sum != want {
		t.Fatalf("summary\n got %+v\nwant %+v", sum, want)
	}
}

func TestRelErr(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lat   []time.Duration
		check func(float64) bool
	}{
		{"one sample: unknown", []time.Duration{time.Millisecond}, func(e float64) bool { return e == 0 }},
		{"under 10 us: unknown", []time.Duration{time.Microsecond, 2 * time.Microsecond}, func(e float64) bool { return e == 0 }},
		{"no spread: exact", []time.Duration{time.Second, time.Second, time.Second}, func(e float64) bool { return e > 0 && e < 1e-6 }},
		{"halves: 1/3", []time.Duration{time.Second, 2 * time.Second}, func(e float64) bool { return math.Abs(e-1.0/3) < 0.001 }},
		{"ten minutes", []time.Duration{10 * time.Minute, 20 * time.Minute}, func(e float64) bool { return math.Abs(e-1.0/3) < 0.001 }},
	} {
		w := newWin(t, WindowConfig{MinSamples: 1, MinDuration: time.Hour * 10})
		w.Record(shed.Sample{Now: at(0)})
		for i, l := range tc.lat[:len(tc.lat)-1] {
			w.Record(timed(at(time.Duration(i)*time.Millisecond), l, 1))
		}
		sum, ok := w.Record(timed(at(20*time.Hour), tc.lat[len(tc.lat)-1], 1))
		if !ok {
			t.Fatalf("%s: window did not close", tc.name)
		}
		if !tc.check(sum.RelErr) {
			t.Errorf("%s: RelErr %v", tc.name, sum.RelErr)
		}
	}
}

// Latency counts per unit of cost, so that a few large requests do not read
// as congestion; IgnoreCost keeps raw latencies.
func TestWindowCostNormalization(t *testing.T) {
	samples := []shed.Sample{
		{Now: at(0), Latency: 100 * time.Millisecond, Timed: true, Cost: 100}, // 1 ms per unit
		{Now: at(1), Latency: 2 * time.Second, Timed: true, Cost: 1000},       // 2 ms per unit
		{Now: at(2), Latency: 3 * time.Millisecond, Timed: true, Cost: 1},     // 3 ms
		{Now: at(time.Second), Latency: 4 * time.Millisecond, Timed: true},    // cost 0: as 1
	}
	for _, tc := range []struct {
		ignore   bool
		mean     time.Duration
		min, max time.Duration
	}{
		{false, (1 + 2 + 3 + 4) * time.Millisecond / 4, 3 * time.Millisecond, 0},
		{true, (100 + 2000 + 3 + 4) * time.Millisecond / 4, 3 * time.Millisecond, 0},
	} {
		w := newWin(t, WindowConfig{MinSamples: 1, IgnoreCost: tc.ignore})
		var sum WindowSummary
		var ok bool
		for _, s := range samples {
			sum, ok = w.Record(s)
		}
		if !ok || sum.Mean != tc.mean || sum.Latency != tc.mean || sum.Min != tc.min {
			t.Errorf("IgnoreCost %v: closed %v, mean %v latency %v min %v; want mean %v min %v",
				tc.ignore, ok, sum.Mean, sum.Latency, sum.Min, tc.mean, tc.min)
		}
	}
}

func TestWindowQuantile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		w := newWin(t, WindowConfig{Quantile: q, MinSamples: 1})
		w.Record(shed.Sample{Now: at(0)})
		var lats []time.Duration
		for i := range 5000 {
			l := time.Duration(r.ExpFloat64() * float64(20*time.Millisecond))
			lats = append(lats, l)
			w.Record(timed(at(time.Duration(i)*time.Microsecond), l, 1))
		}
		l := time.Duration(0)
		lats = append(lats, l)
		sum, ok := w.Record(timed(at(time.Second), l, 1))
		if !ok {
			t.Fatal("not closed")
		}
		slices.Sort(lats)
		exact := lats[int(math.Ceil(q*float64(len(lats))))-1]
		if rel := math.Abs(float64(sum.Latency-exact)) / float64(exact); rel > 1.0/32 {
			t.Errorf("p%v = %v, exact %v: error %.3f over 1/32", q*100, sum.Latency, exact, rel)
		}
	}
}

// Drops only: the window closes at MinDuration once it has MinSamples
// drops, with no latency statistics.
func TestWindowOfDrops(t *testing.T) {
	w := newWin(t, WindowConfig{MinSamples: 2, Quantile: 0.5})
	w.Record(shed.Sample{Now: at(0)})
	w.Record(shed.Sample{Now: at(time.Millisecond), Dropped: true, Timed: true, Latency: time.Second})
	sum, ok := w.Record(shed.Sample{Now: at(time.Second), Dropped: true})
	if !ok || sum.Drops != 2 || sum.Samples != 0 || sum.Latency != 0 || sum.Min != 0 || sum.Mean != 0 {
		t.Fatalf("%+v %v", sum, ok)
	}
}

// Untimed successes carry no time: they never open or close a window.
func TestWindowZeroNowNeverCloses(t *testing.T) {
	w := newWin(t, WindowConfig{MinSamples: 1})
	for range 100 {
		if _, ok := w.Record(shed.Sample{InFlight: 5}); ok {
			t.Fatal("closed by a sample without time")
		}
	}
	if w.start.Load() != notStarted {
		t.Fatal("opened by a sample without time")
	}
}

func TestWindowClockJumps(t *testing.T) {
	w := newWin(t, WindowConfig{MinSamples: 1, MaxDuration: 10 * time.Second})
	w.Record(timed(at(time.Hour), time.Millisecond, 1))
	// Slightly out of order: normal, nothing happens.
	if _, ok := w.Record(timed(at(time.Hour-time.Second), time.Millisecond, 1)); ok {
		t.Fatal("closed by an out-of-order sample")
	}
	// The clock went back an hour: the window restarts there instead of
	// waiting an hour.
	if _, ok := w.Record(timed(at(0), time.Millisecond, 1)); ok {
		t.Fatal("closed by a clock jump")
	}
	sum, ok := w.Record(timed(at(time.Second), time.Millisecond, 1))
	if !ok || sum.Samples != 4 || !sum.Start.Equal(at(0)) {
		t.Fatalf("after the jump: %+v %v", sum, ok)
	}
	// An idle gap longer than MaxDuration restarts the window at the next
	// sample rather than closing a window that spans the gap.
	w.Record(shed.Sample{Now: at(time.Minute)}) // an untimed sample with time: no count
	if _, ok := w.Record(timed(at(time.Minute+500*time.Millisecond), time.Millisecond, 1)); ok {
		t.Fatal("closed half a second after an idle gap")
	}
}

// Concurrent recorders: every sample lands in exactly one window.
func TestWindowConcurrentConservation(t *testing.T) {
	w := newWin(t, WindowConfig{MinDuration: time.Millisecond, MinSamples: 1, Quantile: 0.9})
	const goroutines, per = 8, 5000
	var (
		clock     atomic.Int64 // one clock, read out of order by the goroutines
		mu        sync.Mutex
		samples   int
		drops     int
		wg        sync.WaitGroup
		sumCloses int
	)
	record := func(s shed.Sample) {
		if sum, ok := w.Record(s); ok {
			mu.Lock()
			samples += sum.Samples
			drops += sum.Drops
			sumCloses++
			mu.Unlock()
		}
	}
	for range goroutines {
		wg.Go(func() {
			for i := range per {
				// Time moves forward on one clock; the goroutines record
				// their samples slightly out of order, as releases do.
				now := at(time.Duration(clock.Add(1)) * 10 * time.Microsecond)
				record(shed.Sample{Now: now, Latency: time.Duration(i), Timed: true, InFlight: i, Dropped: i%10 == 0})
			}
		})
	}
	wg.Wait()
	record(shed.Sample{Now: at(time.Hour), Timed: true}) // closes the last window
	wantDrops := goroutines * per / 10
	if samples != goroutines*per-wantDrops+1 || drops != wantDrops {
		t.Fatalf("windows held %d samples and %d drops, want %d and %d", samples, drops, goroutines*per-wantDrops+1, wantDrops)
	}
	// How many windows close depends on the scheduler: a closer descheduled
	// while it holds the lock makes every other sample skip its close, and a
	// sample read long before it is recorded restarts the window. Both keep
	// the counts, which is what this test checks; it needs only some
	// windows to have closed while the others recorded.
	if sumCloses < 2 {
		t.Fatalf("only %d windows closed", sumCloses)
	}
}

func TestWindowConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   WindowConfig
		field string
	}{
		{WindowConfig{MinDuration: -1}, "WindowConfig.MinDuration"},
		{WindowConfig{MaxDuration: -1}, "WindowConfig.MaxDuration"},
		{WindowConfig{MinDuration: time.Minute}, ""}, // MaxDuration defaults to MinDuration
		{WindowConfig{MinDuration: time.Second, MaxDuration: time.Millisecond}, "WindowConfig.MaxDuration"},
		{WindowConfig{MinSamples: -1}, "WindowConfig.MinSamples"},
		{WindowConfig{Quantile: -0.1}, "WindowConfig.Quantile"},
		{WindowConfig{Quantile: math.NaN()}, "WindowConfig.Quantile"},
	} {
		_, err := NewWindow(tc.cfg)
		if tc.field == "" {
			if err != nil {
				t.Errorf("NewWindow(%+v): %v", tc.cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("NewWindow(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	prev := -1
	check := func(v uint64) {
		i := histIndex(v)
		if i < prev || i >= histBuckets {
			t.Fatalf("index(%d) = %d after %d", v, i, prev)
		}
		prev = i
		lo, w := histLower(i)
		if i < histBuckets-1 && (v < lo || v >= lo+w) {
			t.Fatalf("%d in bucket %d = [%d, %d)", v, i, lo, lo+w)
		}
		if i < histBuckets-1 && v > 0 {
			if rel := math.Abs(float64(histValue(i))-float64(v)) / float64(v); rel > 1.0/32 {
				t.Fatalf("%d reported as %d: error %.4f", v, histValue(i), rel)
			}
		}
	}
	for v := uint64(0); v < 5000; v++ {
		check(v)
	}
	for v := uint64(5000); v < 1<<45; v += v/97 + 1 {
		check(v)
	}
	if histIndex(math.MaxUint64) != histBuckets-1 || histIndex(1<<histMaxExp) != histBuckets-1 || histIndex(1<<histMaxExp-1) != histBuckets-1 {
		t.Fatal("large values must share the last bucket")
	}
	if histIndex(1<<(histMaxExp-1)-1) == histBuckets-1 {
		t.Fatal("last bucket too wide")
	}
}

// A window counts the timed drops that failed no slower than the previous
// window's median success: errors, since a timeout outlasts every success.
func TestWindowCountsFastDrops(t *testing.T) {
	ms := time.Millisecond
	w := newWin(t, WindowConfig{MinSamples: 1})
	drop := func(now time.Time, lat time.Duration) shed.Sample {
		return shed.Sample{Now: now, Latency: lat, Timed: true, Dropped: true, InFlight: 1}
	}
	// The first window has no median before it: no drop is fast.
	w.Record(timed(at(0), 10*ms, 1))
	w.Record(drop(at(ms), ms))
	sum, ok := w.Record(timed(at(time.Second), 10*ms, 1))
	if !ok || sum.TimedDrops != 1 || sum.FastDrops != 0 {
		t.Fatalf("first window: %+v %v", sum, ok)
	}
	// Against a 10 ms median: three errors (1 ms, 9 ms, and 10 ms like
	// the successes), two timeouts at a 50 ms deadline, a drop at 11 ms
	// and an untimed drop, which has no latency.
	for i, lat := range []time.Duration{ms, 9 * ms, 10 * ms, 11 * ms, 50 * ms, 50 * ms} {
		w.Record(drop(at(time.Second+time.Duration(i)*ms), lat))
	}
	w.Record(shed.Sample{Dropped: true, InFlight: 1})
	sum, ok = w.Record(timed(at(2*time.Second), 10*ms, 1))
	if !ok || sum.Drops != 7 || sum.TimedDrops != 6 || sum.FastDrops != 3 {
		t.Fatalf("second window: %+v %v", sum, ok)
	}
}

// TestWindowDropCountsUnderConcurrency: Record is safe for concurrent
// use, and every closed window's counts nest: FastDrops <= TimedDrops <=
// Drops, whatever the interleaving (run with -race).
func TestWindowDropCountsUnderConcurrency(t *testing.T) {
	w, _ := NewWindow(WindowConfig{MinDuration: time.Millisecond, MinSamples: 1})
	base := time.Unix(1e9, 0)
	var clock, bad atomic.Int64
	var wg sync.WaitGroup
	for k := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(k), 11))
			for range 20000 {
				now := base.Add(time.Duration(clock.Add(int64(r.IntN(50) * 1000))))
				s := shed.Sample{Now: now, Latency: time.Millisecond, Timed: true, Dropped: r.IntN(2) == 0, InFlight: 5, Cost: 1}
				if sum, ok := w.Record(s); ok && (sum.TimedDrops > sum.Drops || sum.FastDrops > sum.TimedDrops) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d windows whose drop counts do not nest", n)
	}
}

// TestZeroWindowRecordsNothing: a Window not made by NewWindow ignores
// samples instead of panicking, as a zero Gradient or AIMD does.
func TestZeroWindowRecordsNothing(t *testing.T) {
	var w Window
	s := shed.Sample{Now: time.Unix(1, 0), Timed: true, Latency: time.Millisecond, InFlight: 3, Cost: 1}
	for range 30 {
		s.Now = s.Now.Add(100 * time.Millisecond)
		if _, closed := w.Record(s); closed {
			t.Fatal("a zero Window closed a window")
		}
	}
}
