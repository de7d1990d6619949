package shed

// GuardsHeld returns how many guard slots are held, for tests: a slot is
// held exactly while its permit is in flight, so with nothing in flight
// none may be.
func GuardsHeld(l *Limiter) int {
	n := 0
	for i := range l.guards {
		if l.guards[i].Load() != 0 {
			n++
		}
	}
	return n
}

// GuardSlots returns the size of l's guard table.
func GuardSlots(l *Limiter) int { return len(l.guards) }

// TenantCounts returns, for tests, the in-flight count, cost and queued
// count of every tenant class c tracks, and the summed weight of them (in
// units of 1/WeightUnit).
func TenantCounts(l *Limiter, c Class) (map[string][3]int64, uint64) {
	m := make(map[string][3]int64)
	for i := range l.tenants.shards {
		sh := &l.tenants.shards[i]
		sh.mu.Lock()
		for name, e := range sh.m[c] {
			m[name] = [3]int64{e.inflight, e.cost, e.queued}
		}
		sh.mu.Unlock()
	}
	return m, l.tenants.active[c].Load()
}

// WeightUnit is the fixed-point unit of tenant weights.
const WeightUnit = weightUnit

// ProbeHeld reports whether class c's last deadline probe is still held:
// no sample came since it was claimed, and it was not given back.
func ProbeHeld(l *Limiter, c Class) bool {
	cc := &l.counts[c]
	return cc.serviceAt.Load() == cc.probeClaim.Load()
}
