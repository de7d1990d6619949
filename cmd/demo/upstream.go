package main

import (
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// upstream is the dependency the gateway calls. A request's work (its
// time at full speed) follows the schedule at its arrival, with lognormal
// noise; capacity workers share the requests in flight (processor
// sharing, psServer: past capacity every request slows down, each getting
// capacity/inflight of a worker). Work continues when the caller has gone
// away, as it does in real services: that is the wasted work overload
// creates.
type upstream struct {
	sched    schedule
	capacity int
	ps       *psServer
	// maxInFlight bounds the requests it holds (its worker pool and accept
	// queue); beyond that it answers 503 at once, like most servers.
	maxInFlight int64
	start       atomic.Int64 // UnixNano of the run's start

	inflight atomic.Int64
	served   atomic.Int64 // requests that reached the handler (attempts on the wire)
	// busy is the work done (ns at full speed), abandoned the part of it
	// done for requests whose caller had gone when the work ended.
	busy, abandoned atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand
}

func newUpstream(s schedule, capacity int, seed uint64) *upstream {
	return &upstream{sched: s, capacity: capacity, ps: newPSServer(capacity), maxInFlight: int64(25 * capacity), rng: rand.New(rand.NewPCG(seed, 7))}
}

func (u *upstream) reset(now time.Time) {
	u.start.Store(now.UnixNano())
	u.served.Store(0)
	u.busy.Store(0)
	u.abandoned.Store(0)
}

// work draws the work of a request that arrives at offset t: the time it
// takes at full speed.
func (u *upstream) work(t time.Duration) time.Duration {
	u.mu.Lock()
	noise := math.Exp(0.25 * u.rng.NormFloat64())
	u.mu.Unlock()
	return time.Duration(float64(u.sched.Healthy) * u.sched.factorAt(t) * noise)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.served.Add(1)
	n := u.inflight.Add(1)
	defer u.inflight.Add(-1)
	t := time.Duration(time.Now().UnixNano() - u.start.Load())
	if n > u.maxInFlight || u.sched.downAt(t) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	d := u.work(t)
	<-u.ps.serve(d) // not cut short by r.Context(): the work is done anyway
	u.busy.Add(int64(d))
	if r.Context().Err() != nil {
		// The caller cancelled (its own caller gave up, or its deadline
		// passed) while this ran: nobody reads the answer.
		u.abandoned.Add(int64(d))
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}
