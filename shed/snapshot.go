package shed

import "time"

// NumReasons is the number of Reason values, for indexing Rejected.
const NumReasons = numReasons

// Snapshot is a point-in-time view of a Limiter for metrics and debugging.
// Counters are cumulative since the limiter was created. Fields are read
// without stopping admissions, so they may be mutually off by the
// operations in progress.
type Snapshot struct {
	Limit        int // 0 while a Prober's limit is closed
	InFlight     int
	InFlightCost int64
	// MaxCost is the cost budget, 0 when there is none.
	MaxCost  int64
	Queued   int
	Draining bool
	DryRun   bool
	// Tenants is how many tenants the limiter tracks over all classes
	// (see ClassSnapshot.Tenants).
	Tenants int
	Classes []ClassSnapshot
}

// ClassSnapshot is the part of a Snapshot about one class.
type ClassSnapshot struct {
	Name string
	// InFlight and InFlightCost are the class's work in flight. The cost
	// of each class is tracked when there is one class or a cost budget
	// (Config.MaxCost); otherwise InFlightCost is 0 and only the limiter's
	// total (Snapshot.InFlightCost) is known.
	InFlight     int
	InFlightCost int64
	// Protected is the part of the current limit reserved for the class.
	Protected int
	Queued    int
	// Enqueued counts requests that joined the queue; each ends admitted
	// (AdmittedAfterWait), rejected (queue timeout, draining, tenant
	// share) or Cancelled.
	Enqueued uint64
	// Admitted counts admissions, AdmittedAfterWait those that queued first.
	Admitted          uint64
	AdmittedAfterWait uint64
	// Queued requests that gave up (context ended) before a decision.
	Cancelled uint64
	// Rejected counts rejections by Reason (dry-run: would-be rejections).
	Rejected [NumReasons]uint64
	// Released counts releases by Outcome (Success, Dropped, Ignored).
	Released [3]uint64
	// Leaked counts permits reclaimed from the garbage collector.
	Leaked uint64
	// Misused counts misuses of the class's permits that the limiter
	// detected and absorbed (each also reported as an EventMisused): a
	// copy of a Permit value released or reconciled after another copy
	// was released. They gave nothing back twice and are not counted as
	// releases. Nonzero means a bug in the caller: pass *Permit around
	// rather than copies, or set Config.TrackLeaks to find it.
	Misused uint64
	// ServiceTime is the class's expected service time, which the deadline
	// check weighs (see Config.DeadlineMargin): about the median time its
	// recent timed work held a permit, per unit of cost with
	// Config.ServiceTimePerCost. Zero until the class has timed work, and
	// always zero when DeadlineMargin is zero.
	ServiceTime time.Duration
	// Tenants is how many tenants (Request.Tenant) have work of the class
	// in flight or queued: the limiter tracks those, and only those, to
	// hold each to its share. Rejected[ReasonTenantShare] counts the
	// requests refused for being over it.
	Tenants int
}

// Rejections returns the class's rejections over all reasons.
func (c ClassSnapshot) Rejections() uint64 {
	var t uint64
	for _, n := range c.Rejected {
		t += n
	}
	return t
}

// Snapshot returns the limiter's current state and counters.
func (l *Limiter) Snapshot() Snapshot {
	s := l.state.Load()
	limit := l.limit()
	snap := Snapshot{
		Limit:        int(limit),
		InFlight:     int(inFlightOf(s)),
		InFlightCost: costOf(s),
		DryRun:       l.dryRun,
		Classes:      make([]ClassSnapshot, len(l.cfg)),
	}
	if l.costBudget {
		snap.MaxCost = l.maxCost
	}
	l.mu.Lock()
	snap.Queued = l.queued
	snap.Draining = l.draining
	for i := range l.cfg {
		snap.Classes[i].Queued = l.queues[i].n
	}
	l.mu.Unlock()
	for i := range l.cfg {
		c := Class(i)
		cs := &snap.Classes[i]
		cc := &l.counts[i]
		hc := l.hot(c)
		cs.Name = l.names[i]
		if l.multi {
			cs.InFlight = int(hc.inflight())
			if l.classCost {
				cs.InFlightCost = hc.cost()
			}
		} else {
			cs.InFlight, cs.InFlightCost = snap.InFlight, snap.InFlightCost
		}
		n, _ := l.reserved(i, limit)
		cs.Protected = int(n)
		cs.Admitted = hc.admitted.Load()
		cs.AdmittedAfterWait = cc.afterWait.Load()
		cs.Cancelled = cc.cancelled.Load()
		cs.Enqueued = cc.queued.Load()
		for r := range cs.Rejected {
			cs.Rejected[r] = cc.rejected[r].Load()
		}
		for o := range cs.Released {
			cs.Released[o] = hc.released[o].Load()
		}
		cs.Leaked = hc.leaked.Load()
		cs.Misused = cc.misused.Load()
		cs.ServiceTime = time.Duration(l.serviceEstimate(c))
		cs.Tenants = l.trackedTenants(c)
		snap.Tenants += cs.Tenants
		if !l.multi {
			out := uint64(cs.InFlight) + cs.Released[Dropped] + cs.Released[Ignored] + cs.Leaked
			if cs.Admitted > out {
				cs.Released[Success] = cs.Admitted - out
			}
		}
	}
	return snap
}
