package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// Epoch is the virtual time at which every run starts. Any fixed instant
// would do; a fixed one keeps limiter and budget epochs identical across
// runs. It is a constant in effect: a function, so that no caller can move it.
func Epoch() time.Time {
	return epoch
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// layer says which layer a task belongs to.
type layer uint8

const (
	layerClient  layer = iota // a logical request at the client
	layerGateway              // a request at the gateway
	layerService              // a request at a service replica
	layerJob                  // a job at the upstream
)

// result is the answer to an attempt.
type result uint8

const (
	resOK        result = iota
	resError            // the upstream failed
	resShed             // a limiter rejected the request
	resTimeout          // the caller's attempt timer fired
	resThrottled        // the caller's own throttle refused to send
)

// Task states.
const (
	stActive  uint8 = iota // an attempt is out (or being made)
	stBackoff              // waiting to retry
	stQueued               // a service request waiting in its limiter's queue
	// stReleasing: a service request whose handler has returned, its
	// response waiting for its lease's release (Service.Store)
	stReleasing
	stDone
)

// task is a request at one layer. Tasks live in slots and are reused.
// Each slot has a generation (engine.gens), bumped whenever the task
// starts or ends an attempt and when it is freed: an event or a child
// that carries the generation it saw is current exactly when the slot
// still has it. A caller is waiting for a child's answer exactly when its
// generation is the one the child was sent with. The generations live in
// a dense array so that the many stale timers are recognized without
// touching the tasks they point to.
type task struct {
	// Hot fields first: a job's completion and its parent's answer touch
	// only the first cache line.
	slot    int32
	kind    layer
	class   uint8
	state   uint8
	res     result
	nanc    int8
	fail    bool  // upstream jobs: the job fails
	refused bool  // upstream jobs: refused at once (Upstream.MaxInFlight)
	lease   uint8 // service requests: where their key's lease counts (leaseIn*), 0 for none
	// service requests waiting for the store (Service.Store): which
	// client's call is out (store*, 0 for none), its breaker generation
	// and whether it succeeds.
	storeKind uint8
	storeOK   bool
	storeCut  bool // its caller left before the answer (storeCall.cut)
	storeGen  uint32
	replica   int32
	attempts  int32
	// anc are the callers above the task (parent first) with the
	// generation each was at when it sent the request below it.
	anc      [3]ref
	arrival  int64 // when the task reached its layer
	deadline int64 // the request's deadline, 0 for none
	sent     int64 // when its last attempt was sent

	work       int64 // upstream jobs: service time
	user       int32 // closed-loop user, -1 for open-loop arrivals
	key        int32 // the tenant (Class.Keys), 0 without keys
	cost       int64
	actual     int64
	retryAfter int64 // the last rejection's hint

	// service requests
	permit shed.Permit
	waiter *shed.Waiter
	// leaseRec is the record of the request's lease in the leaseBook
	// + 1, 0 for none.
	leaseRec int32
	// job is the upstream job of a service request's attempt out, which
	// an Upstream.Abandon upstream stops when the attempt times out; it is
	// that job while the slot has that generation.
	job ref
	// gone: an upstream job abandoned while it waited in the FIFO queue,
	// left there until it reaches the head (see upstream.abandon).
	gone bool
}

// ref names a task slot at a generation.
type ref struct {
	slot int32
	gen  uint32
}

// caller holds what one calling layer needs: its retry policy, budget,
// throttle and random stream. The client has one per class, the gateway
// one, the service one per replica (its budget is per replica).
type caller struct {
	retry          Retry
	attemptTimeout int64
	budget         *retrybudget.Budget
	throttle       *retrybudget.Throttle
	rng            *rand.Rand
	timers         int16 // lane of attempt timeouts
	// cancel: a replica stops waiting for its call at the request's
	// deadline (Service.CancelAtDeadline); only replicas set it.
	cancel bool
}

// replica is one service replica.
type replica struct {
	lim      *shed.Limiter
	src      shed.LimitSource
	active   int // requests in progress (the balancer's view)
	inFlight int // permits held
	call     *caller
	up       *upstream
	// rateObs, when set, is told about the 429s of the rate limits, as the
	// middleware tells shedhttp.Options.Observer (see RecordPolicy).
	rateObs shed.Observer
	// keys, when set (the recorded replica), is told the tenant key of
	// each request its limiter decides about (see RecordPolicy).
	keys *recordKeys
}

// classRT is the runtime state of a class.
type classRT struct {
	cfg      *Class
	arr      arrivals
	rate     rateFunc
	arrRng   *rand.Rand
	costRng  *rand.Rand
	thinkRng *rand.Rand
	keys     keyDist
	call     *caller
	expiries int16 // lane of queue deadlines in the limiters
}

type engine struct {
	sc   *Scenario
	now  int64
	nowT time.Time
	h    eventHeap
	end  int64

	classes  []classRT
	gateway  *caller
	replicas []replica
	// rates holds the buckets of the classes' rate limits, in front of
	// the limiters as the middleware's KeyStore is; nil: none.
	rates *rateStore
	// leases counts the classes' key concurrency leases, taken before
	// the rate limits as the middleware's are; nil: none.
	leases *keyLeases
	// store models the calls of the Shared limits to the store; nil:
	// they take no time.
	store *storeCalls
	// book keeps the Shared leases as the store holds them when its
	// calls are modelled; nil: a lease counts for the fleet while held.
	book  *leaseBook
	ups   []*upstream
	lbRng *rand.Rand
	rr    int

	tasks   []*task  // by slot
	gens    []uint32 // by slot
	free    []int32  // free slots
	nowLane int16    // events at the current instant

	rec recorder

	ctx    context.Context
	onTick func()
	onJob  func(*task) // tests: called when a job's work is done
	err    error

	// afterEvent, for tests, is called after every event, to check
	// invariants of the engine's state.
	afterEvent func()
}

// Options tune a run.
type Options struct {
	// Seed seeds every random stream of the run. The same scenario,
	// policy and seed give the same result, byte for byte.
	Seed uint64
	// Context, when set, is checked at every interval: once it is done
	// the run stops and returns its error.
	Context context.Context
	// OnTick, when set, is called at the end of every interval (for
	// progress bars).
	OnTick func()
}

// Run simulates sc under policy p and returns its time series and
// summary. It drives the real shed.Limiter, the policy's LimitSource and
// retrybudget in virtual time; it starts no goroutines.
func Run(sc *Scenario, p Policy, opt Options) (*Result, error) {
	if sc == nil || p == nil {
		return nil, errors.New("sim: Run needs a scenario and a policy")
	}
	n, err := sc.normalize()
	if err != nil {
		return nil, err
	}
	e, err := newEngine(n, p, opt.Seed)
	if err != nil {
		return nil, err
	}
	e.ctx, e.onTick = opt.Context, opt.OnTick
	if err := e.run(); err != nil {
		return nil, err
	}
	return e.result(p.Name(), opt.Seed), nil
}

func newEngine(sc *Scenario, p Policy, seed uint64) (*engine, error) {
	e := &engine{sc: sc, end: int64(sc.Duration), nowT: epoch}
	e.rec.init(sc)
	e.lbRng = newStream(seed, "balancer")
	e.nowLane = e.h.newLane()
	shedClasses, err := e.initClasses(seed)
	if err != nil {
		return nil, err
	}
	if g := sc.Gateway; g != nil {
		if e.gateway, err = e.newCaller(g.Retry, g.Timeout, "gateway", seed); err != nil {
			return nil, err
		}
	}
	if err := e.initReplicas(p, shedClasses, seed); err != nil {
		return nil, err
	}
	return e, nil
}

// newCaller builds the retry state of one calling layer. Its random
// stream is named after it, so that adding a caller leaves the others'
// draws as they were.
func (e *engine) newCaller(r Retry, timeout time.Duration, name string, seed uint64) (*caller, error) {
	c := &caller{retry: r, attemptTimeout: int64(timeout), rng: newStream(seed, "retry/"+name), timers: e.h.newLane()}
	if b := r.Budget; b != nil {
		var err error
		c.budget, err = retrybudget.NewBudget(retrybudget.BudgetConfig{Name: name, TTL: b.TTL, RetryRatio: b.Ratio, MinRetriesPerSecond: b.MinPerSecond})
		if err != nil {
			return nil, fmt.Errorf("%s budget: %w", name, err)
		}
	}
	if t := r.Throttle; t != nil {
		var err error
		c.throttle, err = retrybudget.NewThrottle(retrybudget.ThrottleConfig{K: t.K, Window: t.Window})
		if err != nil {
			return nil, fmt.Errorf("%s throttle: %w", name, err)
		}
	}
	return c, nil
}

// initClasses sets up the clients of each class, and returns the classes
// as the limiters see them, built once since every replica shares them.
func (e *engine) initClasses(seed uint64) ([]shed.ClassConfig, error) {
	sc := e.sc
	e.classes = make([]classRT, len(sc.Classes))
	shedClasses := make([]shed.ClassConfig, len(sc.Classes))
	for i := range sc.Classes {
		cl := &sc.Classes[i]
		rt := &e.classes[i]
		rt.cfg = cl
		rt.rate, _ = classRate(cl)
		rt.arr = arrivals{f: &rt.rate}
		rt.arrRng = newStream(seed, "arrivals/"+cl.Name)
		rt.costRng = newStream(seed, "cost/"+cl.Name)
		rt.thinkRng = newStream(seed, "think/"+cl.Name)
		rt.keys = newKeyDist(cl.Keys, newStream(seed, "keys/"+cl.Name))
		rt.expiries = e.h.newLane()
		var err error
		if rt.call, err = e.newCaller(cl.Retry, cl.AttemptTimeout, "client/"+cl.Name, seed); err != nil {
			return nil, err
		}
		shedClasses[i] = shed.ClassConfig{Name: cl.Name, Protected: cl.Protected, QueueDepth: cl.Queue, MaxWait: cl.MaxWait, LIFO: cl.LIFO}
	}
	return shedClasses, nil
}

// initReplicas sets up the upstreams (one shared, or one per replica) and
// the replicas, each with the limiter policy p builds for it.
func (e *engine) initReplicas(p Policy, shedClasses []shed.ClassConfig, seed uint64) error {
	sc := e.sc
	nUp := sc.Service.Replicas
	if sc.Upstream.Shared {
		nUp = 1
	}
	e.ups = make([]*upstream, nUp)
	for i := range e.ups {
		e.ups[i] = newUpstream(&sc.Upstream, i, seed)
	}
	e.replicas = make([]replica, sc.Service.Replicas)
	e.rates = newRateStore(sc)
	e.leases = newKeyLeases(sc)
	e.store = newStoreCalls(sc, seed)
	if e.book = e.newLeaseBook(); e.book != nil {
		e.leases.booked = true
	}
	for i := range e.replicas {
		r := &e.replicas[i]
		cfg := shed.Config{
			Classes:    shedClasses,
			MaxCost:    sc.Service.MaxCost,
			Strict:     sc.Service.Strict,
			MaxQueue:   sc.Service.MaxQueue,
			DemandHold: sc.Service.DemandHold,
			Clock:      func() time.Time { return epoch },

			DeadlineMargin: sc.Service.DeadlineMargin,
		}
		lim, src, err := p.NewLimiter(PolicyEnv{Scenario: sc, Replica: i, Config: cfg, Seed: seed ^ uint64(i+1)*0x9e3779b97f4a7c15})
		if err != nil {
			return fmt.Errorf("policy %s: replica %d: %w", p.Name(), i, err)
		}
		if lim == nil {
			return fmt.Errorf("policy %s: replica %d: nil limiter", p.Name(), i)
		}
		r.lim, r.src = lim, src
		if r.call, err = e.newCaller(sc.Service.Retry, sc.Service.Timeout, fmt.Sprintf("service/%d", i), seed); err != nil {
			return err
		}
		r.call.cancel = sc.Service.CancelAtDeadline
		r.up = e.ups[0]
		if !sc.Upstream.Shared {
			r.up = e.ups[i]
		}
		if ro, ok := p.(rateObserving); ok {
			if e.rates != nil {
				r.rateObs = ro.rateObserver(i)
			}
			r.keys = ro.keysOf(i)
		}
	}
	return nil
}

func (e *engine) schedule(at int64, kind evKind, t *task, arg int32) {
	ev := event{at: at, kind: kind, slot: -1, arg: arg}
	if t != nil {
		ev.slot, ev.gen = t.slot, e.gens[t.slot]
	}
	e.h.push(ev)
}

// scheduleLane schedules an event of a constant delay (or at the current
// instant) in lane l.
func (e *engine) scheduleLane(l int16, at int64, kind evKind, t *task) {
	e.h.pushLane(l, event{at: at, kind: kind, slot: t.slot, gen: e.gens[t.slot]})
}

func (e *engine) run() error {
	sc := e.sc
	for k := int64(1); k*int64(sc.Interval) <= e.end; k++ {
		e.schedule(k*int64(sc.Interval), evTick, nil, 0)
	}
	for _, at := range e.rec.phaseTimes() {
		e.schedule(at, evPhase, nil, 0)
	}
	e.rec.phase(0)
	for i, u := range e.ups {
		for _, at := range u.boundaries() {
			e.schedule(at, evUpstream, nil, int32(i))
		}
	}
	for i := range e.classes {
		c := &e.classes[i]
		if c.cfg.Users > 0 {
			for u := 0; u < c.cfg.Users; u++ {
				e.schedule(int64(c.cfg.Think.sample(c.thinkRng)), evThink, nil, int32(i)|int32(u)<<8)
			}
		} else {
			e.nextArrival(i)
		}
	}
	for e.h.len() > 0 {
		ev := e.h.next()
		if ev.at > e.end {
			break
		}
		if ev.at != e.now {
			e.rec.advance(e, ev.at)
			e.now = ev.at
			e.nowT = epoch.Add(time.Duration(ev.at))
		}
		e.dispatch(&ev)
		if e.afterEvent != nil {
			e.afterEvent()
		}
		if e.err != nil {
			return e.err
		}
	}
	return nil
}

func (e *engine) dispatch(ev *event) {
	var t *task
	if ev.slot >= 0 {
		if e.gens[ev.slot] != ev.gen {
			return // a stale timer: the attempt ended, or the task is gone
		}
		t = e.tasks[ev.slot]
	}
	switch ev.kind {
	case evArrival:
		c := int(ev.arg)
		e.arrive(c, -1)
		e.nextArrival(c)
	case evThink:
		e.arrive(int(ev.arg&0xff), ev.arg>>8)
	case evAttempt:
		e.send(t)
	case evTimeout:
		e.timedOut(t)
	case evGranted:
		if t.state == stQueued {
			p, err := t.waiter.Result()
			if err != nil {
				e.rejected(t, err)
			} else {
				e.admit(t, p)
			}
		}
	case evExpire:
		if t.state == stQueued {
			e.replicas[t.replica].lim.ExpireAt(e.nowT)
		}
	case evJobDone:
		e.jobDone(t)
	case evTick:
		e.rec.tick(e)
		if e.onTick != nil {
			e.onTick()
		}
		if e.ctx != nil {
			e.err = e.ctx.Err()
		}
	case evPhase:
		e.rec.phase(e.now)
	case evUpstream:
		e.ups[ev.arg].change(e)
	case evPSDone:
		e.ups[ev.arg].psDone(e, ev.gen)
	case evStore:
		e.storeAnswered(t)
	case evRenew:
		e.renew(int(ev.arg))
	case evRenewDone:
		e.renewed(int(ev.arg))
	case evLeaseRelease:
		e.releaseAnswered(ev.arg)
	case evLeaseExpire:
		e.leaseExpired(ev.arg, ev.gen)
	case evAcquireLands:
		e.acquireLanded(ev.arg)
	case evReleaseLands:
		e.releaseLanded(ev.arg)
	case evCleanupDone:
		e.cleanupAnswered(int(ev.arg))
	case evRenewLands:
		e.renewalLanded(int(ev.arg))
	case evReleased:
		e.serviceAnswer(t)
	case evRateLands:
		e.rateLanded(int(ev.arg&0xff), ev.arg>>8)
	}
}

func (e *engine) nextArrival(c int) {
	rt := &e.classes[c]
	at := rt.arr.next(rt.arrRng.ExpFloat64())
	if at*1e9 <= float64(e.end) {
		e.schedule(int64(at*1e9), evArrival, nil, int32(c))
	}
}

func (e *engine) newTask(kind layer) *task {
	var t *task
	if n := len(e.free); n > 0 {
		slot := e.free[n-1]
		e.free = e.free[:n-1]
		t = e.tasks[slot]
		w := t.waiter
		*t = task{slot: slot, kind: kind, waiter: w, user: -1}
		return t
	}
	t = &task{slot: int32(len(e.tasks)), kind: kind, user: -1}
	e.tasks = append(e.tasks, t)
	e.gens = append(e.gens, 0)
	return t
}

func (e *engine) freeTask(t *task) {
	e.gens[t.slot]++
	e.free = append(e.free, t.slot)
}

// parent returns t's caller if it still waits for t's answer.
func (e *engine) parent(t *task) *task {
	if t.nanc == 0 || e.gens[t.anc[0].slot] != t.anc[0].gen {
		return nil
	}
	return e.tasks[t.anc[0].slot]
}

// waited reports whether every caller above t still waits for it.
func (e *engine) waited(t *task) bool {
	for _, a := range t.anc[:t.nanc] {
		if e.gens[a.slot] != a.gen {
			return false
		}
	}
	return true
}

// arrive creates a logical request of class c.
func (e *engine) arrive(c int, user int32) {
	rt := &e.classes[c]
	t := e.newTask(layerClient)
	t.class = uint8(c)
	t.user = user
	t.key = rt.keys.next(e.now)
	t.arrival = e.now
	t.deadline = e.now + int64(rt.cfg.Timeout)
	t.cost = max(int64(math.Round(rt.cfg.Cost.sample(rt.costRng))), 1)
	t.actual = t.cost
	if !rt.cfg.Actual.IsZero() {
		t.actual = max(int64(math.Round(float64(t.cost)*rt.cfg.Actual.sample(rt.costRng))), 1)
	}
	e.rec.offered(e, c, t.key)
	if b := rt.call.budget; b != nil {
		b.DepositAt(e.nowT)
	}
	e.send(t)
}

// callerOf returns the caller configuration of t's layer.
func (e *engine) callerOf(t *task) *caller {
	switch t.kind {
	case layerClient:
		return e.classes[t.class].call
	case layerGateway:
		return e.gateway
	default:
		return e.replicas[t.replica].call
	}
}

// send makes t's next attempt.
func (e *engine) send(t *task) {
	c := e.callerOf(t)
	if c.throttle != nil && !c.throttle.AllowAt(e.nowT, c.rng.Float64()) {
		e.finish(t, resThrottled)
		return
	}
	t.state = stActive
	t.sent = e.now
	t.attempts++
	if t.attempts > 1 {
		e.rec.retry(t.kind)
	}
	e.gens[t.slot]++
	gen := e.gens[t.slot]
	deadline := attemptDeadline(t, c)
	if deadline > 0 {
		e.scheduleLane(c.timers, deadline, evTimeout, t)
	}
	var child *task
	switch {
	case t.kind == layerClient && e.gateway != nil:
		child = e.newTask(layerGateway)
	case t.kind == layerService:
		child = e.newTask(layerJob)
	default:
		child = e.newTask(layerService)
	}
	child.anc[0] = ref{t.slot, gen}
	copy(child.anc[1:], t.anc[:t.nanc])
	child.nanc = min(t.nanc+1, int8(len(child.anc)))
	child.class, child.cost, child.actual, child.arrival = t.class, t.cost, t.actual, e.now
	child.key = t.key
	child.deadline = t.deadline
	switch {
	case child.kind == layerService:
		child.deadline = e.serviceDeadline(deadline)
	case deadline > 0 && t.kind != layerService:
		child.deadline = deadline // the gateway knows when its client stops waiting
	}
	switch child.kind {
	case layerGateway:
		if b := e.gateway.budget; b != nil {
			b.DepositAt(e.nowT)
		}
		e.send(child)
	case layerService:
		e.serviceArrive(child)
	case layerJob:
		child.replica = t.replica
		t.job = ref{child.slot, e.gens[child.slot]}
		e.replicas[t.replica].up.arrive(e, child)
	}
}

// attemptDeadline returns when t's attempt sent at t.sent by caller c
// times out, 0 for never.
func attemptDeadline(t *task, c *caller) int64 {
	deadline := int64(0)
	if c.attemptTimeout > 0 {
		deadline = t.sent + c.attemptTimeout
	}
	if (t.kind != layerService || c.cancel) && t.deadline > 0 && (deadline == 0 || t.deadline < deadline) {
		// Clients and the gateway stop waiting at the request's deadline.
		// By default a replica waits for the upstream unless its own
		// timeout fires, even past a deadline it knows: its handler's
		// call ignores the request's context, and the permit bounds the
		// upstream's work. With Service.CancelAtDeadline the call ends
		// with the context, and the permit with it. A replica can be
		// granted a permit at or after the deadline: its wait then ends
		// at once, not in the past.
		deadline = max(t.deadline, t.sent)
	}
	return deadline
}

// callerLeft returns how long after now service request t's caller stops
// waiting for it, 0 when it has, never when it waits to the end: then
// the request's context ends (net/http cancels it when its client closes
// the request), whatever deadline the request carries.
func (e *engine) callerLeft(t *task) int64 {
	p := e.parent(t)
	if p == nil {
		return 0
	}
	dl := attemptDeadline(p, e.callerOf(p))
	if dl == 0 {
		return never
	}
	return max(dl-e.now, 0)
}

// serviceDeadline returns the deadline a replica sees for a request sent
// now by a caller that stops waiting at callerDeadline (0: never). It
// models the middleware fed by retrybudget.Transport: the Transport sends
// the time left, in whole milliseconds rounded down
// (retrybudget.FormatDeadline), and the middleware takes that, bounded by
// shedhttp.DefaultMaxDeadline, from the request's arrival (its clock; the
// simulated network takes no time). With Service.NoDeadlinePropagation the
// replica sees none.
func (e *engine) serviceDeadline(callerDeadline int64) int64 {
	if e.sc.Service.NoDeadlinePropagation || callerDeadline == 0 {
		return 0
	}
	return e.now + propagatedLeft(callerDeadline-e.now)
}

// propagatedLeft is the time a replica has when its caller has left: what
// survives the header, in nanoseconds (see serviceDeadline).
func propagatedLeft(left int64) int64 {
	left -= left % int64(time.Millisecond)
	return min(max(left, 0), int64(shedhttp.DefaultMaxDeadline))
}

// pick chooses a replica for a service request.
func (e *engine) pick() int {
	n := len(e.replicas)
	if n == 1 {
		return 0
	}
	switch e.sc.Service.Balancer {
	case LeastInFlight:
		best := 0
		for i := 1; i < n; i++ {
			if e.replicas[i].active < e.replicas[best].active {
				best = i
			}
		}
		return best
	case PowerOfTwo:
		a := e.lbRng.IntN(n)
		b := e.lbRng.IntN(n - 1)
		if b >= a {
			b++
		}
		if e.replicas[b].active < e.replicas[a].active {
			return b
		}
		return a
	default:
		i := e.rr
		e.rr = (e.rr + 1) % n
		return i
	}
}

// serviceArrive takes service request t in at a replica: its key's
// lease, its rate limit, then its limiter, in the middleware's order.
// Decisions of Shared limits may wait for the store (askStore).
func (e *engine) serviceArrive(t *task) {
	ri := e.pick()
	r := &e.replicas[ri]
	t.replica = int32(ri)
	r.active++
	e.rec.attempt(e)
	e.step(t, storeLease)
}

// step takes service request t's decision of kind (its key's lease,
// storeLease, or its rate limit, storeRate) once the store has answered
// the call the decision needs, if any.
func (e *engine) step(t *task, kind uint8) {
	if fallback, wait := e.askStore(t, kind); !wait {
		e.decided(t, kind, fallback)
	}
}

// decided takes t's decision of kind, on the replica's share of a Shared
// limit when fallback, and goes on to the next unless it refused t.
func (e *engine) decided(t *task, kind uint8, fallback bool) {
	if kind == storeLease {
		switch {
		case t.storeCut:
			e.acquireCut(t)
		case e.leases == nil || e.takeLease(t, fallback):
			e.step(t, storeRate)
		}
		return
	}
	r := &e.replicas[t.replica]
	if r.keys != nil {
		// The rate observer's decision and the limiter's, both made at
		// once, below: the key is hashed once.
		r.keys.cur = e.recordedKey(t)
	}
	if e.rates != nil {
		if b, ok := e.rates.allow(e.nowT, int(t.replica), int(t.class), t.key, fallback); !ok {
			e.rateLimited(t, r, b)
			return
		}
	}
	if t.storeCut {
		// Its caller left during the store call: shed.Limiter.Acquire
		// returns the ended context's error at once, with no event, and
		// the middleware answers nobody.
		e.finish(t, resShed)
		return
	}
	e.limiterStep(t)
}

// limiterStep hands service request t to its replica's limiter; its
// key's hash for the recorder is in place (decided).
func (e *engine) limiterStep(t *task) {
	r := &e.replicas[t.replica]
	req := serviceRequest(t)
	var p shed.Permit
	var queued bool
	var err error
	if e.classes[t.class].cfg.Queue == 0 {
		// The class never waits: no waiter needed.
		p, err = r.lim.TryAcquireAt(e.nowT, req)
	} else {
		if t.waiter == nil {
			t.waiter = shed.NewWaiter(func(*shed.Waiter) {
				if k := e.replicas[t.replica].keys; k != nil {
					k.waiterKey(e.recordedKey(t))
				}
				// Called from inside the limiter: defer the work to an
				// event at the same instant, in a deterministic order.
				e.scheduleLane(e.nowLane, e.now, evGranted, t)
			})
		}
		p, queued, err = r.lim.EnqueueAt(e.nowT, req, t.waiter)
	}
	switch {
	case err != nil:
		e.rejected(t, err)
	case queued:
		t.state = stQueued
		e.scheduleLane(e.classes[t.class].expiries, int64(t.waiter.Deadline().Sub(epoch)), evExpire, t)
	default:
		e.admit(t, p)
	}
}

// recordedKey returns what a recording holds for t's tenant key: the hash
// of its number by the recorder of t's replica (salted if it is, as its
// header says), 0 when its class has no Keys.
func (e *engine) recordedKey(t *task) uint64 {
	if e.classes[t.class].cfg.Keys == nil {
		return 0
	}
	var b [12]byte
	key := string(strconv.AppendInt(b[:0], int64(t.key), 10))
	if k := e.replicas[t.replica].keys; k != nil && k.rec != nil {
		return k.rec.KeyHash(key)
	}
	return record.KeyHash(key)
}

// serviceRequest is what a replica asks its limiter for service request t:
// its class, cost and the deadline it sees (see serviceDeadline).
func serviceRequest(t *task) shed.Request {
	var dl time.Time
	if t.deadline > 0 {
		dl = epoch.Add(time.Duration(t.deadline))
	}
	return shed.Request{Class: shed.Class(t.class), Cost: t.cost, Deadline: dl}
}

// asRejection returns the *shed.Rejection in err. The type assertion
// covers what shed returns without the allocation of errors.As.
func asRejection(err error) (*shed.Rejection, bool) {
	if r, ok := err.(*shed.Rejection); ok {
		return r, true
	}
	var r *shed.Rejection
	ok := errors.As(err, &r)
	return r, ok
}

func (e *engine) rejected(t *task, err error) {
	rej, ok := asRejection(err)
	if !ok {
		// Not a rejection: the limiter refused the request itself (a
		// policy whose limiter lacks the scenario's classes). Stop the run.
		if e.err == nil {
			e.err = fmt.Errorf("sim: replica %d: limiter: %w", t.replica, err)
		}
	} else {
		e.rec.reject(e, rej.Reason)
		t.retryAfter = int64(rej.RetryAfter)
	}
	e.finish(t, resShed)
}

// rateLimited ends service request t, refused by its key's bucket lim of
// its class's rate limit in replica r, as the middleware answers 429:
// before the limiter saw it, with a Retry-After of the time the bucket
// takes to hold a token again, in whole seconds. Its callers treat it as
// they treat a 503: a rejection that says "overloaded, do not retry" (the
// middleware sends that header with both). The replica's rate observer sees the event the middleware
// sends its Options.Observer.
func (e *engine) rateLimited(t *task, r *replica, lim *xrate.Limiter) {
	e.rec.rateLimited(t.class)
	if r.rateObs != nil {
		r.rateObs.Observe(shed.Event{Kind: shed.EventRejected, Time: e.nowT, Class: shed.Class(t.class), Reason: shed.ReasonRateLimited,
			Cost: max(t.cost, 1), InFlight: r.lim.InFlight()})
	}
	wait := time.Duration((1 - lim.TokensAt(e.nowT)) / float64(lim.Limit()) * float64(time.Second))
	t.retryAfter = shedhttp.RetryAfterSeconds(wait) * int64(time.Second)
	e.finish(t, resShed)
}

func (e *engine) admit(t *task, p shed.Permit) {
	t.permit = p
	r := &e.replicas[t.replica]
	r.inFlight++
	e.rec.admit(e, r)
	if b := r.call.budget; b != nil {
		b.DepositAt(e.nowT)
	}
	e.send(t)
}

// respond delivers child's result to its parent, if the parent still
// waits for it.
func (e *engine) respond(child *task, res result, retryAfter int64) {
	p := e.parent(child)
	if p == nil {
		return
	}
	e.gens[p.slot]++ // the attempt is over
	if c := e.callerOf(p); c.throttle != nil {
		// The throttle counts an attempt by its outcome: accepted when
		// the callee answered without signalling overload (an error
		// answer counts: the backend took the request), else rejected.
		if res != resShed {
			c.throttle.AcceptAt(e.nowT)
		} else {
			c.throttle.RejectAt(e.nowT)
		}
	}
	if res == resOK {
		e.finish(p, resOK)
		return
	}
	e.retryOrFinish(p, res, retryAfter)
}

func (e *engine) retryOrFinish(t *task, res result, retryAfter int64) {
	c := e.callerOf(t)
	r := &c.retry
	if int(t.attempts) >= r.MaxAttempts || (res == resShed && r.HonorNoRetry) {
		e.finish(t, res)
		return
	}
	n := t.attempts // the retry to come is attempt n+1
	ceil := r.Backoff << min(n-1, 30)
	if ceil > r.MaxBackoff || ceil <= 0 {
		ceil = r.MaxBackoff
	}
	wait := int64(c.rng.Float64() * float64(ceil))
	if res == resShed && r.HonorRetryAfter {
		wait = max(wait, retryAfter)
	}
	need := wait
	if t.kind == layerService {
		// A replica retries through retrybudget.Transport, which expects
		// a retry to take as long as the attempt before it and starts
		// none that could not finish before the deadline.
		need += e.now - t.sent
	}
	if t.deadline > 0 && e.now+need >= t.deadline {
		e.finish(t, res)
		return
	}
	if c.budget != nil && !c.budget.TryWithdrawAt(e.nowT) {
		e.finish(t, res)
		return
	}
	t.state = stBackoff
	t.res = res
	e.schedule(e.now+wait, evAttempt, t, 0)
}

// finish ends t with res and tells its caller.
func (e *engine) finish(t *task, res result) {
	t.state = stDone
	t.res = res
	switch t.kind {
	case layerClient:
		e.rec.logical(e, t, res)
		if t.user >= 0 {
			rt := &e.classes[t.class]
			e.schedule(e.now+int64(rt.cfg.Think.sample(rt.thinkRng)), evThink, nil, int32(t.class)|t.user<<8)
		}
	case layerService:
		r := &e.replicas[t.replica]
		if t.permit.Valid() {
			t.permit.ReleaseAt(e.nowT, e.outcome(t, res))
			r.inFlight--
			e.rec.release(e, t, res)
		}
		// After the permit: the middleware holding the lease is outside.
		// Its deferred Release returns before net/http sends the
		// response, which waits for the release's call.
		if wait := e.releaseLease(t); wait > 0 {
			t.state = stReleasing
			e.gens[t.slot]++ // no answer or timer of t's attempts applies any more
			e.schedule(e.now+wait, evReleased, t, 0)
			return
		}
		e.serviceAnswer(t)
		return
	default:
		e.respond(t, res, t.retryAfter)
	}
	e.freeTask(t)
}

// serviceAnswer sends service request t's answer to its caller, once its
// lease is released, and frees it.
func (e *engine) serviceAnswer(t *task) {
	t.state = stDone
	e.replicas[t.replica].active--
	e.respond(t, t.res, t.retryAfter)
	e.freeTask(t)
}

// outcome is the outcome a replica releases the permit of service request
// t with, when it ends with res: as the middleware decides it, the
// request's deadline first (its context ended: Dropped), then its caller
// (gone before the deadline: the middleware sees a cancelled context,
// Ignored), then the answer (an error or a timeout of the upstream call:
// Dropped).
func (e *engine) outcome(t *task, res result) shed.Outcome {
	switch {
	case t.deadline > 0 && e.now >= t.deadline:
		return shed.Dropped
	case e.parent(t) == nil:
		return shed.Ignored
	case res != resOK:
		return shed.Dropped
	}
	return shed.Success
}

func (e *engine) jobDone(j *task) {
	if j.refused {
		e.respond(j, resError, 0)
		e.freeTask(j)
		return
	}
	u := e.replicas[j.replica].up
	u.done(e, j)
	e.endJob(j)
	u.fill(e)
}

// timedOut ends t's attempt, whose caller stopped waiting for it.
func (e *engine) timedOut(t *task) {
	if t.kind == layerService && e.sc.Upstream.Abandon {
		e.abandonJob(t) // before the attempt ends: its job is still known
	}
	e.gens[t.slot]++
	if c := e.callerOf(t); c.throttle != nil {
		c.throttle.RejectAt(e.nowT) // no answer in time: not accepted
	}
	e.retryOrFinish(t, resTimeout, 0)
}

// abandonJob stops the upstream job of service request t's attempt, which
// times out (Upstream.Abandon), unless it is done or was refused.
func (e *engine) abandonJob(t *task) {
	if e.gens[t.job.slot] != t.job.gen {
		return
	}
	if j := e.tasks[t.job.slot]; j.kind == layerJob && !j.refused {
		e.replicas[j.replica].up.abandon(e, j)
	}
}

// endJob answers job j's caller once its work is done.
func (e *engine) endJob(j *task) {
	res := resOK
	if j.fail {
		res = resError
	}
	if e.onJob != nil {
		e.onJob(j)
	}
	e.rec.job(e, j, !e.waited(j))
	e.respond(j, res, 0)
	e.freeTask(j)
}
