package main

import (
	"slices"
	"sync"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// classes of traffic the load generator sends.
const (
	interactive = iota
	batch
	numClasses
)

// second aggregates what happened during one second of a run, by class.
type second struct {
	offered [numClasses]int // logical requests started
	ok      [numClasses]int // answered 2xx
	good    [numClasses]int // answered 2xx within the client's deadline
	shed    [numClasses]int // answered 429 or 503 by the gateway
	failed  [numClasses]int // timed out or other errors
	lat     [numClasses][]time.Duration

	// Sampled at the end of the second.
	limit, inflight int
	attempts        int // attempts that reached the upstream
	admitted        int // admitted by the gateway
	shedBy          [shed.NumReasons]int
}

func (s *second) p99(c int) time.Duration { return quantile(s.lat[c], 0.99) }

func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// recorder collects per-second stats for one run.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	secs  []second
}

func newRecorder(start time.Time, d time.Duration) *recorder {
	return &recorder{start: start, secs: make([]second, int(d/time.Second)+1)}
}

func (r *recorder) at(t time.Time) *second {
	i := int(t.Sub(r.start) / time.Second)
	return &r.secs[min(max(i, 0), len(r.secs)-1)]
}

func (r *recorder) offered(t time.Time, c int) {
	r.mu.Lock()
	r.at(t).offered[c]++
	r.mu.Unlock()
}

// outcome kinds of a logical request.
const (
	outOK = iota
	outShed
	outFailed
)

func (r *recorder) done(start, end time.Time, c, out int, good bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.at(end)
	switch out {
	case outOK:
		s.ok[c]++
		s.lat[c] = append(s.lat[c], end.Sub(start))
		if good {
			s.good[c]++
		}
	case outShed:
		s.shed[c]++
	default:
		s.failed[c]++
	}
}

// snapshot returns a copy of second i.
func (r *recorder) snapshot(i int) second {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.secs[min(i, len(r.secs)-1)]
	for c := range s.lat {
		s.lat[c] = slices.Clone(s.lat[c])
	}
	return s
}

// setGauges records the gateway's figures for second i: now, and their
// difference from prev for the cumulative ones.
func (r *recorder) setGauges(i int, now, prev gauges, attempts int) {
	r.mu.Lock()
	s := &r.secs[min(i, len(r.secs)-1)]
	s.limit, s.inflight, s.attempts = now.limit, now.inflight, attempts
	s.admitted = now.admitted - prev.admitted
	for k := range s.shedBy {
		s.shedBy[k] = now.rejected[k] - prev.rejected[k]
	}
	r.mu.Unlock()
}

// totals are the sums of some seconds of a run (see sum).
type totals struct {
	offered, ok, good, shed, failed [numClasses]int
	attempts                        int
	lat                             [numClasses][]time.Duration
}
