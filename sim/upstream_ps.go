package sim

// psQueue is the state of a processor-sharing upstream (Discipline PS):
// with n jobs present and c servers, each job progresses at
// rate(n, c) = min(1, c/n) of full speed.
//
// It runs on a virtual clock v: the work (ns at full speed) that a job
// present all along would have received, dv/dt = rate(n, c). A job that
// arrives at virtual time v0 with work w finishes when v reaches v0 + w,
// whatever happens to n and c meanwhile, so the jobs sit in a min-heap on
// that finish time and only the earliest needs an event: its real time is
// now + (finish - v) / rate. Every arrival, departure and capacity change
// alters the rate, so it reschedules that one event; an event scheduled
// before is recognized as stale by the queue's generation, which it
// carries. Each arrival and departure costs O(log n).
type psQueue struct {
	v    float64 // virtual time, ns of work
	last int64   // real time (ns) up to which v is advanced
	jobs psHeap
	gen  uint32 // bumped at every reschedule: older completion events are stale
	// armed says a completion event of generation gen is pending, for the
	// job finishing at armFinish at rate armRate: while both hold, it
	// stays right, and is kept (an arrival behind the first to finish,
	// below capacity, changes neither).
	armed              bool
	armFinish, armRate float64
	// served is the service delivered: the integral of min(n, c) dt, ns.
	// Only the tests read it (work conservation).
	served float64
}

// psEpsilon is the virtual time (ns of work) within which a job counts as
// finished: it absorbs the rounding of real time to whole nanoseconds and
// of float64 sums, far below the model's resolution.
const psEpsilon = 0.5

// advance moves the virtual clock to real time now, with c servers.
func (q *psQueue) advance(now int64, c int) {
	n := q.jobs.len()
	if now > q.last && n > 0 {
		dt := float64(now - q.last)
		q.v += dt * psRate(n, c)
		q.served += dt * float64(min(n, c))
	}
	q.last = now
}

// psRate is the speed of each of n jobs on c servers.
func psRate(n, c int) float64 {
	if n <= c {
		return 1
	}
	return float64(c) / float64(n)
}

// psArrive admits job j: its work is drawn as under FIFO, with the jobs
// beyond capacity in place of those waiting for Degradation.
func (u *upstream) psArrive(e *engine, j *task) {
	q := &u.ps
	q.advance(e.now, u.servers)
	u.take(e, j, max(q.jobs.len()-u.servers, 0))
	q.jobs.push(psJob{finish: q.v + float64(j.work), t: j})
	u.psReschedule(e)
}

// psReschedule schedules the next completion at the current rate, making
// any completion event scheduled before stale, unless the one pending is
// still right.
func (u *upstream) psReschedule(e *engine) {
	q := &u.ps
	n := q.jobs.len()
	if n == 0 {
		q.gen++
		q.armed = false
		return
	}
	rate, finish := psRate(n, u.servers), q.jobs.top().finish
	if q.armed && rate == q.armRate && finish == q.armFinish {
		return
	}
	q.gen++
	dv := finish - q.v
	dt := int64(1)
	if dv > 0 {
		dt = max(int64(dv/rate)+1, 1) // rounded up: the job is done by then
	}
	e.h.push(event{at: e.now + dt, kind: evPSDone, slot: -1, gen: q.gen, arg: u.idx})
	q.armed, q.armRate, q.armFinish = true, rate, finish
}

// psDone completes the jobs whose work is done, then schedules the next
// completion. It runs on the completion event of generation gen, and does
// nothing for a stale one.
func (u *upstream) psDone(e *engine, gen uint32) {
	q := &u.ps
	if gen != q.gen {
		return
	}
	q.armed = false
	q.advance(e.now, u.servers)
	for q.jobs.len() > 0 && q.jobs.top().finish <= q.v+psEpsilon {
		j := q.jobs.pop().t
		e.rec.upPresent--
		e.endJob(j)
		// Answering may not add jobs at this instant (the engine defers
		// callers' work to events), but advance and the heap allow it.
	}
	u.psReschedule(e)
}

// psAbandon removes job j from the shared server (upstream.abandon): the
// others share it from now on. The search is linear, paid only by
// abandoned jobs; keeping each job's heap index would cost every heap
// move of every run.
func (u *upstream) psAbandon(e *engine, j *task) {
	q := &u.ps
	q.advance(e.now, u.servers)
	for i := range q.jobs.a {
		if q.jobs.a[i].t == j {
			left := max(q.jobs.a[i].finish-q.v, 0)
			q.jobs.remove(i)
			e.rec.abandoned(max(j.work-int64(left), 0))
			break
		}
	}
	e.freeTask(j)
	u.psReschedule(e)
}

// psJob is a job present at a PS upstream and its finish virtual time.
type psJob struct {
	finish float64
	t      *task
}

// psHeap is a binary min-heap of jobs on their finish virtual time. Ties
// go in no particular order, but the same one on every run: the heap is
// deterministic.
type psHeap struct{ a []psJob }

func (h *psHeap) len() int     { return len(h.a) }
func (h *psHeap) top() *psJob  { return &h.a[0] }
func (h *psHeap) push(j psJob) { h.a = append(h.a, j); h.up(len(h.a) - 1) }

func (h *psHeap) up(i int) {
	a := h.a
	j := a[i]
	for i > 0 {
		p := (i - 1) / 2
		if a[p].finish <= j.finish {
			break
		}
		a[i] = a[p]
		i = p
	}
	a[i] = j
}

// remove takes out the job at index i.
func (h *psHeap) remove(i int) {
	n := len(h.a) - 1
	last := h.a[n]
	h.a[n] = psJob{}
	h.a = h.a[:n]
	if i == n {
		return
	}
	h.a[i] = last
	h.up(i)
	if h.a[i].t == last.t {
		h.down(i) // it did not move up: it may have to go down
	}
}

// down moves the job at index i down to its place.
func (h *psHeap) down(i int) {
	a := h.a
	j := a[i]
	n := len(a)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && a[c+1].finish < a[c].finish {
			c++
		}
		if j.finish <= a[c].finish {
			break
		}
		a[i] = a[c]
		i = c
	}
	a[i] = j
}

func (h *psHeap) pop() psJob {
	top := h.a[0]
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a[n] = psJob{}
	h.a = h.a[:n]
	if n > 0 {
		h.down(0)
	}
	return top
}
