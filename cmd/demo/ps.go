package main

import (
	"sync"
	"time"
)

// psServer is a processor-sharing server in real time: with n requests in
// progress on capacity workers, each progresses at min(1, capacity/n) of
// full speed, as requests do on a CPU-bound server or on a thread pool
// larger than its cores. It is the model the simulator runs under
// upstream.discipline: ps (sim.PS), so that a prediction and a
// measurement of the demo describe the same upstream.
//
// It keeps a virtual clock v, the work (at full speed) that a request
// present all along would have received, advancing at dv/dt =
// min(1, capacity/n). A request with work w that arrives at v0 is done
// when v reaches v0 + w, whatever arrives or leaves meanwhile, so the
// requests sit in a min-heap on that finish time and one timer, re-armed
// at every arrival and departure, fires for the earliest. A timer that
// fires late or stale only finds fewer requests done: the clock advances
// by the real time elapsed. Each arrival and departure costs a clock
// reading, O(log n) under one mutex and a timer reset.
type psServer struct {
	capacity int
	now      func() time.Duration // monotonic time since the server's start
	arm      func(time.Duration)  // (re)arms the completion timer

	mu   sync.Mutex
	v    float64 // virtual time, ns of work
	last time.Duration
	jobs []psReq // min-heap on finish
	// armed says the timer is set for the request finishing at armFinish
	// at rate armRate: while both hold it is right, and not reset.
	armed              bool
	armFinish, armRate float64
}

// psReq is a request in progress: its finish virtual time and the channel
// closed when it is done.
type psReq struct {
	finish float64
	done   chan struct{}
}

// psEpsilon is the virtual time (ns of work) within which a request counts
// as done: far below a timer's resolution.
const psEpsilon = 1000

// newPSServer returns a processor-sharing server of capacity workers on
// the real clock.
func newPSServer(capacity int) *psServer {
	start := time.Now()
	s := &psServer{capacity: capacity, now: func() time.Duration { return time.Since(start) }}
	t := time.AfterFunc(time.Hour, s.fire)
	t.Stop()
	s.arm = func(d time.Duration) { t.Reset(d) }
	return s
}

// serve returns a channel closed once work (at full speed) is done. The
// work goes on whether or not anyone waits on the channel.
func (s *psServer) serve(work time.Duration) <-chan struct{} {
	done := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	s.push(psReq{finish: s.v + float64(work), done: done})
	s.rearm()
	return done
}

// inFlight returns the requests in progress.
func (s *psServer) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

// fire completes the requests that are done and re-arms the timer.
func (s *psServer) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	s.advance()
	for len(s.jobs) > 0 && s.jobs[0].finish <= s.v+psEpsilon {
		close(s.pop().done)
	}
	s.rearm()
}

// rate is the speed of each request in progress.
func (s *psServer) rate() float64 {
	if n := len(s.jobs); n > s.capacity {
		return float64(s.capacity) / float64(n)
	}
	return 1
}

func (s *psServer) advance() {
	now := s.now()
	if len(s.jobs) > 0 && now > s.last {
		s.v += float64(now-s.last) * s.rate()
	}
	s.last = now
}

// rearm sets the timer to the earliest finish at the current rate.
func (s *psServer) rearm() {
	if len(s.jobs) == 0 {
		return // a timer already armed finds nothing to do
	}
	rate, finish := s.rate(), s.jobs[0].finish
	if s.armed && rate == s.armRate && finish == s.armFinish {
		return
	}
	d := time.Duration((finish-s.v)/rate) + 1
	s.arm(max(d, 1))
	s.armed, s.armRate, s.armFinish = true, rate, finish
}

func (s *psServer) push(r psReq) {
	s.jobs = append(s.jobs, r)
	i := len(s.jobs) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s.jobs[p].finish <= r.finish {
			break
		}
		s.jobs[i] = s.jobs[p]
		i = p
	}
	s.jobs[i] = r
}

func (s *psServer) pop() psReq {
	a := s.jobs
	top, n := a[0], len(a)-1
	last := a[n]
	a[n] = psReq{}
	a = a[:n]
	s.jobs = a
	i := 0
	for n > 0 {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && a[c+1].finish < a[c].finish {
			c++
		}
		if last.finish <= a[c].finish {
			break
		}
		a[i] = a[c]
		i = c
	}
	if n > 0 {
		a[i] = last
	}
	return top
}
