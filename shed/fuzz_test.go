package shed_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// opMachine drives one Limiter through the explicit-time API from a single
// goroutine and keeps a model of what must be true: the permits it holds
// are exactly the work in flight, the waiters it queued are exactly the
// queue, and every waiter's outcome arrives once. FuzzConfig feeds it
// operations from fuzzed bytes; TestVirtualTimeProperty (fault_test.go)
// from a seeded generator.
type opMachine struct {
	t   testing.TB
	l   *shed.Limiter
	cfg shed.Config // as given to New
	src *fakeSource // nil for a static limit
	now time.Time

	classes  int
	held     []shed.Permit
	queued   map[*shed.Waiter]shed.Class
	order    []*shed.Waiter // queued waiters, oldest first (some already gone)
	pending  []*shed.Waiter // outcomes delivered during the current operation
	draining bool

	// What the model counted, to compare with the snapshot at the end.
	admitted   [shed.MaxClasses]uint64
	afterWait  [shed.MaxClasses]uint64
	enqueued   [shed.MaxClasses]uint64
	cancelled  [shed.MaxClasses]uint64
	queueEnded [shed.MaxClasses]uint64 // waiters rejected after queueing
	delivered  map[*shed.Waiter]int
	retryMin   time.Duration
	retryMax   time.Duration
}

func newOpMachine(t testing.TB, l *shed.Limiter, cfg shed.Config, src *fakeSource) *opMachine {
	m := &opMachine{
		t: t, l: l, cfg: cfg, src: src, now: t0,
		classes:   max(len(cfg.Classes), 1),
		queued:    map[*shed.Waiter]shed.Class{},
		delivered: map[*shed.Waiter]int{},
	}
	m.retryMin = cfg.RetryAfterMin
	if m.retryMin == 0 {
		m.retryMin = shed.DefaultRetryAfterMin
	}
	m.retryMax = cfg.RetryAfterMax
	if m.retryMax == 0 {
		m.retryMax = max(shed.DefaultRetryAfterMax, m.retryMin)
	}
	return m
}

func (m *opMachine) notify(w *shed.Waiter) {
	m.delivered[w]++
	m.pending = append(m.pending, w)
}

// settle takes in the outcomes delivered during an operation and checks the
// invariants that hold between operations.
func (m *opMachine) settle(op string) {
	m.t.Helper()
	admittedNow := false
	for _, w := range m.pending {
		c, ok := m.queued[w]
		if !ok {
			m.t.Fatalf("%s: outcome delivered to a waiter that is not queued", op)
		}
		if m.delivered[w] != 1 {
			m.t.Fatalf("%s: waiter notified %d times", op, m.delivered[w])
		}
		delete(m.queued, w)
		p, err := w.Result()
		switch {
		case err == nil:
			if !p.Valid() || p.Class() != c {
				m.t.Fatalf("%s: waiter of class %d granted permit %+v", op, c, p)
			}
			m.held = append(m.held, p)
			m.admitted[c]++
			m.afterWait[c]++
			admittedNow = true
		default:
			r := shed.ReasonOf(err)
			// A waiter whose tenant is over its share at its turn is
			// rejected for it.
			if r != shed.ReasonQueueTimeout && r != shed.ReasonDraining && (r != shed.ReasonTenantShare || w.Request().Tenant == "") {
				m.t.Fatalf("%s: waiter rejected with %v (%v), want queue_timeout, draining or (with a tenant) tenant_share", op, r, err)
			}
			m.checkRejection(op, err)
			m.queueEnded[c]++
		}
	}
	m.pending = m.pending[:0]
	m.check(op, admittedNow)
}

// check compares the limiter with the model.
func (m *opMachine) check(op string, admittedNow bool) {
	m.t.Helper()
	snap := m.l.Snapshot()
	var cost int64
	for i := range m.held {
		cost += m.held[i].Cost()
	}
	if snap.InFlight != len(m.held) || snap.InFlightCost != cost {
		m.t.Fatalf("%s: limiter has %d in flight (cost %d), the model holds %d permits (cost %d)", op, snap.InFlight, snap.InFlightCost, len(m.held), cost)
	}
	if snap.InFlight < 0 || snap.InFlightCost < 0 {
		m.t.Fatalf("%s: negative in flight %d / cost %d", op, snap.InFlight, snap.InFlightCost)
	}
	if snap.Queued != len(m.queued) {
		m.t.Fatalf("%s: limiter has %d queued, the model %d", op, snap.Queued, len(m.queued))
	}
	// Only tenants with work in flight or queued are tracked.
	if snap.Tenants > len(m.held)+len(m.queued) {
		m.t.Fatalf("%s: %d tenants tracked for %d permits and %d waiters", op, snap.Tenants, len(m.held), len(m.queued))
	}
	// Scanning the guard table is slow under the race detector: only when
	// nothing is held, which happens often enough.
	if len(m.held) == 0 {
		if g := shed.GuardsHeld(m.l); g != 0 {
			m.t.Fatalf("%s: %d guard slots held with nothing in flight", op, g)
		}
	}
	if snap.Draining != m.draining {
		m.t.Fatalf("%s: draining %v, want %v", op, snap.Draining, m.draining)
	}
	// Admission never goes past the limit or the cost budget (except in
	// dry-run mode); a limit that shrinks later does not revoke work.
	if admittedNow && !m.cfg.DryRun {
		if snap.InFlight > snap.Limit {
			m.t.Fatalf("%s: admitted to %d in flight over a limit of %d", op, snap.InFlight, snap.Limit)
		}
		if m.cfg.MaxCost > 0 && snap.InFlightCost > m.cfg.MaxCost {
			m.t.Fatalf("%s: admitted to cost %d over a budget of %d", op, snap.InFlightCost, m.cfg.MaxCost)
		}
	}
	if snap.Limit < 1 || snap.Limit > shed.MaxLimit {
		m.t.Fatalf("%s: limit %d outside [1, %d]", op, snap.Limit, shed.MaxLimit)
	}
}

// checkRejection checks that err is a well-formed rejection.
func (m *opMachine) checkRejection(op string, err error) {
	m.t.Helper()
	var rej *shed.Rejection
	if !errors.As(err, &rej) || !errors.Is(err, shed.ErrRejected) {
		m.t.Fatalf("%s: error %v is not a *Rejection", op, err)
	}
	// The hint is raised to RetryAfterMin, rounded up and capped at
	// RetryAfterMax: rounding never takes it out of the bounds.
	if rej.RetryAfter < m.retryMin || rej.RetryAfter > m.retryMax {
		m.t.Fatalf("%s: Retry-After %v outside [%v, %v]", op, rej.RetryAfter, m.retryMin, m.retryMax)
	}
	if int(rej.Class) >= m.classes || rej.ClassName != m.l.ClassName(rej.Class) {
		m.t.Fatalf("%s: rejection names class %d %q", op, rej.Class, rej.ClassName)
	}
}

// fuzzTenants are the tenants of fuzzed requests: none, quiet ones and a
// noisy one.
var fuzzTenants = [8]string{"", "", "", "a", "b", "noisy", "noisy", "noisy"}

// request builds a request from three bytes: class (one past the last to
// exercise ErrInvalidRequest) and, from its top bits, tenant; cost
// (negative sometimes); deadline.
func (m *opMachine) request(a, b, c byte) shed.Request {
	cls := int(a) % (m.classes + 1)
	if cls == m.classes && a < 0xf0 {
		cls = 0 // keep unknown classes rare
	}
	req := shed.Request{Class: shed.Class(cls), Tenant: fuzzTenants[a>>5]}
	req.Cost = int64(int8(b))
	if b == 0x7f {
		req.Cost = m.cfg.MaxCost + 1 // over the whole budget
	}
	if c != 0 {
		req.Deadline = m.now.Add(time.Duration(c) * time.Millisecond)
	}
	return req
}

// queuedWaiters returns the queued waiters in the order they queued, so
// that a run is reproducible.
func (m *opMachine) queuedWaiters() []*shed.Waiter {
	ws := make([]*shed.Waiter, 0, len(m.queued))
	for _, w := range m.order {
		if _, ok := m.queued[w]; ok {
			ws = append(ws, w)
		}
	}
	m.order = ws
	return ws
}

func (m *opMachine) maxWait(c shed.Class) time.Duration {
	if len(m.cfg.Classes) == 0 {
		return 0
	}
	return m.cfg.Classes[c].MaxWait
}

func (m *opMachine) invalid(req shed.Request) bool {
	return int(req.Class) >= m.classes || req.Cost < 0
}

// acquired handles the result of an admission attempt.
func (m *opMachine) acquired(op string, req shed.Request, p shed.Permit, err error) {
	m.t.Helper()
	switch {
	case err == nil:
		if m.invalid(req) {
			m.t.Fatalf("%s: invalid request %+v admitted", op, req)
		}
		if !p.Valid() || p.Class() != req.Class || p.Cost() != max(req.Cost, 1) {
			m.t.Fatalf("%s: permit %+v for request %+v", op, p, req)
		}
		m.held = append(m.held, p)
		m.admitted[req.Class]++
		m.settle(op + " (admitted)")
		return
	case errors.Is(err, shed.ErrInvalidRequest):
		if !m.invalid(req) {
			m.t.Fatalf("%s: valid request %+v refused: %v", op, req, err)
		}
	default:
		if m.invalid(req) {
			m.t.Fatalf("%s: invalid request %+v: %v, want ErrInvalidRequest", op, req, err)
		}
		m.checkRejection(op, err)
		if r := shed.ReasonOf(err); m.draining && r != shed.ReasonDraining && r != shed.ReasonCostTooLarge {
			m.t.Fatalf("%s: rejected with %v while draining", op, shed.ReasonOf(err))
		}
		if m.cfg.MaxCost > 0 && req.Cost > m.cfg.MaxCost && shed.ReasonOf(err) != shed.ReasonCostTooLarge {
			m.t.Fatalf("%s: cost %d over the budget %d rejected with %v", op, req.Cost, m.cfg.MaxCost, shed.ReasonOf(err))
		}
	}
	m.settle(op)
}

// step runs the operation encoded by op and the bytes after it; it returns
// how many bytes it used.
func (m *opMachine) step(ops []byte) int {
	m.t.Helper()
	arg := func(i int) byte {
		if i < len(ops) {
			return ops[i]
		}
		return 0
	}
	op := ops[0]
	switch op % 12 {
	case 0, 1: // non-blocking admission
		m.opTryAcquire(m.request(arg(1), arg(2), arg(3)))
		return 4
	case 2, 3: // admission that may queue
		m.opEnqueue(m.request(arg(1), arg(2), arg(3)))
		return 4
	case 4, 5: // finish some work
		m.opRelease(arg(1), arg(2))
		return 3
	case 6: // a queued caller gives up
		m.opCancel(arg(1))
		return 2
	case 7: // time passes; the queue's timers fire
		m.now = m.now.Add(time.Duration(arg(1)) * time.Millisecond)
		m.l.ExpireAt(m.now)
		m.settle("ExpireAt")
		return 2
	case 8: // the actual cost is known
		m.opReconcile(arg(1), arg(2))
		return 3
	case 9: // an adaptive limit moves
		if m.src != nil {
			m.src.Set(int(int8(arg(1))))
			m.settle("limit change")
		}
		return 2
	case 10: // the service shuts down (rarely)
		if arg(1) == 0xd5 {
			m.l.DrainAt(m.now)
			m.draining = true
			m.settle("DrainAt")
		}
		return 2
	default: // time passes without timers (a simulator that is late)
		m.now = m.now.Add(time.Duration(arg(1)) * time.Microsecond)
		return 2
	}
}

// opTryAcquire is step's non-blocking admission of req.
func (m *opMachine) opTryAcquire(req shed.Request) {
	m.t.Helper()
	p, err := m.l.TryAcquireAt(m.now, req)
	m.acquired(fmt.Sprintf("TryAcquireAt(%+v)", req), req, p, err)
}

// opEnqueue is step's admission of req that may queue; a queued waiter
// joins the model with its class, in queueing order.
func (m *opMachine) opEnqueue(req shed.Request) {
	m.t.Helper()
	w := shed.NewWaiter(m.notify)
	name := fmt.Sprintf("EnqueueAt(%+v)", req)
	p, queued, err := m.l.EnqueueAt(m.now, req, w)
	if !queued {
		m.acquired(name, req, p, err)
		return
	}
	if err != nil || p.Valid() {
		m.t.Fatalf("%s: queued with permit %+v, error %v", name, p, err)
	}
	if m.invalid(req) || m.draining {
		m.t.Fatalf("%s: queued (draining %v)", name, m.draining)
	}
	m.queued[w] = req.Class
	m.order = append(m.order, w)
	m.enqueued[req.Class]++
	if d := w.Deadline(); d.Before(m.now) || d.After(m.now.Add(m.maxWait(req.Class))) {
		m.t.Fatalf("%s: waiter deadline %v outside [now, now + MaxWait]", name, d.Sub(m.now))
	}
	m.settle(name)
}

// opRelease is step's end of held work: which permit is picked by pick,
// the outcome and whether the work panics by how.
func (m *opMachine) opRelease(pick, how byte) {
	m.t.Helper()
	if len(m.held) == 0 {
		return
	}
	i := int(pick) % len(m.held)
	o := shed.Outcome(how % 3)
	p := m.held[i]
	m.held = append(m.held[:i], m.held[i+1:]...)
	if how&0x80 != 0 {
		// The work panics; its deferred release must run.
		func() {
			defer func() { _ = recover() }()
			defer p.ReleaseAt(m.now, shed.Dropped)
			panic("work failed")
		}()
	} else {
		p.ReleaseAt(m.now, o)
	}
	if p.Valid() {
		m.t.Fatal("a released permit is still valid")
	}
	p.ReleaseAt(m.now, o) // a second release of the same variable does nothing
	m.settle("ReleaseAt")
}

// opCancel is step's cancellation of the queued waiter picked by pick,
// cancelled twice to check that only the first removes it.
func (m *opMachine) opCancel(pick byte) {
	m.t.Helper()
	ws := m.queuedWaiters()
	if len(ws) == 0 {
		return
	}
	w := ws[int(pick)%len(ws)]
	c := m.queued[w]
	if !m.l.CancelAt(m.now, w) {
		m.t.Fatal("CancelAt: a queued waiter was not found")
	}
	delete(m.queued, w)
	m.cancelled[c]++
	if m.l.CancelAt(m.now, w) {
		m.t.Fatal("CancelAt twice removed the waiter twice")
	}
	m.settle("CancelAt")
}

// opReconcile is step's reconciliation of the permit picked by pick to the
// actual cost in cost (negative sometimes, which must be refused).
func (m *opMachine) opReconcile(pick, cost byte) {
	m.t.Helper()
	if len(m.held) == 0 {
		return
	}
	i := int(pick) % len(m.held)
	actual := int64(int8(cost))
	before := m.held[i].Cost()
	err := m.held[i].ReconcileAt(m.now, actual)
	switch {
	case actual < 0:
		if !errors.Is(err, shed.ErrInvalidRequest) || m.held[i].Cost() != before {
			m.t.Fatalf("ReconcileAt(%d): %v, cost %d", actual, err, m.held[i].Cost())
		}
	case err != nil || m.held[i].Cost() != actual:
		m.t.Fatalf("ReconcileAt(%d): %v, cost %d", actual, err, m.held[i].Cost())
	}
	m.settle("ReconcileAt")
}

// finish releases everything and checks that the limiter ends empty with
// consistent counters.
func (m *opMachine) finish() {
	m.t.Helper()
	bound := 4*(len(m.held)+len(m.queued)) + 100
	for round := 0; len(m.held) > 0 || len(m.queued) > 0; round++ {
		if round > bound {
			m.t.Fatalf("the limiter does not empty: %d held, %d queued", len(m.held), len(m.queued))
		}
		if len(m.held) > 0 {
			p := m.held[len(m.held)-1]
			m.held = m.held[:len(m.held)-1]
			p.ReleaseAt(m.now, shed.Success)
			m.settle("final ReleaseAt")
			continue
		}
		// Nothing runs: every waiter times out by its deadline.
		m.now = m.now.Add(time.Hour)
		m.l.ExpireAt(m.now)
		m.settle("final ExpireAt")
	}
	snap := m.l.Snapshot()
	if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Queued != 0 || snap.Tenants != 0 {
		m.t.Fatalf("after releasing everything: in flight %d, cost %d, queued %d, tenants %d", snap.InFlight, snap.InFlightCost, snap.Queued, snap.Tenants)
	}
	if g := shed.GuardsHeld(m.l); g != 0 {
		m.t.Fatalf("after releasing everything: %d guard slots held", g)
	}
	for i, c := range snap.Classes {
		if c.InFlight != 0 || c.Queued != 0 {
			m.t.Errorf("class %s: in flight %d, queued %d", c.Name, c.InFlight, c.Queued)
		}
		if c.Misused != 0 {
			m.t.Errorf("class %s: %d misuses reported, the model made none", c.Name, c.Misused)
		}
		released := c.Released[0] + c.Released[1] + c.Released[2] + c.Leaked
		if c.Admitted != released || c.Admitted != m.admitted[i] {
			m.t.Errorf("class %s: admitted %d (model %d), released %v", c.Name, c.Admitted, m.admitted[i], c.Released)
		}
		if c.Enqueued != m.enqueued[i] || c.AdmittedAfterWait != m.afterWait[i] || c.Cancelled != m.cancelled[i] {
			m.t.Errorf("class %s: enqueued %d, after wait %d, cancelled %d; model %d, %d, %d", c.Name, c.Enqueued, c.AdmittedAfterWait, c.Cancelled, m.enqueued[i], m.afterWait[i], m.cancelled[i])
		}
		// Every queued request ended exactly one way.
		if c.Enqueued != c.AdmittedAfterWait+c.Cancelled+m.queueEnded[i] {
			m.t.Errorf("class %s: %d queued, but %d admitted after waiting + %d cancelled + %d rejected from the queue", c.Name, c.Enqueued, c.AdmittedAfterWait, c.Cancelled, m.queueEnded[i])
		}
		if c.Rejected[shed.ReasonQueueTimeout] > m.queueEnded[i] {
			m.t.Errorf("class %s: %d queue timeouts, but only %d waiters were rejected", c.Name, c.Rejected[shed.ReasonQueueTimeout], m.queueEnded[i])
		}
	}
	for w, n := range m.delivered {
		if n != 1 {
			m.t.Errorf("waiter %p notified %d times", w, n)
		}
	}
}

// fuzzConfig builds a Config from fuzzed values. Each class takes 4 bytes
// of spec: protected share (in 1/200, so some exceed 1), queue depth
// (signed), max wait in ms (signed), LIFO.
func fuzzConfig(limit int, maxCost int64, spec []byte, share0 float64, strict, dryRun bool, maxQueue int, raMin, raMax int64, useSource bool) (shed.Config, *fakeSource) {
	cfg := shed.Config{
		Limit:         limit,
		MaxCost:       maxCost,
		Strict:        strict,
		DryRun:        dryRun,
		MaxQueue:      maxQueue,
		RetryAfterMin: time.Duration(raMin),
		RetryAfterMax: time.Duration(raMax),
		DemandHold:    time.Duration(len(spec)) * time.Millisecond,
	}
	var src *fakeSource
	if useSource {
		src = newFakeSource(limit)
		cfg.Source, cfg.Limit = src, 0
		if limit < 0 {
			cfg.Limit = 1 // a limit and a source: an error
		}
	}
	for i := 0; i+4 <= len(spec) && i/4 <= shed.MaxClasses; i += 4 {
		c := shed.ClassConfig{
			Name:       fmt.Sprintf("c%d", i/4),
			Protected:  float64(spec[i]) / 200,
			QueueDepth: int(int8(spec[i+1])) % 8,
			MaxWait:    time.Duration(int8(spec[i+2])) * time.Millisecond,
			LIFO:       spec[i+3]&1 != 0,
		}
		if c.QueueDepth > 0 && spec[i+3]&2 != 0 && c.MaxWait == 0 {
			c.MaxWait = 5 * time.Millisecond // keep most queues valid
		}
		if c.QueueDepth <= 0 && spec[i+3]&4 != 0 {
			c.MaxWait = 0
		}
		if i == 0 {
			c.Protected = share0
		}
		if spec[i+3]&8 != 0 && i > 0 {
			c.Name = "c0" // a duplicate name
		}
		cfg.Classes = append(cfg.Classes, c)
	}
	return cfg, src
}

// FuzzConfig: New returns an error that wraps ErrInvalidConfig, or a
// limiter that keeps its invariants through a fuzzed sequence of
// operations in virtual time (see opMachine) and ends empty.
func FuzzConfig(f *testing.F) {
	type seed struct {
		limit     int
		maxCost   int64
		spec      []byte
		share0    float64
		strict    bool
		dryRun    bool
		maxQueue  int
		raMin     int64
		raMax     int64
		useSource bool
		ops       []byte
	}
	ops := []byte{2, 0, 1, 0, 2, 0, 1, 0, 2, 0, 1, 0, 2, 1, 1, 0, 4, 0, 0, 7, 3, 6, 8, 0, 5, 0, 0, 1, 2, 2, 2, 7, 200, 10, 0xd5, 0, 1, 1, 1}
	for _, s := range []seed{
		{limit: 2, spec: []byte{100, 2, 10, 0, 0, 1, 5, 1}, share0: 0.5, ops: ops},
		{limit: 1, maxCost: 10, spec: []byte{0, 3, 20, 1}, ops: ops},
		{limit: 3, spec: []byte{50, 4, 50, 0, 50, 4, 50, 1, 0, 0, 0, 0}, share0: 0.3, strict: true, maxQueue: 3, ops: ops},
		{limit: 2, dryRun: true, ops: ops},
		{limit: 4, useSource: true, spec: []byte{0, 2, 5, 0}, ops: []byte{9, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 9, 0xff, 4, 0, 0, 9, 3, 7, 10}},
		{limit: 2, raMin: int64(100 * time.Millisecond), raMax: int64(500 * time.Millisecond), ops: ops},
		{limit: 0, ops: ops},                                                  // invalid
		{limit: shed.MaxLimit + 1, ops: ops},                                  // invalid
		{limit: 1, share0: math.NaN(), spec: []byte{0, 0, 0, 0}},              // invalid
		{limit: 1, spec: []byte{0, 1, 0, 0}},                                  // queue without wait
		{limit: 1, raMin: int64(time.Second), raMax: int64(time.Millisecond)}, // invalid
		{limit: 1, raMax: math.MaxInt64, ops: []byte{0, 0, 0x7f, 0}},
		{limit: 1, maxCost: 5, raMax: math.MaxInt64 - 1, ops: []byte{0, 0, 0x7f, 0}},
	} {
		f.Add(s.limit, s.maxCost, s.spec, s.share0, s.strict, s.dryRun, s.maxQueue, s.raMin, s.raMax, s.useSource, s.ops)
	}
	f.Fuzz(func(t *testing.T, limit int, maxCost int64, spec []byte, share0 float64, strict, dryRun bool, maxQueue int, raMin, raMax int64, useSource bool, ops []byte) {
		if len(ops) > 4096 || len(spec) > 4*(shed.MaxClasses+2) {
			return
		}
		cfg, src := fuzzConfig(limit, maxCost, spec, share0, strict, dryRun, maxQueue, raMin, raMax, useSource)
		l, err := shed.New(cfg)
		if err != nil {
			if l != nil || !errors.Is(err, shed.ErrInvalidConfig) {
				t.Fatalf("New: limiter %v, error %v (want nil and ErrInvalidConfig)", l, err)
			}
			return
		}
		m := newOpMachine(t, l, cfg, src)
		m.check("New", false)
		for len(ops) > 0 {
			n := m.step(ops)
			ops = ops[min(n, len(ops)):]
		}
		m.finish()
	})
}
