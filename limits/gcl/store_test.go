package gcl

import (
	"sync"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// steppedLimit is a core.Limit that, like the library's AIMD, raises its
// limit by one on every sample and notifies the change. Its EstimatedLimit
// runs a one-shot hook after reading the limit and before returning it:
// the gap in which another goroutine's change lands when the reader is
// preempted there.
type steppedLimit struct {
	limit     int
	listeners []core.LimitChangeListener
	afterRead func() // run once, then cleared
}

func (l *steppedLimit) EstimatedLimit() int {
	n := l.limit
	if f := l.afterRead; f != nil {
		l.afterRead = nil
		f()
	}
	return n
}

func (l *steppedLimit) NotifyOnChange(f core.LimitChangeListener) {
	l.listeners = append(l.listeners, f)
}

func (l *steppedLimit) OnSample(int64, int64, int, bool) { l.set(l.limit + 1) }

// set changes the limit as an operator (a SettableLimit) or another user of
// the shared core.Limit would.
func (l *steppedLimit) set(n int) {
	l.limit = n
	for _, f := range l.listeners {
		f(n)
	}
}

// TestSourceStaleReadNeverOverwritesNewerLimit: a Source whose read of the
// library's estimate is overtaken by a newer change still reports the
// newer limit. The change comes from another user of the core.Limit, or,
// per sample, from a concurrent Observe.
func TestSourceStaleReadNeverOverwritesNewerLimit(t *testing.T) {
	window := Config{Window: limits.WindowConfig{MinSamples: 1}}
	perSample := Config{PerSample: true}
	for _, tc := range []struct {
		name   string
		cfg    Config
		change func(s *Source, l *steppedLimit)
	}{
		{"window/external change", window, func(_ *Source, l *steppedLimit) { l.set(50) }},
		{"per-sample/external change", perSample, func(_ *Source, l *steppedLimit) { l.set(50) }},
		{"per-sample/concurrent Observe", perSample, func(s *Source, _ *steppedLimit) {
			s.Observe(shed.Sample{Now: t0.Add(2 * time.Second), Timed: true, Latency: time.Millisecond})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &steppedLimit{limit: 10}
			s := newSource(t, l, tc.cfg)
			s.Observe(shed.Sample{Now: t0})
			l.afterRead = func() { tc.change(s, l) }
			s.Observe(shed.Sample{Now: t0.Add(time.Second), Timed: true, Latency: time.Millisecond})
			if l.afterRead != nil {
				t.Fatal("the Source did not read the estimate after its sample")
			}
			if got, want := s.Limit(), l.limit; got != want {
				t.Fatalf("Limit() = %d, the library's estimate is %d: a stale read overwrote a newer change", got, want)
			}
		})
	}
}

// TestFromCoreSeesChangeDuringConstruction: a change made while FromCore
// reads the initial estimate (the core.Limit already in use elsewhere) is
// not lost.
func TestFromCoreSeesChangeDuringConstruction(t *testing.T) {
	l := &steppedLimit{limit: 10}
	l.afterRead = func() { l.set(50) }
	s := newSource(t, l, Config{})
	if s.Limit() != 50 {
		t.Fatalf("Limit() = %d, the library's estimate is 50: the change made during FromCore was lost", s.Limit())
	}
}

// TestSourceConcurrentObserveEndsOnLatestEstimate: with the library's own
// AIMD (which notifies under its lock), concurrent per-sample Observe calls
// leave the Source on the library's final estimate. Not a proof (the bad
// interleaving is rare); TestSourceStaleReadNeverOverwritesNewerLimit
// forces it.
func TestSourceConcurrentObserveEndsOnLatestEstimate(t *testing.T) {
	s, err := NewAIMD(Config{PerSample: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				// Mostly increases, a drop now and then.
				s.Observe(shed.Sample{Now: t0, Timed: true, Latency: time.Millisecond, InFlight: 1 << 20, Dropped: (i+g)%7 == 0})
			}
		})
	}
	wg.Wait()
	if got, want := s.Limit(), min(max(s.Core().EstimatedLimit(), 1), shed.MaxLimit); got != want {
		t.Fatalf("Limit() = %d after the last sample, the library's estimate is %d", got, want)
	}
}

// The tickets wrap after 2^40 estimates; the order must survive it.
func TestNewerAcrossTicketWrap(t *testing.T) {
	const top = 1<<(64-valueBits) - 1 // the last ticket before the wrap
	state := func(ticket uint64, limit int) uint64 { return ticket<<valueBits | uint64(limit) }
	for _, tc := range []struct {
		a, b uint64
		want bool
	}{
		{state(2, 1), state(1, 9), true},
		{state(1, 9), state(2, 1), false},
		{state(1, 9), state(1, 1), false},
		{state(0, 5), state(top, 5), true}, // wrapped
		{state(top, 5), state(0, 5), false},
		{state(1<<38, 5), state(0, 5), true},
	} {
		if got := newer(tc.a, tc.b); got != tc.want {
			t.Errorf("newer(ticket %d, ticket %d) = %v", tc.a>>valueBits, tc.b>>valueBits, got)
		}
	}
}
