package shed_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// These tests check that misuse of the core API degrades gracefully: the
// packed state word never wraps and never goes below zero, whatever the
// caller does with copies of a Permit.

// copyCase is a limiter shape and the way its permits are taken and given
// back, so that every release path is exercised: timed and untimed,
// observed and quiet, one class and several, tracked and not.
type copyCase struct {
	name string
	cfg  shed.Config
	req  shed.Request
	// wall uses the wall-clock API on a fake clock with thinned sampling,
	// so that the permits are untimed, released on the quick path, and
	// unguarded: only the floor of the state word catches their copies.
	wall bool
}

func copyCases() []copyCase {
	two := []shed.ClassConfig{{Name: "hi", Protected: 0.5}, {Name: "lo"}}
	return []copyCase{
		{name: "explicit time", cfg: shed.Config{Limit: 2}},
		{name: "wall clock, untimed, quiet", cfg: shed.Config{Limit: 2}, wall: true},
		{name: "observed", cfg: shed.Config{Limit: 2, Observer: &recorder{}}},
		{name: "wall clock, untimed, observed", cfg: shed.Config{Limit: 2, Observer: &recorder{}}, wall: true},
		{name: "adaptive source", cfg: shed.Config{Source: newFakeSource(2)}},
		{name: "classes and a cost budget", cfg: shed.Config{Limit: 2, MaxCost: 10, Classes: two}, req: shed.Request{Class: 1, Cost: 3}},
		{name: "classes, wall clock", cfg: shed.Config{Limit: 2, Classes: two}, req: shed.Request{Class: 1}, wall: true},
		{name: "tracked", cfg: shed.Config{Limit: 2, TrackLeaks: true}},
		{name: "tracked, wall clock", cfg: shed.Config{Limit: 2, TrackLeaks: true}, wall: true},
	}
}

// exact reports whether the case tells every copy apart: tracked or
// guarded (timed) permits.
func (c copyCase) exact() bool { return c.cfg.TrackLeaks || !c.wall }

// harness takes and gives back permits the way a copyCase says.
type harness struct {
	t   *testing.T
	l   *shed.Limiter
	clk *fakeClock
	c   copyCase
}

func newHarness(t *testing.T, c copyCase) *harness {
	h := &harness{t: t, c: c}
	if c.wall {
		h.clk = newFakeClock()
		c.cfg.Clock = h.clk.Now
		c.cfg.MaxSamplesPerSecond = 1e-3
	}
	h.l = mustNew(t, c.cfg)
	if c.wall {
		// Two timed admissions 200 ms apart teach the limiter a rate far
		// above the cap: from then on it times one admission in 2^14.
		for range 2 {
			p := h.acquire()
			p.Release(shed.Success)
			h.clk.Advance(200 * time.Millisecond)
		}
		// An untimed permit holds no guard slot.
		p := h.acquire()
		if g := shed.GuardsHeld(h.l); g != 0 {
			t.Fatalf("%d guard slots held by an untimed permit", g)
		}
		p.Release(shed.Success)
	}
	return h
}

func (h *harness) try() (shed.Permit, error) {
	if h.c.wall {
		return h.l.TryAcquire(h.c.req)
	}
	return h.l.TryAcquireAt(t0, h.c.req)
}

func (h *harness) acquire() shed.Permit {
	h.t.Helper()
	p, err := h.try()
	if err != nil {
		h.t.Fatalf("acquire: %v", err)
	}
	return p
}

func (h *harness) release(p *shed.Permit, o shed.Outcome) {
	if h.c.wall {
		p.Release(o)
		return
	}
	p.ReleaseAt(at(1), o)
}

// misused returns the misuses counted over all classes.
func misused(l *shed.Limiter) uint64 {
	var n uint64
	for _, c := range l.Snapshot().Classes {
		n += c.Misused
	}
	return n
}

// settled checks that nothing is in flight and no guard slot is held.
func settled(t *testing.T, l *shed.Limiter) {
	t.Helper()
	if snap := l.Snapshot(); snap.InFlight != 0 || snap.InFlightCost != 0 {
		t.Fatalf("after releasing everything: in flight %d, cost %d", snap.InFlight, snap.InFlightCost)
	}
	if g := shed.GuardsHeld(l); g != 0 {
		t.Fatalf("%d guard slots held with nothing in flight", g)
	}
}

// admits counts how many of n requests in a row are admitted, then
// releases them.
func (h *harness) admits(n int) int {
	var held []shed.Permit
	for range n {
		if p, err := h.try(); err == nil {
			held = append(held, p)
		}
	}
	for i := range held {
		h.release(&held[i], shed.Success)
	}
	return len(held)
}

// TestReleasingCopiesNeverWraps is issue 15: releasing two copies of one
// Permit value freed its capacity twice, and with nothing else in flight
// the packed state word wrapped (16,777,215 in flight), so the limiter
// rejected everything until restart. Now a copy released again never
// takes the state below zero and is reported as a misuse. When the copies
// can be told apart (guarded or tracked permits) it changes nothing even
// with other work in flight; an unguarded copy takes the place of another
// release, which is refused and reported when the state reaches zero.
// Either way the limiter ends empty and admits exactly up to its limit.
func TestReleasingCopiesNeverWraps(t *testing.T) {
	for _, c := range copyCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c)
			cost := max(c.req.Cost, 1)
			for others := range 2 {
				before := misused(h.l)
				var held []shed.Permit
				for range others {
					held = append(held, h.acquire())
				}
				a := h.acquire()
				cp := a
				h.release(&a, shed.Success)
				h.release(&cp, shed.Dropped) // the misuse
				if cp.Valid() {
					t.Error("the copy is still valid after its release")
				}
				want := others
				if !c.exact() {
					want = 0 // the copy took the place of the other's release
				}
				snap := h.l.Snapshot()
				if snap.InFlight != want || snap.InFlightCost != int64(want)*cost {
					t.Fatalf("%d other permits held, a copy released twice: in flight %d, cost %d; want %d and %d",
						others, snap.InFlight, snap.InFlightCost, want, int64(want)*cost)
				}
				if c.exact() || others == 0 {
					if n := misused(h.l) - before; n != 1 {
						t.Fatalf("%d misuses reported at once, want 1", n)
					}
				}
				for i := range held {
					h.release(&held[i], shed.Success)
				}
				settled(t, h.l)
				if n := misused(h.l) - before; n != 1 {
					t.Fatalf("%d misuses reported, want 1", n)
				}
				if n := h.admits(10); n != 2 {
					t.Fatalf("%d of the next 10 requests admitted on a limit of 2, want 2", n)
				}
			}
			if obs, ok := c.cfg.Observer.(*recorder); ok {
				n := 0
				for _, k := range obs.Kinds() {
					if k == shed.EventMisused {
						n++
					}
				}
				if n != 2 {
					t.Errorf("%d misuse events, want 2", n)
				}
			}
		})
	}
}

// TestReleasingManyCopiesNeverWraps releases every admission through
// several copies, in every order, with other work in flight: a systematic
// bug in a caller must not take the limiter's counts below zero nor let it
// admit over its limit afterwards.
func TestReleasingManyCopiesNeverWraps(t *testing.T) {
	for _, c := range copyCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c)
			for round := range 50 {
				a := h.acquire()
				b := h.acquire()
				copies := []shed.Permit{a, b, a, b, a}
				for i := range copies {
					h.release(&copies[(i+round)%len(copies)], shed.Outcome(i%3))
				}
				settled(t, h.l)
			}
			if n := misused(h.l); n != 50*3 {
				t.Errorf("%d misuses reported, want %d", n, 50*3)
			}
			if n := h.admits(10); n != 2 {
				t.Fatalf("%d of the next 10 requests admitted on a limit of 2, want 2", n)
			}
		})
	}
}

// TestReconcilingCopies: a copy reconciled after another copy was released
// is refused (ErrReleased) and reported, and changes no cost; a copy
// released after another copy was reconciled gives back the reconciled
// cost, when the copies can be told apart. Unguarded copies never take
// the cost below zero, and a cost left in flight with no work is cleared.
func TestReconcilingCopies(t *testing.T) {
	for _, c := range copyCases() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c)
			cost := max(c.req.Cost, 1)
			// Reconcile after release.
			other := h.acquire()
			a := h.acquire()
			cp := a
			h.release(&a, shed.Success)
			err := cp.Reconcile(cost + 4)
			if c.exact() {
				if !errors.Is(err, shed.ErrReleased) || cp.Valid() {
					t.Fatalf("reconciling a released copy: %v, valid %v; want ErrReleased and invalid", err, cp.Valid())
				}
				if snap := h.l.Snapshot(); snap.InFlight != 1 || snap.InFlightCost != cost {
					t.Fatalf("after reconciling a released copy: in flight %d, cost %d; want 1 and %d", snap.InFlight, snap.InFlightCost, cost)
				}
			}
			h.release(&other, shed.Success)
			h.release(&cp, shed.Success)
			settled(t, h.l)
			if c.exact() && misused(h.l) != 1 {
				t.Fatalf("%d misuses reported, want 1", misused(h.l))
			}
			// Release after another copy's reconcile.
			b := h.acquire()
			cp = b
			if err := cp.Reconcile(cost + 2); err != nil {
				t.Fatal(err)
			}
			h.release(&b, shed.Success)
			if c.exact() {
				settled(t, h.l)
			}
			h.release(&cp, shed.Success)
			settled(t, h.l)
			// Guarded or tracked: the two late copies. Unguarded: also
			// the two releases that found a reconciled copy's cost left
			// in flight.
			want := uint64(4)
			if c.exact() {
				want = 2
			}
			if n := misused(h.l); n != want {
				t.Fatalf("%d misuses reported, want %d", n, want)
			}
			if n := h.admits(10); n != 2 {
				t.Fatalf("%d of the next 10 requests admitted on a limit of 2, want 2", n)
			}
		})
	}
}

// TestUnguardedCopies: a timed permit whose guard slot is still held by
// an older one goes unguarded, and its copies are caught by the floor of
// the state word only: the second release takes the place of the older
// permit's, whose own release is then refused and reported. Nothing
// wraps, and the limiter ends empty.
func TestUnguardedCopies(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 2})
	slots := shed.GuardSlots(l)
	if slots == 0 {
		t.Fatal("no guard slots")
	}
	old := mustAcquire(t, l, t0, shed.Request{}) // admission 1
	for range slots - 1 {
		p := mustAcquire(t, l, t0, shed.Request{})
		p.ReleaseAt(t0, shed.Success)
	}
	if g := shed.GuardsHeld(l); g != 1 {
		t.Fatalf("%d guard slots held, want 1", g)
	}
	// Admission slots+1 maps to the slot old still holds.
	a := mustAcquire(t, l, t0, shed.Request{})
	if g := shed.GuardsHeld(l); g != 1 {
		t.Fatalf("%d guard slots held, want 1: the new permit should be unguarded", g)
	}
	cp := a
	a.ReleaseAt(at(1), shed.Success)
	cp.ReleaseAt(at(1), shed.Success)
	if n := l.InFlight(); n != 0 {
		t.Fatalf("%d in flight, want 0 (the copy took old's place)", n)
	}
	old.ReleaseAt(at(2), shed.Success) // refused: nothing is in flight
	settled(t, l)
	if n := misused(l); n != 1 {
		t.Fatalf("%d misuses reported, want 1", n)
	}
	held := []shed.Permit{mustAcquire(t, l, at(3), shed.Request{}), mustAcquire(t, l, at(3), shed.Request{})}
	if _, err := l.TryAcquireAt(at(3), shed.Request{}); err == nil {
		t.Fatal("admitted over the limit after the misuse")
	}
	for i := range held {
		held[i].ReleaseAt(at(4), shed.Success)
	}
	settled(t, l)
}
