package gcl

import (
	"errors"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

var t0 = time.Unix(1_700_000_000, 0)

// recorder is a core.Limit that records what it is told.
type recorder struct {
	limit     int
	calls     []call
	listeners []core.LimitChangeListener
}

type call struct {
	start, rtt int64
	inFlight   int
	didDrop    bool
}

func (r *recorder) EstimatedLimit() int                       { return r.limit }
func (r *recorder) NotifyOnChange(l core.LimitChangeListener) { r.listeners = append(r.listeners, l) }
func (r *recorder) OnSample(start, rtt int64, inFlight int, d bool) {
	r.calls = append(r.calls, call{start, rtt, inFlight, d})
}

func newSource(t *testing.T, l core.Limit, cfg Config) *Source {
	t.Helper()
	s, err := FromCore(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFromCoreErrors(t *testing.T) {
	if _, err := FromCore(nil, Config{}); !errors.Is(err, ErrNilLimit) {
		t.Fatalf("nil limit: %v", err)
	}
	if _, err := FromCore(&recorder{}, Config{RTT: 7}); !errors.Is(err, limits.ErrInvalidConfig) {
		t.Fatalf("bad RTT: %v", err)
	}
	if _, err := FromCore(&recorder{}, Config{Window: limits.WindowConfig{Quantile: 3}}); !errors.Is(err, limits.ErrInvalidConfig) {
		t.Fatalf("bad window: %v", err)
	}
}

// One OnSample per window, in the units the library expects: start in Unix
// ns, rtt in ns (the window's fastest by default), the window's largest
// in-flight count, whether the window had any drop.
func TestSourceForwardsOneSamplePerWindow(t *testing.T) {
	r := &recorder{limit: 10}
	s := newSource(t, r, Config{Window: limits.WindowConfig{MinSamples: 3}})
	s.Observe(shed.Sample{Now: t0})
	s.Observe(shed.Sample{Now: t0.Add(100 * time.Millisecond), Timed: true, Latency: 30 * time.Millisecond, InFlight: 4})
	s.Observe(shed.Sample{Now: t0.Add(200 * time.Millisecond), Dropped: true, InFlight: 9}) // untimed drop
	s.Observe(shed.Sample{InFlight: 12})                                                    // untimed success
	if len(r.calls) != 0 {
		t.Fatalf("forwarded before the window closed: %+v", r.calls)
	}
	s.Observe(shed.Sample{Now: t0.Add(time.Second), Timed: true, Latency: 50 * time.Microsecond, InFlight: 2})
	want := []call{{start: t0.UnixNano(), rtt: 50_000, inFlight: 12, didDrop: true}}
	if len(r.calls) != 1 || r.calls[0] != want[0] {
		t.Fatalf("calls %+v, want %+v", r.calls, want)
	}

	// RTTWindow passes the mean instead.
	r = &recorder{limit: 10}
	s = newSource(t, r, Config{RTT: RTTWindow, Window: limits.WindowConfig{MinSamples: 2}})
	s.Observe(shed.Sample{Now: t0})
	s.Observe(shed.Sample{Now: t0.Add(time.Millisecond), Timed: true, Latency: 10 * time.Millisecond})
	s.Observe(shed.Sample{Now: t0.Add(time.Second), Timed: true, Latency: 30 * time.Millisecond})
	if len(r.calls) != 1 || r.calls[0].rtt != int64(20*time.Millisecond) {
		t.Fatalf("RTTWindow: %+v", r.calls)
	}
}

// A window of drops only borrows the last known rtt; before any is known it
// is skipped (a made-up rtt would corrupt Gradient2's and Vegas' averages).
func TestSourceWindowOfDrops(t *testing.T) {
	r := &recorder{limit: 10}
	s := newSource(t, r, Config{Window: limits.WindowConfig{MinSamples: 1}})
	s.Observe(shed.Sample{Now: t0})
	s.Observe(shed.Sample{Now: t0.Add(time.Second), Dropped: true})
	if len(r.calls) != 0 {
		t.Fatalf("forwarded a window of drops with no rtt known: %+v", r.calls)
	}
	s.Observe(shed.Sample{Now: t0.Add(2 * time.Second), Timed: true, Latency: 7 * time.Millisecond})
	s.Observe(shed.Sample{Now: t0.Add(3 * time.Second), Dropped: true})
	if len(r.calls) != 2 || r.calls[1].rtt != int64(7*time.Millisecond) || !r.calls[1].didDrop {
		t.Fatalf("calls %+v", r.calls)
	}
}

// The limit is cached from notifications: a change made elsewhere (an
// operator's SettableLimit) is seen at once.
func TestSourceCachesNotifiedLimit(t *testing.T) {
	l := limit.NewSettableLimit("x", 7, nil)
	s := newSource(t, l, Config{})
	if s.Limit() != 7 {
		t.Fatalf("initial %d", s.Limit())
	}
	l.SetLimit(42)
	if s.Limit() != 42 {
		t.Fatalf("after SetLimit(42): %d", s.Limit())
	}
	if s.Core() != core.Limit(l) {
		t.Fatal("Core")
	}
}

// The adapter fixes the windowing faults: sub-100 ms samples, few in
// flight and drops in the middle of a window all reach the library's AIMD.
func TestSourceFixesWindowingFaults(t *testing.T) {
	s, err := NewAIMD(Config{Window: limits.WindowConfig{MinSamples: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Limit() != 10 {
		t.Fatalf("initial %d", s.Limit())
	}
	now := t0
	s.Observe(shed.Sample{Now: now})
	for i := range 10 {
		now = now.Add(100 * time.Millisecond)
		// 1 ms work, 3 in flight, one drop in the middle of the window.
		s.Observe(shed.Sample{Now: now, Timed: true, Latency: time.Millisecond, InFlight: 3, Dropped: i == 5})
	}
	if s.Limit() != 9 {
		t.Fatalf("limit %d, want 9 (AIMD backed off on the window's drop)", s.Limit())
	}
}

// A zero latency cannot poison Gradient2 through the adapter.
func TestSourceGuardsZeroRTT(t *testing.T) {
	for _, perSample := range []bool{false, true} {
		s, err := NewGradient2(Config{PerSample: perSample, Window: limits.WindowConfig{MinSamples: 1}})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		s.Observe(shed.Sample{Now: now})
		for range 50 {
			now = now.Add(time.Second)
			s.Observe(shed.Sample{Now: now, Timed: true, InFlight: 20})
			if l := s.Limit(); l < 20 || l > 200 {
				t.Fatalf("per sample %v: limit %d after zero-latency samples", perSample, l)
			}
		}
	}
}

func TestSourcePerSample(t *testing.T) {
	r := &recorder{limit: 5}
	s := newSource(t, r, Config{PerSample: true})
	s.Observe(shed.Sample{Now: t0, Dropped: true, InFlight: 1}) // no rtt known: skipped
	s.Observe(shed.Sample{InFlight: 1})                         // untimed success: nothing to say
	s.Observe(shed.Sample{Now: t0.Add(time.Second), Timed: true, Latency: 3 * time.Millisecond, InFlight: 2})
	s.Observe(shed.Sample{Now: t0.Add(2 * time.Second), Dropped: true, InFlight: 4})
	want := []call{
		{start: t0.Add(time.Second - 3*time.Millisecond).UnixNano(), rtt: int64(3 * time.Millisecond), inFlight: 2},
		{start: t0.Add(2*time.Second - 3*time.Millisecond).UnixNano(), rtt: int64(3 * time.Millisecond), inFlight: 4, didDrop: true},
	}
	if len(r.calls) != 2 || r.calls[0] != want[0] || r.calls[1] != want[1] {
		t.Fatalf("calls\n got %+v\nwant %+v", r.calls, want)
	}
	r.limit = 0
	for _, l := range r.listeners {
		l(-3)
	}
	if s.Limit() != 1 {
		t.Fatalf("a notified limit below 1 must read as 1, got %d", s.Limit())
	}
}

// The constructors carry the library's default tuning.
func TestConstructors(t *testing.T) {
	for name, tc := range map[string]struct {
		new  func(Config) (*Source, error)
		want int
	}{
		"Gradient2": {NewGradient2, 20},
		"Vegas":     {NewVegas, 20},
		"AIMD":      {NewAIMD, 10},
	} {
		s, err := tc.new(Config{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Limit() != tc.want {
			t.Errorf("%s: initial limit %d, want %d", name, s.Limit(), tc.want)
		}
	}
}
