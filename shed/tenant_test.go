package shed_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// offer is what one tenant offers a fairSim at every step.
type offer struct {
	tenant string
	class  shed.Class
	every  int // offers on steps divisible by every (0: 1)
	burst  int // requests per offering step (0: 1)
	cost   int64
}

// fairSim drives a limiter in virtual time, one millisecond per step:
// every admitted request holds its permit for hold steps.
type fairSim struct {
	t        *testing.T
	l        *shed.Limiter
	hold     int
	due      map[int][]shed.Permit
	admitted map[string]int
	rejected map[string]map[shed.Reason]int
	// check runs after every admission, with the tenant admitted.
	check func(step int, tenant string, class shed.Class)
}

func newFairSim(t *testing.T, l *shed.Limiter, hold int) *fairSim {
	return &fairSim{t: t, l: l, hold: hold, due: map[int][]shed.Permit{}, admitted: map[string]int{}, rejected: map[string]map[shed.Reason]int{}}
}

// run runs steps [from, to) of offers. Within a step the tenants take
// turns, one request each per round, starting from a tenant that rotates
// with the step, so that no tenant is always first.
func (s *fairSim) run(from, to int, offers []offer) {
	for i := from; i < to; i++ {
		for _, p := range s.due[i] {
			p.ReleaseAt(at(i), shed.Success)
		}
		delete(s.due, i)
		left := make([]int, len(offers))
		for k, o := range offers {
			if o.every == 0 || i%o.every == 0 {
				left[k] = max(o.burst, 1)
			}
		}
		for more := true; more; {
			more = false
			for j := range offers {
				k := (j + i) % len(offers)
				if left[k] == 0 {
					continue
				}
				left[k]--
				more = true
				s.try(i, offers[k])
			}
		}
	}
}

func (s *fairSim) try(i int, o offer) {
	p, err := s.l.TryAcquireAt(at(i), shed.Request{Tenant: o.tenant, Class: o.class, Cost: o.cost})
	if err != nil {
		if !errors.Is(err, shed.ErrRejected) {
			s.t.Fatalf("step %d: %v", i, err)
		}
		if s.rejected[o.tenant] == nil {
			s.rejected[o.tenant] = map[shed.Reason]int{}
		}
		s.rejected[o.tenant][shed.ReasonOf(err)]++
		return
	}
	s.admitted[o.tenant]++
	s.due[i+s.hold] = append(s.due[i+s.hold], p)
	if s.check != nil {
		s.check(i, o.tenant, o.class)
	}
}

// drain releases everything still held.
func (s *fairSim) drain() {
	for i, ps := range s.due {
		for _, p := range ps {
			p.ReleaseAt(at(i), shed.Ignored)
		}
	}
	s.due = map[int][]shed.Permit{}
}

// share is ceil(capacity * weight / total weight of class c's tenants),
// computed from the limiter's tracked tenants.
func share(l *shed.Limiter, c shed.Class, tenant string, capacity int64, weight float64) int64 {
	_, total := shed.TenantCounts(l, c)
	return int64(math.Ceil(float64(capacity) * weight * shed.WeightUnit / float64(total)))
}

func held(l *shed.Limiter, c shed.Class, tenant string) [3]int64 {
	m, _ := shed.TenantCounts(l, c)
	return m[tenant]
}

func wantNoTenants(t *testing.T, l *shed.Limiter) {
	t.Helper()
	snap := l.Snapshot()
	if snap.Tenants != 0 || snap.InFlight != 0 {
		m0, _ := shed.TenantCounts(l, 0)
		m1, _ := shed.TenantCounts(l, 1)
		t.Fatalf("after the run: %d tenants tracked, %d in flight: %v %v", snap.Tenants, snap.InFlight, m0, m1)
	}
	for c := range snap.Classes {
		if m, w := shed.TenantCounts(l, shed.Class(c)); len(m) != 0 || w != 0 {
			t.Fatalf("class %d still tracks %v (weight %d)", c, m, w)
		}
	}
}

// TestTenantNoisyNeighbour: one tenant offers ten times what each of three
// others offers to a class with a static limit of 8. While the class is
// contended the noisy tenant holds no more than its share (checked at
// every admission and every step once the work admitted before the quiet
// tenants arrived has ended), and the quiet tenants are admitted; alone,
// the noisy tenant gets the whole class.
func TestTenantNoisyNeighbour(t *testing.T) {
	const limit, hold, steps = 8, 4, 400
	quiet := []string{"q1", "q2", "q3"}
	t.Run("quiet tenants at their share", func(t *testing.T) {
		// Each quiet tenant offers one request per step held for 4 steps:
		// it could use 4 slots, more than its share of 2.
		l := mustNew(t, shed.Config{Limit: limit})
		s := newFairSim(t, l, hold)
		offers := []offer{{tenant: "noisy", burst: 10}}
		for _, q := range quiet {
			offers = append(offers, offer{tenant: q})
		}
		s.check = func(step int, tenant string, _ shed.Class) {
			if l.InFlight() < limit {
				return
			}
			// The class is contended: the admitted tenant is within its
			// share, and so is the noisy one once its early work ended.
			if h := held(l, 0, tenant)[0]; h > share(l, 0, tenant, limit, 1) {
				t.Fatalf("step %d: %s admitted to %d in flight, over its share %d", step, tenant, h, share(l, 0, tenant, limit, 1))
			}
			if h := held(l, 0, "noisy")[0]; step >= hold && h > share(l, 0, "noisy", limit, 1) {
				t.Fatalf("step %d: noisy holds %d, over its share %d", step, h, share(l, 0, "noisy", limit, 1))
			}
		}
		s.run(0, steps, offers)
		for _, q := range quiet {
			// Its share (2 of 8) held for 4 steps: half a request per step.
			if got, want := s.admitted[q], steps/2; got < want*9/10 {
				t.Errorf("%s admitted %d times, want about %d", q, got, want)
			}
		}
		if got := s.admitted["noisy"]; got > steps/2+limit {
			t.Errorf("noisy admitted %d times, more than its share allows (%d)", got, steps/2+limit)
		}
		if s.rejected["noisy"][shed.ReasonTenantShare] == 0 || l.Snapshot().Classes[0].Rejected[shed.ReasonTenantShare] == 0 {
			t.Errorf("no tenant_share rejections: %v", s.rejected)
		}
		s.drain()
		wantNoTenants(t, l)
	})
	t.Run("quiet tenants below their share", func(t *testing.T) {
		// Each quiet tenant holds at most one slot: all of its requests
		// are admitted, and the noisy tenant gets the rest but the last
		// free place.
		l := mustNew(t, shed.Config{Limit: limit})
		s := newFairSim(t, l, hold)
		offers := []offer{{tenant: "noisy", burst: 10}}
		for _, q := range quiet {
			offers = append(offers, offer{tenant: q, every: hold})
		}
		s.run(0, hold, offers[:1]) // the noisy tenant fills the idle class
		s.run(hold, steps, offers)
		for _, q := range quiet {
			if s.rejected[q] != nil {
				t.Errorf("%s rejected: %v (admitted %d)", q, s.rejected[q], s.admitted[q])
			}
		}
		if got, want := s.admitted["noisy"], (steps-hold)/hold*(limit-len(quiet)-1); got < want {
			t.Errorf("noisy admitted %d times, want at least %d: the class is not work conserving", got, want)
		}
		s.drain()
		wantNoTenants(t, l)
	})
	t.Run("alone", func(t *testing.T) {
		l := mustNew(t, shed.Config{Limit: limit})
		s := newFairSim(t, l, hold)
		most := 0
		s.check = func(int, string, shed.Class) { most = max(most, int(held(l, 0, "noisy")[0])) }
		s.run(0, steps, []offer{{tenant: "noisy", burst: 10}})
		if most != limit || s.rejected["noisy"][shed.ReasonTenantShare] != 0 {
			t.Fatalf("alone, noisy held at most %d of %d; rejections %v", most, limit, s.rejected["noisy"])
		}
		s.drain()
		wantNoTenants(t, l)
	})
}

// TestTenantShares checks the steady state of contended classes: weights,
// costs and classes that borrow from one another.
func TestTenantShares(t *testing.T) {
	const hold, steps = 4, 200
	tests := []tenantSharesCase{{
		name: "equal",
		cfg:  shed.Config{Limit: 6},
		offers: []offer{
			{tenant: "a", burst: 10}, {tenant: "b", burst: 10}, {tenant: "c", burst: 10},
		},
		most:  map[string]int64{"a": 2, "b": 2, "c": 2},
		least: map[string]int{"a": steps / 2 * 9 / 10, "b": steps / 2 * 9 / 10, "c": steps / 2 * 9 / 10},
	}, {
		name: "weights",
		cfg: shed.Config{Limit: 8, TenantWeight: func(name string) float64 {
			if name == "gold" {
				return 3
			}
			return 1
		}},
		offers: []offer{{tenant: "gold", burst: 10}, {tenant: "free", burst: 10}},
		most:   map[string]int64{"gold": 6, "free": 2},
		least:  map[string]int{"gold": steps * 6 / 4 * 9 / 10, "free": steps * 2 / 4 * 9 / 10},
	}, {
		name: "cost",
		// The cost budget is what is contended: a request of "big" costs
		// 10, one of "small" 5; each holds at most half the budget.
		cfg: shed.Config{Limit: 100, MaxCost: 60},
		offers: []offer{
			{tenant: "big", burst: 10, cost: 10}, {tenant: "small", burst: 2, cost: 5},
		},
		most:   map[string]int64{"big": 30, "small": 30},
		byCost: true,
		least:  map[string]int{"small": steps * 6 / 4 * 9 / 10},
	}, {
		name: "borrowing",
		// "batch" borrows the share that "interactive" protects while the
		// latter is idle; its tenants split what batch may use.
		cfg: shed.Config{Limit: 8, Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5}, {Name: "batch"},
		}},
		offers: []offer{
			{tenant: "a", class: 1, burst: 10}, {tenant: "b", class: 1, burst: 10},
		},
		most:  map[string]int64{"a": 4, "b": 4},
		least: map[string]int{"a": steps * 4 / 4 * 9 / 10, "b": steps * 4 / 4 * 9 / 10},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, hold, steps) })
	}
}

// tenantSharesCase is a contended class of TestTenantShares.
type tenantSharesCase struct {
	name   string
	cfg    shed.Config
	offers []offer
	// most is the most each tenant may hold (count, or cost when
	// byCost) at any step once the first work ended.
	most   map[string]int64
	byCost bool
	// least is the fewest admissions each tenant must get.
	least map[string]int
}

// run offers tc.offers for steps steps, each admission held for hold
// steps, checking most at every admission and least at the end.
func (tc tenantSharesCase) run(t *testing.T, hold, steps int) {
	l := mustNew(t, tc.cfg)
	s := newFairSim(t, l, hold)
	s.check = func(step int, _ string, _ shed.Class) { tc.checkMost(t, l, step, hold) }
	s.run(0, steps, tc.offers)
	for name, least := range tc.least {
		if s.admitted[name] < least {
			t.Errorf("%s admitted %d times, want at least %d (rejections %v)", name, s.admitted[name], least, s.rejected[name])
		}
	}
	s.drain()
	wantNoTenants(t, l)
}

// checkMost checks at step that no tenant holds more than its most, once
// the first work (admitted before step hold) ended.
func (tc tenantSharesCase) checkMost(t *testing.T, l *shed.Limiter, step, hold int) {
	for name, most := range tc.most {
		h := held(l, tc.offers[0].class, name)
		got := h[0]
		if tc.byCost {
			got = h[1]
		}
		if step >= hold && got > most {
			t.Fatalf("step %d: %s holds %d, more than %d", step, name, got, most)
		}
	}
}

// TestTenantBorrowingShrinks: batch tenants that filled an idle limit
// borrowed interactive's protected share; once interactive has demand
// again, batch's capacity is what it still holds, and as its work ends
// its tenants are held to their shares of the rest.
func TestTenantBorrowingShrinks(t *testing.T) {
	const hold = 4
	l := mustNew(t, shed.Config{Limit: 8, Classes: []shed.ClassConfig{
		{Name: "interactive", Protected: 0.5, QueueDepth: 8, MaxWait: time.Second}, {Name: "batch"},
	}})
	s := newFairSim(t, l, hold)
	batch := []offer{{tenant: "a", class: 1, burst: 10}, {tenant: "b", class: 1, burst: 10}}
	s.run(0, 2*hold, batch)
	if n := l.Snapshot().Classes[1].InFlight; n != 8 {
		t.Fatalf("batch holds %d of an idle limit of 8", n)
	}
	// Interactive work arrives and holds its protected share for good.
	var inter []shed.Permit
	for i := range 4 {
		if p, queued, err := l.EnqueueAt(at(2*hold), shed.Request{Class: 0}, shed.NewWaiter(func(w *shed.Waiter) {
			if p, err := w.Result(); err == nil {
				inter = append(inter, p)
			}
		})); err != nil {
			t.Fatalf("interactive %d: %v", i, err)
		} else if !queued {
			inter = append(inter, p)
		}
	}
	s.check = func(step int, _ string, _ shed.Class) {
		if step < 4*hold {
			return
		}
		for _, name := range []string{"a", "b"} {
			if h := held(l, 1, name)[0]; h > 2 {
				t.Fatalf("step %d: %s holds %d of batch's 4", step, name, h)
			}
		}
	}
	s.run(2*hold, 12*hold, batch)
	if len(inter) != 4 {
		t.Fatalf("interactive admitted %d of 4", len(inter))
	}
	if a, b := held(l, 1, "a")[0], held(l, 1, "b")[0]; a != 2 || b != 2 {
		t.Fatalf("batch tenants hold %d and %d, want 2 each", a, b)
	}
	for _, p := range inter {
		p.ReleaseAt(at(12*hold), shed.Success)
	}
	s.drain()
	wantNoTenants(t, l)
}

// TestTenantReleasedOnEveryPath: whatever ends a tenant's work, its entry
// is freed when nothing of it is left, exactly once.
func TestTenantReleasedOnEveryPath(t *testing.T) {
	req := shed.Request{Tenant: "t"}
	tests := []struct {
		name string
		cfg  shed.Config
		// run ends the work of tenant "t" (requests like req) one way.
		run func(t *testing.T, l *shed.Limiter, req shed.Request)
	}{
		{"success", shed.Config{Limit: 2}, tenantPathReleasedAt(shed.Success)},
		{"success, wall clock", shed.Config{Limit: 2}, tenantPathSuccessWallClock},
		{"ignored", shed.Config{Limit: 2}, tenantPathReleasedAt(shed.Ignored)},
		{"dropped", shed.Config{Limit: 2}, tenantPathReleasedAt(shed.Dropped)},
		{"reconciled", shed.Config{Limit: 2, MaxCost: 10}, tenantPathReconciled},
		{"double release of copies", shed.Config{Limit: 2}, tenantPathDoubleReleaseOfCopies},
		{"double release, wall clock", shed.Config{Limit: 2}, tenantPathDoubleReleaseWallClock},
		{"tracked copies", shed.Config{Limit: 2, TrackLeaks: true}, tenantPathTrackedCopies},
		{"leaked", shed.Config{Limit: 2, TrackLeaks: true}, tenantPathLeaked},
		{"observer panics at admission", shed.Config{Limit: 2, Observer: shed.ObserverFunc(func(e shed.Event) {
			if e.Kind == shed.EventAdmitted {
				panic("observer")
			}
		})}, tenantPathObserverPanics},
		{"queued then granted", oneQueueConfig(), tenantPathQueuedThenGranted},
		{"queued then timed out", oneQueueConfig(), tenantPathQueuedThenTimedOut},
		{"queued then cancelled", oneQueueConfig(), tenantPathQueuedThenCancelled},
		{"queued then drained", oneQueueConfig(), tenantPathQueuedThenDrained},
		{"dry run over its share", shed.Config{Limit: 4, DryRun: true}, tenantPathDryRunOverShare},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.cfg)
			tc.run(t, l, req)
			wantNoTenants(t, l)
		})
	}
}

// The tenantPath functions are TestTenantReleasedOnEveryPath's ways of
// ending the work of tenant "t"; the test checks that none is left after.

// oneQueueConfig is a limit of 1 with a queue, for the paths that queue.
func oneQueueConfig() shed.Config {
	return shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 2, MaxWait: time.Second}}}
}

// tenantPathReleasedAt releases the work in virtual time with outcome o.
func tenantPathReleasedAt(o shed.Outcome) func(t *testing.T, l *shed.Limiter, req shed.Request) {
	return func(t *testing.T, l *shed.Limiter, req shed.Request) {
		p := mustAcquire(t, l, at(0), req)
		p.ReleaseAt(at(1), o)
	}
}

func tenantPathSuccessWallClock(t *testing.T, l *shed.Limiter, req shed.Request) {
	p, err := l.TryAcquire(req)
	if err != nil {
		t.Fatal(err)
	}
	p.Release(shed.Success)
}

func tenantPathReconciled(t *testing.T, l *shed.Limiter, _ shed.Request) {
	p := mustAcquire(t, l, at(0), shed.Request{Tenant: "t", Cost: 4})
	if err := p.ReconcileAt(at(1), 7); err != nil {
		t.Fatal(err)
	}
	if h := held(l, 0, "t"); h[1] != 7 {
		t.Fatalf("tenant cost %d after reconciling to 7", h[1])
	}
	p.ReleaseAt(at(2), shed.Success)
}

// tenantPathDoubleReleaseOfCopies: a second release through a copy must
// not take another tenant's ("u") count.
func tenantPathDoubleReleaseOfCopies(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), req)
	q := mustAcquire(t, l, at(0), shed.Request{Tenant: "u"})
	c := p
	c.ReleaseAt(at(1), shed.Success)
	p.ReleaseAt(at(1), shed.Success) // misuse: must not take "u"'s count
	if h := held(l, 0, "u"); h[0] != 1 {
		t.Fatalf("u holds %d after a copy of t's permit was released twice", h[0])
	}
	q.ReleaseAt(at(2), shed.Success)
	if m := l.Snapshot().Classes[0].Misused; m != 1 {
		t.Fatalf("misused %d, want 1", m)
	}
}

func tenantPathDoubleReleaseWallClock(t *testing.T, l *shed.Limiter, req shed.Request) {
	p, _ := l.TryAcquire(req)
	c := p
	c.Release(shed.Success)
	p.Release(shed.Success)
}

func tenantPathTrackedCopies(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), req)
	c := p
	c.ReleaseAt(at(1), shed.Ignored)
	p.ReleaseAt(at(1), shed.Success)
}

// tenantPathLeaked drops a permit without releasing it and waits for the
// leak tracker to find it.
func tenantPathLeaked(t *testing.T, l *shed.Limiter, req shed.Request) {
	func() {
		p := mustAcquire(t, l, at(0), req)
		_ = p // dropped without Release
	}()
	deadline := time.Now().Add(10 * time.Second)
	for l.Snapshot().Classes[0].Leaked == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the leak was never found")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// tenantPathObserverPanics admits with an observer that panics at
// admission (see the test's config).
func tenantPathObserverPanics(t *testing.T, l *shed.Limiter, req shed.Request) {
	defer func() { _ = recover() }()
	_, _ = l.TryAcquireAt(at(0), req)
}

func tenantPathQueuedThenGranted(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), req)
	var got shed.Permit
	w := shed.NewWaiter(func(w *shed.Waiter) { got, _ = w.Result() })
	if _, queued, err := l.EnqueueAt(at(0), req, w); !queued || err != nil {
		t.Fatalf("queued %v, %v", queued, err)
	}
	if h := held(l, 0, "t"); h != [3]int64{1, 1, 1} {
		t.Fatalf("tenant counts %v, want 1 in flight (cost 1) and 1 queued", h)
	}
	p.ReleaseAt(at(1), shed.Success)
	if !got.Valid() {
		t.Fatal("the waiter was not granted")
	}
	got.ReleaseAt(at(2), shed.Success)
}

func tenantPathQueuedThenTimedOut(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), shed.Request{})
	w := shed.NewWaiter(func(*shed.Waiter) {})
	_, _, _ = l.EnqueueAt(at(0), req, w)
	l.ExpireAt(at(2000))
	p.ReleaseAt(at(2000), shed.Success)
}

func tenantPathQueuedThenCancelled(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), shed.Request{})
	w := shed.NewWaiter(func(*shed.Waiter) {})
	_, _, _ = l.EnqueueAt(at(0), req, w)
	if !l.CancelAt(at(1), w) {
		t.Fatal("not cancelled")
	}
	p.ReleaseAt(at(2), shed.Success)
}

// tenantPathQueuedThenDrained: the waiter is another tenant's ("u").
func tenantPathQueuedThenDrained(t *testing.T, l *shed.Limiter, req shed.Request) {
	p := mustAcquire(t, l, at(0), req)
	w := shed.NewWaiter(func(*shed.Waiter) {})
	_, _, _ = l.EnqueueAt(at(0), shed.Request{Tenant: "u"}, w)
	l.DrainAt(at(1))
	p.ReleaseAt(at(2), shed.Success)
}

// tenantPathDryRunOverShare admits, in dry-run mode, a request that would
// have been rejected for its tenant's share.
func tenantPathDryRunOverShare(t *testing.T, l *shed.Limiter, req shed.Request) {
	ps := []shed.Permit{mustAcquire(t, l, at(0), req), mustAcquire(t, l, at(0), req), mustAcquire(t, l, at(0), shed.Request{Tenant: "u"})}
	ps = append(ps, mustAcquire(t, l, at(0), req)) // would have been rejected
	if r := ps[3].DryRun(); r != shed.ReasonTenantShare {
		t.Fatalf("dry-run reason %v, want %v", r, shed.ReasonTenantShare)
	}
	if n := l.Snapshot().Classes[0].Rejected[shed.ReasonTenantShare]; n != 1 {
		t.Fatalf("%d would-be tenant_share rejections, want 1", n)
	}
	for i := range ps {
		ps[i].ReleaseAt(at(1), shed.Success)
	}
}

// TestTenantConcurrent: many goroutines admit, queue, cancel and release
// work of a few tenants through the wall-clock API, releasing copies twice
// now and then; afterwards nothing is in flight and no tenant is tracked.
func TestTenantConcurrent(t *testing.T) {
	l := mustNew(t, shed.Config{Limit: 6, MaxCost: 30, Classes: []shed.ClassConfig{
		{Name: "interactive", Protected: 0.5, QueueDepth: 4, MaxWait: 2 * time.Millisecond},
		{Name: "batch", QueueDepth: 4, MaxWait: time.Millisecond},
	}})
	names := []string{"noisy", "noisy", "noisy", "a", "b", ""}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 18))
			for range 2000 {
				req := shed.Request{Tenant: names[rng.IntN(len(names))], Class: shed.Class(rng.IntN(2)), Cost: 1 + rng.Int64N(8)}
				var p shed.Permit
				var err error
				if rng.IntN(2) == 0 {
					p, err = l.TryAcquire(req)
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1500))*time.Microsecond)
					p, err = l.Acquire(ctx, req)
					cancel()
				}
				if err != nil {
					continue
				}
				if rng.IntN(3) == 0 {
					_ = p.Reconcile(rng.Int64N(10))
				}
				c := p
				p.Release(shed.Outcome(rng.IntN(3)))
				if rng.IntN(8) == 0 {
					c.Release(shed.Success) // misuse: absorbed
				}
			}
		}()
	}
	wg.Wait()
	wantNoTenants(t, l)
}

// TestTenantQueue: a request over its tenant's share is rejected rather
// than queued, and a waiter whose tenant is over its share when its turn
// comes is rejected so that the next waiter is served.
func TestTenantQueue(t *testing.T) {
	cfg := shed.Config{Limit: 2, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 8, MaxWait: time.Second}}}
	l := mustNew(t, cfg)
	var log waiterLog
	enqueue := func(tenant string) (*shed.Waiter, error) {
		w := shed.NewWaiter(log.notify)
		_, queued, err := l.EnqueueAt(at(0), shed.Request{Tenant: tenant}, w)
		if err == nil && !queued {
			t.Fatalf("%s admitted at once", tenant)
		}
		return w, err
	}
	a := mustAcquire(t, l, at(0), shed.Request{Tenant: "a"})
	b := mustAcquire(t, l, at(0), shed.Request{Tenant: "b"})
	wa, err := enqueue("a") // a: 1 held + 1 waiting, its share of 2 + 1 waiting
	if err != nil {
		t.Fatalf("a's first waiter: %v", err)
	}
	_, err = enqueue("a") // a would hold 3 of the class's demand of 4
	wantReason(t, err, shed.ReasonTenantShare)
	wc, err := enqueue("c")
	if err != nil {
		t.Fatalf("c's waiter: %v", err)
	}
	// b's work ends: a, holding 1 of the 2 places with c waiting, is over
	// its share of 1 at its turn; c is served.
	b.ReleaseAt(at(1), shed.Success)
	got := log.take()
	if len(got) != 2 || got[0] != wa || got[1] != wc {
		t.Fatalf("outcomes delivered to %d waiters, want a's then c's", len(got))
	}
	_, err = wa.Result()
	wantReason(t, err, shed.ReasonTenantShare)
	pc, err := wc.Result()
	if err != nil {
		t.Fatalf("c: %v", err)
	}
	if n := l.Snapshot().Classes[0].Rejected[shed.ReasonTenantShare]; n != 2 {
		t.Fatalf("%d tenant_share rejections, want 2", n)
	}
	a.ReleaseAt(at(2), shed.Success)
	pc.ReleaseAt(at(2), shed.Success)
	wantNoTenants(t, l)
}

// TestTenantWeightOddValues: a weight that is not a positive number counts
// as 1, and huge ones are clamped, so shares stay defined.
func TestTenantWeightOddValues(t *testing.T) {
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e300, 1e-300} {
		l := mustNew(t, shed.Config{Limit: 4, TenantWeight: func(string) float64 { return w }})
		var held []shed.Permit
		for i := range 8 {
			if p, err := l.TryAcquireAt(at(0), shed.Request{Tenant: []string{"x", "y"}[i%2]}); err == nil {
				held = append(held, p)
			}
		}
		if len(held) != 4 {
			t.Errorf("weight %v: %d admitted, want 4", w, len(held))
		}
		for i := range held {
			held[i].ReleaseAt(at(1), shed.Success)
		}
		wantNoTenants(t, l)
	}
}
