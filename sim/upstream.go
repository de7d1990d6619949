package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// upstream is a multi-server FIFO queue: servers jobs at once, the rest
// wait in arrival order. With no degradation, no events and exponential
// service times it is exactly M/M/c (M/G/c in general). Under discipline
// PS it is a processor-sharing server instead (see psQueue).
type upstream struct {
	cfg     *Upstream
	idx     int32
	ps      psQueue
	events  []UpstreamEvent // those that apply to this upstream
	servers int             // current number of servers
	slow    float64         // current slowdown factor
	errs    float64         // current error probability
	busy    int
	queue   ring
	// gone counts the jobs in queue that were abandoned (Upstream.Abandon):
	// they stay there until they reach its head, which spares a search.
	gone   int
	svcRng *rand.Rand
	errRng *rand.Rand
}

func newUpstream(cfg *Upstream, idx int, seed uint64) *upstream {
	u := &upstream{cfg: cfg, idx: int32(idx), servers: cfg.Capacity, slow: 1}
	for _, ev := range cfg.Events {
		if ev.Replicas == 0 || idx < ev.Replicas {
			u.events = append(u.events, ev)
		}
	}
	name := "upstream/" + strconv.Itoa(idx)
	u.svcRng = newStream(seed, name+"/service")
	u.errRng = newStream(seed, name+"/errors")
	return u
}

// boundaries returns the instants (ns) at which the upstream changes.
func (u *upstream) boundaries() []int64 {
	var b []int64
	for _, ev := range u.events {
		b = append(b, int64(ev.At), int64(ev.At+ev.For))
	}
	slices.Sort(b)
	return slices.Compact(b)
}

// stateAt returns the capacity factor, slowdown and error probability
// in force at t (ns): overlapping events multiply their factors and
// combine their error probabilities.
func (u *upstream) stateAt(t int64) (capF, slow, errs float64) {
	capF, slow = 1, 1
	ok := 1.0
	for _, ev := range u.events {
		if int64(ev.At) <= t && t < int64(ev.At+ev.For) {
			capF *= ev.Capacity
			slow *= ev.Slowdown
			ok *= 1 - ev.Errors
		}
	}
	return capF, slow, 1 - ok
}

// change applies the events in force now: a schedule boundary.
func (u *upstream) change(e *engine) {
	if u.cfg.Discipline == PS {
		u.ps.advance(e.now, u.servers) // at the old capacity up to now
		u.refresh(e.now)
		u.psReschedule(e)
		return
	}
	u.refresh(e.now)
	u.fill(e)
}

// refresh applies the events in force now.
func (u *upstream) refresh(now int64) {
	capF, slow, errs := u.stateAt(now)
	u.servers = max(int(math.Round(float64(u.cfg.Capacity)*capF)), 1)
	u.slow, u.errs = slow, errs
}

// present returns the jobs at the upstream, in service or waiting.
func (u *upstream) present() int {
	return u.busy + u.waiting() + u.ps.jobs.len()
}

// waiting returns the jobs waiting for a server, abandoned ones aside.
func (u *upstream) waiting() int {
	return u.queue.n - u.gone
}

func (u *upstream) arrive(e *engine, j *task) {
	if m := u.cfg.MaxInFlight; m > 0 && u.present() >= m {
		// Refused at once: the answer is an error, at this instant.
		j.refused, j.fail = true, true
		e.scheduleLane(e.nowLane, e.now, evJobDone, j)
		return
	}
	e.rec.upPresent++
	if u.cfg.Discipline == PS {
		u.psArrive(e, j)
		return
	}
	if u.busy < u.servers {
		u.start(e, j)
		return
	}
	j.state = stQueued // until it starts: see abandon
	u.queue.push(j)
}

func (u *upstream) start(e *engine, j *task) {
	u.busy++
	j.state, j.sent = stActive, e.now // sent: when its work started
	u.take(e, j, u.waiting())
	e.schedule(e.now+j.work, evJobDone, j, 0)
}

// take draws the work of job j, which starts while q jobs wait (beyond
// capacity), and whether it fails.
func (u *upstream) take(e *engine, j *task, q int) {
	c := u.cfg
	d := c.ServiceTime.sample(u.svcRng) * u.slow
	if c.Degradation > 0 && q > 0 {
		d *= min(1+c.Degradation*float64(q)/float64(c.Capacity), c.MaxDegradation)
	}
	if c.CostScaling > 0 {
		d *= math.Pow(float64(j.actual)/c.CostRef, c.CostScaling)
	}
	j.work = max(int64(d), 1)
	j.fail = u.errs > 0 && u.errRng.Float64() < u.errs
	// The replica learns the actual cost once the upstream takes the job.
	if p := e.parent(j); p != nil && p.permit.Valid() && p.permit.Cost() != j.actual {
		_ = p.permit.ReconcileAt(e.nowT, j.actual)
	}
}

func (u *upstream) done(e *engine, j *task) {
	u.busy--
	e.rec.upPresent--
}

// fill starts waiting jobs while servers are free.
func (u *upstream) fill(e *engine) {
	for u.busy < u.servers && u.queue.n > 0 {
		j := u.queue.pop()
		if j.gone {
			u.gone--
			e.freeTask(j)
			continue
		}
		u.start(e, j)
	}
}

// abandon stops job j, whose caller stopped waiting (Upstream.Abandon):
// one waiting is marked gone, to be dropped without service when it
// reaches the queue's head; one in service frees its server now, and its
// completion event becomes stale when its slot is freed. The work it
// received is wasted.
func (u *upstream) abandon(e *engine, j *task) {
	e.rec.upPresent--
	if u.cfg.Discipline == PS {
		u.psAbandon(e, j)
		return
	}
	if j.state == stQueued {
		j.gone = true
		u.gone++
		return
	}
	u.busy--
	e.rec.abandoned(e.now - j.sent)
	e.freeTask(j)
	u.fill(e)
}

// ring is a growable FIFO of tasks.
type ring struct {
	buf     []*task
	head, n int
}

func (q *ring) push(t *task) {
	if q.n == len(q.buf) {
		nb := make([]*task, max(16, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = t
	q.n++
}

func (q *ring) pop() *task {
	t := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return t
}
