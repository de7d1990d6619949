package shed_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// tenantModel is the test's own account of what each tenant holds.
type tenantModel struct {
	held   []heldPermit
	queued map[*shed.Waiter]shed.Request
	// inflight and waiting count, per class and tenant.
	inflight, waiting [2]map[string]int64
}

type heldPermit struct {
	p   *shed.Permit
	req shed.Request
}

// TestPropertyTenantShares runs seeded random sequences of admissions,
// queueing, releases (every outcome, and copies released twice),
// reconciliations, cancellations and expiries across tenants and classes
// in virtual time, and checks after every operation:
//   - the limiter tracks exactly the tenants with work in flight or
//     queued, with the test's counts of each;
//   - the tenants' in-flight work sums to the class's;
//   - no admission left a tenant above its share of a contended class
//     (full, or with waiters): ceil(capacity * weight / total weight),
//     the capacity being the class's work in flight plus the room left.
func TestPropertyTenantShares(t *testing.T) {
	weights := map[string]float64{"noisy": 1, "a": 1, "b": 2, "c": 1, "d": 3, "e": 1}
	tenants := []string{"noisy", "noisy", "noisy", "noisy", "a", "b", "c", "d", "e"}
	configs := []struct {
		name string
		cfg  shed.Config
		// shares: the classes take no protected shares, so the test can
		// tell their room on its own.
		shares bool
	}{
		{"one class with a queue and costs", shed.Config{Limit: 6, MaxCost: 40, Classes: []shed.ClassConfig{
			{Name: "only", QueueDepth: 4, MaxWait: 5 * time.Millisecond},
		}}, true},
		{"two classes", shed.Config{Limit: 8, Classes: []shed.ClassConfig{
			{Name: "high", QueueDepth: 3, MaxWait: 4 * time.Millisecond},
			{Name: "low", QueueDepth: 3, MaxWait: 4 * time.Millisecond, LIFO: true},
		}}, true},
		{"protected shares and a cost budget", shed.Config{Limit: 8, MaxCost: 50, Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 3, MaxWait: 3 * time.Millisecond},
			{Name: "batch", QueueDepth: 2, MaxWait: 2 * time.Millisecond},
		}, DemandHold: 2 * time.Millisecond}, false},
	}
	for _, tc := range configs {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%s/seed %d", tc.name, seed), func(t *testing.T) {
				cfg := tc.cfg
				cfg.TenantWeight = func(name string) float64 { return weights[name] }
				l := mustNew(t, cfg)
				rng := rand.New(rand.NewPCG(seed, 18))
				m := &tenantModel{queued: map[*shed.Waiter]shed.Request{}}
				for c := range m.inflight {
					m.inflight[c], m.waiting[c] = map[string]int64{}, map[string]int64{}
				}
				classes := len(l.Snapshot().Classes)
				now := 0
				for op := range 3000 {
					before := [2]map[string]int64{maps(m.inflight[0]), maps(m.inflight[1])}
					m.step(t, l, rng, &now, tenants, classes)
					m.check(t, l, op, before, tc.shares, weights)
				}
				for len(m.held) > 0 || len(m.queued) > 0 {
					for w := range m.queued {
						l.CancelAt(at(now), w)
						m.unqueue(w)
					}
					for len(m.held) > 0 {
						m.release(l, 0, at(now), shed.Success)
					}
				}
				wantNoTenants(t, l)
			})
		}
	}
}

func maps(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (m *tenantModel) admit(p shed.Permit, req shed.Request) {
	m.held = append(m.held, heldPermit{&p, req})
	m.inflight[req.Class][req.Tenant]++
}

func (m *tenantModel) unqueue(w *shed.Waiter) {
	req := m.queued[w]
	delete(m.queued, w)
	if m.waiting[req.Class][req.Tenant]--; m.waiting[req.Class][req.Tenant] == 0 {
		delete(m.waiting[req.Class], req.Tenant)
	}
}

func (m *tenantModel) release(l *shed.Limiter, i int, now time.Time, o shed.Outcome) {
	h := m.held[i]
	m.held = slices.Delete(m.held, i, i+1)
	h.p.ReleaseAt(now, o)
	if m.inflight[h.req.Class][h.req.Tenant]--; m.inflight[h.req.Class][h.req.Tenant] == 0 {
		delete(m.inflight[h.req.Class], h.req.Tenant)
	}
}

// step performs one random operation.
func (m *tenantModel) step(t *testing.T, l *shed.Limiter, rng *rand.Rand, now *int, tenants []string, classes int) {
	req := shed.Request{Tenant: tenants[rng.IntN(len(tenants))], Class: shed.Class(rng.IntN(classes)), Cost: 1 + rng.Int64N(12)}
	switch op := rng.IntN(20); {
	case op < 6:
		p, err := l.TryAcquireAt(at(*now), req)
		if err == nil {
			m.admit(p, req)
		} else if !errors.Is(err, shed.ErrRejected) {
			t.Fatalf("TryAcquireAt: %v", err)
		}
	case op < 10:
		w := shed.NewWaiter(func(w *shed.Waiter) {
			m.unqueue(w)
			if p, err := w.Result(); err == nil {
				m.admit(p, w.Request())
			}
		})
		p, queued, err := l.EnqueueAt(at(*now), req, w)
		switch {
		case queued:
			m.queued[w] = req
			m.waiting[req.Class][req.Tenant]++
		case err == nil:
			m.admit(p, req)
		case !errors.Is(err, shed.ErrRejected):
			t.Fatalf("EnqueueAt: %v", err)
		}
	case op < 15 && len(m.held) > 0:
		i := rng.IntN(len(m.held))
		p := *m.held[i].p
		m.release(l, i, at(*now), shed.Outcome(rng.IntN(3)))
		if rng.IntN(5) == 0 {
			p.ReleaseAt(at(*now), shed.Success) // a copy, released again
		}
	case op < 16 && len(m.held) > 0:
		h := m.held[rng.IntN(len(m.held))]
		_ = h.p.ReconcileAt(at(*now), rng.Int64N(2*h.p.Cost()+1))
	case op < 17 && len(m.queued) > 0:
		for w := range m.queued {
			if l.CancelAt(at(*now), w) {
				m.unqueue(w)
			}
			break
		}
	default:
		*now += rng.IntN(3)
		l.ExpireAt(at(*now))
	}
}

// check verifies the invariants after an operation; before is what each
// tenant held before it.
func (m *tenantModel) check(t *testing.T, l *shed.Limiter, op int, before [2]map[string]int64, shares bool, weights map[string]float64) {
	snap := l.Snapshot()
	for c := range snap.Classes {
		got, total := shed.TenantCounts(l, shed.Class(c))
		want := 0
		var sum int64
		for name := range unionKeys(m.inflight[c], m.waiting[c]) {
			want++
			if g := got[name]; g[0] != m.inflight[c][name] || g[2] != m.waiting[c][name] {
				t.Fatalf("op %d: class %d tenant %s: limiter counts %v, test counts %d in flight, %d queued", op, c, name, g, m.inflight[c][name], m.waiting[c][name])
			}
			sum += m.inflight[c][name]
		}
		if len(got) != want || snap.Classes[c].Tenants != want {
			t.Fatalf("op %d: class %d tracks %d tenants (snapshot %d), want %d: %v", op, c, len(got), snap.Classes[c].Tenants, want, got)
		}
		if int(sum) != snap.Classes[c].InFlight {
			t.Fatalf("op %d: class %d: tenants hold %d, the class %d", op, c, sum, snap.Classes[c].InFlight)
		}
		if !shares {
			continue
		}
		free := int64(snap.Limit - snap.InFlight)
		for j := 0; j < c; j++ {
			if snap.Classes[j].Queued > 0 {
				free = 0 // a higher class waits: this one may take nothing
			}
		}
		if free > 0 && snap.Classes[c].Queued == 0 {
			continue // not contended (by count)
		}
		capacity := uint64(int64(snap.Classes[c].InFlight) + free)
		for name, n := range m.inflight[c] {
			if n <= before[c][name] {
				continue // not admitted by this operation
			}
			w := uint64(weights[name] * shed.WeightUnit)
			if share := (capacity*w + total - 1) / total; uint64(n) > share {
				t.Fatalf("op %d: class %d contended, %s admitted to %d, over its share %d (capacity %d, weight %d of %d)", op, c, name, n, share, capacity, w, total)
			}
		}
	}
}

func unionKeys(a, b map[string]int64) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}
