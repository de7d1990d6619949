package limits

import (
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// prober is what Gradient and AIMD are to shed: a LimitSource that may
// close.
type prober interface {
	shed.Prober
	Decisions(func(reason string, windows uint64))
}

func decisionsOf(p prober, reason string) uint64 {
	var n uint64
	p.Decisions(func(r string, w uint64) {
		if r == reason {
			n = w
		}
	})
	return n
}

// A dependency that serves nothing in time, below an unused limit: the
// callers stopped waiting at their deadlines, so the six requests in
// flight are all there is of the work it holds. The limit falls below
// them at once, rather than waiting for work to fill a limit of 20.
func TestDeadWindowCutsBelowTheWorkInFlight(t *testing.T) {
	for _, src := range learnedPair(t, 20, 6) {
		src.f.window(0, 30, 6, nil)
		src.f.now = src.f.now.Add(time.Millisecond) // closes the window
		src.f.src.Observe(shed.Sample{Now: src.f.now, Dropped: true, InFlight: 6})
		if lim := src.f.src.Limit(); lim > 3 || reasonOf(src.f.src) != ReasonCutDrops {
			t.Errorf("%s: after a window of 30 drops with 6 in flight: limit %d (%v), want <= 3 (cut-drops)",
				src.name, lim, reasonOf(src.f.src))
		}
	}
}

// A window that served nothing has no latency or throughput for the
// episode of congestion it falls in: the cut goes on with that episode,
// its knee and best throughput, rather than a new one that a window of
// recovering latency would end at once (four replicas sharing seven
// servers, one dead window each in their first seconds: AIMD's next
// windows regrew where they held, and the replicas retried for the rest
// of the run).
func TestDeadWindowKeepsTheEpisode(t *testing.T) {
	ms := time.Millisecond
	ep := episode{active: true, inFlight: 40, xBest: 40 / float64(20*ms), knee: 30, kneeLat: float64(15 * ms)}
	for _, src := range inEpisode(t, 20, ep) {
		src.f.window(0, 30, 20, nil)
		src.f.now = src.f.now.Add(time.Millisecond) // closes the window
		src.f.src.Observe(shed.Sample{Now: src.f.now, Dropped: true, InFlight: 20})
		got := episodeOf(src.f.src)
		if reasonOf(src.f.src) != ReasonCutDrops || !got.active || got.knee != ep.knee || got.xBest != ep.xBest {
			t.Errorf("%s: after a dead window in an episode: %v, episode %+v; want cut-drops in the episode %+v",
				src.name, reasonOf(src.f.src), got, ep)
		}
	}
}

// episodeOf returns the congestion episode of a Gradient or an AIMD.
func episodeOf(src shed.LimitSource) episode {
	switch l := src.(type) {
	case *Gradient:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.st.ep
	case *AIMD:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ep
	}
	return episode{}
}

// At the floor, a window that served nothing closes the limit: shed
// admits one probe per Window.MinDuration, a dropped probe puts the next
// one a whole interval after its end, and a success reopens the limit at
// its floor.
func TestDeadWindowAtTheFloorCloses(t *testing.T) {
	for _, src := range learnedPair(t, 1, 1) {
		f, p := src.f, closeAtFloor(t, src)
		closed := f.now
		steps := []struct {
			at   time.Duration
			want bool
		}{
			{999 * time.Millisecond, false}, // a window after the close
			{time.Second, true},
			{time.Second, false}, // claimed
			{1999 * time.Millisecond, false},
		}
		for _, st := range steps {
			if got := p.Probe(closed.Add(st.at)); got != st.want {
				t.Fatalf("%s: Probe at close+%v = %v, want %v", src.name, st.at, got, st.want)
			}
		}
		// The probe is dropped at close+1.5s: nothing before close+2.5s.
		p.Observe(shed.Sample{Now: closed.Add(1500 * time.Millisecond), Dropped: true, InFlight: 1})
		if p.Probe(closed.Add(2499*time.Millisecond)) || !p.Probe(closed.Add(2500*time.Millisecond)) {
			t.Fatalf("%s: the probe after a dropped one is not due a window after its end", src.name)
		}
		if p.Limit() != 0 {
			t.Fatalf("%s: a dropped probe reopened the limit", src.name)
		}
		p.Observe(shed.Sample{Now: closed.Add(2600 * time.Millisecond), Timed: true, Latency: 100 * time.Millisecond, InFlight: 1})
		if p.Limit() != 1 || reasonOf(p) != ReasonReopen || decisionsOf(p, "reopen") != 1 || decisionsOf(p, "close") != 1 {
			t.Fatalf("%s: after a successful probe: limit %d (%v), closes %d, reopens %d; want 1 (reopen), 1 and 1",
				src.name, p.Limit(), reasonOf(p), decisionsOf(p, "close"), decisionsOf(p, "reopen"))
		}
		if p.Probe(closed.Add(10 * time.Second)) {
			t.Fatalf("%s: Probe granted while open", src.name)
		}
	}
}

// A limit that is closed when a limiter is made on it (a second limiter
// on a shared limit, made during an outage) is a limit: shed.New takes
// it, the limiter admits the probes only and opens with it. A zero
// Gradient or AIMD is still refused.
func TestNewLimiterOnAClosedLimit(t *testing.T) {
	for _, src := range learnedPair(t, 1, 1) {
		p := closeAtFloor(t, src)
		lim, err := shed.New(shed.Config{Source: p})
		if err != nil {
			t.Fatalf("%s: shed.New on a closed limit: %v", src.name, err)
		}
		at := src.f.now.Add(time.Second)
		if lim.Limit() != 0 {
			t.Fatalf("%s: limiter limit %d on a closed source, want 0", src.name, lim.Limit())
		}
		if _, err := lim.TryAcquireAt(at, shed.Request{}); err != nil {
			t.Fatalf("%s: the probe due a window after the close was refused: %v", src.name, err)
		}
		if _, err := lim.TryAcquireAt(at, shed.Request{}); err == nil {
			t.Fatalf("%s: a second request admitted in the probe's interval", src.name)
		}
	}
	for _, zero := range []shed.LimitSource{&Gradient{}, &AIMD{}} {
		if _, err := shed.New(shed.Config{Source: zero}); !errors.Is(err, shed.ErrInvalidConfig) {
			t.Errorf("%T: shed.New on a zero value: %v, want ErrInvalidConfig", zero, err)
		}
	}
}

// learnedPair returns a Gradient and an AIMD that learned a 10 ms
// dependency, at limit lim with inFlight in flight in each window.
func learnedPair(t *testing.T, lim, inFlight int) []fedLimit {
	t.Helper()
	ms := time.Millisecond
	cfg := WindowConfig{}
	g := newGradient(t, GradientConfig{InitialLimit: lim, MaxLimit: lim, Window: cfg})
	a, err := NewAIMD(AIMDConfig{InitialLimit: lim, MaxLimit: lim, Window: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var out []fedLimit
	for _, p := range []fedLimit{{"Gradient", newFeed(g)}, {"AIMD", newFeed(a)}} {
		for range 30 {
			p.f.window(100, 0, inFlight, constant(10*ms))
		}
		if got := p.f.src.Limit(); got < min(lim, inFlight+1) {
			t.Fatalf("%s: limit %d after healthy windows, want at least %d", p.name, got, min(lim, inFlight+1))
		}
		out = append(out, p)
	}
	return out
}

// A wall clock that steps back after the close (an NTP correction) must
// not hold the limit closed until it catches up: as the limiter treats a
// clock that went back, it counts as no time passed, and the next probe is
// due at most one interval after the step.
func TestClosedLimitProbesAfterClockStepsBack(t *testing.T) {
	for _, src := range learnedPair(t, 1, 1) {
		f, p := src.f, closeAtFloor(t, src)
		back := f.now.Add(-time.Hour)
		p.Probe(back) // sees the step
		if !p.Probe(back.Add(time.Second)) {
			t.Errorf("%s: no probe a window after the clock stepped back an hour", src.name)
		}
	}
}

// closeAtFloor feeds a limit at its floor a window of drops only, and
// checks that it closed.
func closeAtFloor(t *testing.T, src fedLimit) prober {
	t.Helper()
	f, p := src.f, src.f.src.(prober)
	f.window(0, 12, 1, nil)
	f.now = f.now.Add(time.Millisecond) // closes the window
	p.Observe(shed.Sample{Now: f.now, Dropped: true, InFlight: 1})
	if lim := p.Limit(); lim != 0 || reasonOf(p) != ReasonClose {
		t.Fatalf("%s: at the floor, after a window of drops only: limit %d (%v), want 0 (close)", src.name, lim, reasonOf(p))
	}
	return p
}
