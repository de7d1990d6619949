package sim

// event is one scheduled happening. Events are plain values in the heap:
// scheduling allocates nothing once the heap has grown.
type event struct {
	at   int64  // virtual time, ns since the start of the run
	seq  uint64 // scheduling order: the tie-break that makes runs deterministic
	slot int32  // the task concerned, -1 for none
	gen  uint32 // the task's generation when scheduled (evPSDone: the upstream's): a later one makes the event stale
	kind evKind
	lane int16 // the lane the event came from, -1 for none
	arg  int32 // class or replica index
}

type evKind uint8

const (
	evArrival      evKind = iota // next open-loop arrival of class arg
	evThink                      // a closed-loop user of class arg sends its next request
	evAttempt                    // t makes its next attempt (after a backoff)
	evTimeout                    // t's current attempt times out
	evGranted                    // t's queued admission was decided
	evExpire                     // t's queue deadline: expire the limiter's waiters
	evJobDone                    // upstream job t finishes
	evTick                       // end of a measurement interval
	evUpstream                   // upstream arg changes state (a schedule boundary)
	evPhase                      // a summary window opens or closes
	evPSDone                     // the next job of PS upstream arg finishes (stale unless gen is the upstream's)
	evStore                      // the store answers service request t's call (Service.Store)
	evRenew                      // replica arg renews its leases in the store (leaseBook)
	evRenewDone                  // the store answers replica arg's renewal
	evLeaseRelease               // the store answers the release of lease arg
	evLeaseExpire                // lease arg expires in the store unless written since (gen)
	evAcquireLands               // lease arg's timed-out acquisition reaches the store
	evReleaseLands               // lease arg's timed-out release reaches the store
	evCleanupDone                // the store answers the cleanup after replica arg's renewal
	evRenewLands                 // replica arg's timed-out renewals or cleanups reach the store
	evReleased                   // service request t's lease is released: it answers its caller
	evRateLands                  // a timed-out rate-limit call reaches the store (arg: class | key<<8)
)

// eventHeap is a 4-ary min-heap ordered by (at, seq), plus lanes: FIFO
// queues of events scheduled in time order (timeouts of a constant
// duration), of which only the head sits in the heap. Most timers never
// fire (the attempt ends first); lanes keep them out of the heap, which
// then holds only running jobs and a few arrivals. Events still come out
// in exact (at, seq) order.
type eventHeap struct {
	ev    []event
	seq   uint64
	lanes []lane
}

// lane is a ring of events in (at, seq) order.
type lane struct {
	buf     []event
	head, n int
}

// newLane returns the index of a new lane.
func (h *eventHeap) newLane() int16 {
	h.lanes = append(h.lanes, lane{})
	return int16(len(h.lanes) - 1)
}

// pushLane schedules e in lane l, or in the heap when e is earlier than
// the lane's last event.
func (h *eventHeap) pushLane(l int16, e event) {
	ln := &h.lanes[l]
	if ln.n > 0 && ln.buf[(ln.head+ln.n-1)%len(ln.buf)].at > e.at {
		h.push(e)
		return
	}
	h.seq++
	e.seq = h.seq
	e.lane = l
	if ln.n == len(ln.buf) {
		nb := make([]event, max(64, 2*len(ln.buf)))
		for i := 0; i < ln.n; i++ {
			nb[i] = ln.buf[(ln.head+i)%len(ln.buf)]
		}
		ln.buf, ln.head = nb, 0
	}
	ln.buf[(ln.head+ln.n)%len(ln.buf)] = e
	ln.n++
	if ln.n == 1 {
		h.insert(e)
	}
}

// next removes and returns the earliest event.
func (h *eventHeap) next() event {
	e := h.pop()
	if e.lane >= 0 {
		ln := &h.lanes[e.lane]
		ln.buf[ln.head] = event{}
		ln.head = (ln.head + 1) % len(ln.buf)
		ln.n--
		if ln.n > 0 {
			h.insert(ln.buf[ln.head])
		}
	}
	return e
}

func less(a, b *event) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	e.lane = -1
	h.insert(e)
}

// insert adds e to the heap as it is.
func (h *eventHeap) insert(e event) {
	h.ev = append(h.ev, e)
	ev := h.ev
	i := len(ev) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !less(&e, &ev[p]) {
			break
		}
		ev[i] = ev[p]
		i = p
	}
	ev[i] = e
}

func (h *eventHeap) pop() event {
	ev := h.ev
	top := ev[0]
	n := len(ev) - 1
	last := ev[n]
	ev[n] = event{}
	h.ev = ev[:n]
	ev = h.ev
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		end := min(c+4, n)
		for j := c + 1; j < end; j++ {
			if less(&ev[j], &ev[m]) {
				m = j
			}
		}
		if !less(&ev[m], &last) {
			break
		}
		ev[i] = ev[m]
		i = m
	}
	ev[i] = last
	return top
}
