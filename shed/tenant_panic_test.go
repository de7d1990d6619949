package shed_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// These tests check the contract documented on Config.TenantWeight: a
// panicking weight propagates to the caller, and the request that asked
// decided nothing, on the lock-free path and on the locked one alike.

// plans is a TenantWeight with the bug that the contract is about: a
// tenant it does not know is a nil pointer.
func plans(name string) float64 {
	known := map[string]*struct{ weight float64 }{"known": {2}}
	return known[name].weight
}

// panicsWith calls f and reports whether it panicked.
func panicsWith(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}

// TestTenantWeightPanicFastPath: with capacity free, a panicking weight
// used to keep the slot its admission had taken, so that after Limit
// panics the limiter rejected everything for good.
func TestTenantWeightPanicFastPath(t *testing.T) {
	const limit = 3
	l := mustNew(t, shed.Config{Limit: limit, TenantWeight: plans})
	for i := range 2 * limit {
		if !panicsWith(func() { _, _ = l.TryAcquireAt(at(i), shed.Request{Tenant: "made-up"}) }) {
			t.Fatalf("acquire %d of an unknown tenant did not panic", i)
		}
	}
	if n := l.InFlight(); n != 0 {
		t.Fatalf("after the panics: %d in flight, want 0", n)
	}
	if m, w := shed.TenantCounts(l, 0); len(m) != 0 || w != 0 {
		t.Fatalf("after the panics: tenants %v (weight %d) tracked, want none", m, w)
	}
	var ps []shed.Permit
	for range limit {
		ps = append(ps, mustAcquire(t, l, at(10), shed.Request{Tenant: "known"}))
	}
	if m, w := shed.TenantCounts(l, 0); m["known"] != [3]int64{limit, limit, 0} || w != 2*shed.WeightUnit {
		t.Fatalf("known tenant: counts %v, weight %d; want %d in flight, weight 2", m, w, limit)
	}
	for _, p := range ps {
		p.ReleaseAt(at(11), shed.Success)
	}
	wantNoTenants(t, l)
}

// TestTenantWeightPanicLockedPath: a panicking weight called under the
// limiter's lock (a request that would queue, or a dry run) used to leave
// the lock held, so that every later call blocked for ever. Without a
// queue, the request is rejected without the lock, which it must not
// disturb either.
func TestTenantWeightPanicLockedPath(t *testing.T) {
	queue := []shed.ClassConfig{{Name: "q", QueueDepth: 4, MaxWait: time.Second}}
	for _, tc := range []struct {
		name string
		cfg  shed.Config
	}{
		{"queue", shed.Config{Limit: 1, Classes: queue}},
		{"no queue", shed.Config{Limit: 1}},
		{"dry run", shed.Config{Limit: 1, Classes: queue, DryRun: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.TenantWeight = plans
			l := mustNew(t, tc.cfg)
			first := mustAcquire(t, l, at(0), shed.Request{Tenant: "known"})
			w := shed.NewWaiter(func(*shed.Waiter) {})
			if !panicsWith(func() { _, _, _ = l.EnqueueAt(at(1), shed.Request{Tenant: "made-up"}, w) }) {
				t.Fatal("EnqueueAt of an unknown tenant did not panic")
			}
			done := make(chan shed.Permit)
			go func() {
				first.ReleaseAt(at(2), shed.Success)
				p, _ := l.TryAcquireAt(at(3), shed.Request{Tenant: "known"})
				done <- p
			}()
			var p shed.Permit
			select {
			case p = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("release and acquire blocked after the panic: the limiter's lock is still held")
			}
			if !p.Valid() {
				t.Fatal("a known tenant was not admitted after the panic")
			}
			if n := l.InFlight(); n != 1 {
				t.Fatalf("%d in flight, want 1", n)
			}
			p.ReleaseAt(at(4), shed.Success)
			wantNoTenants(t, l)
		})
	}
}
