package soak

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Phases of the server soak, by the time a response completed: a request
// sent just before the slowdown that waits into it belongs to the slowdown.
const (
	phaseBefore = iota // before the slowdown
	phaseSlow          // during the slowdown
	phaseAfter         // after the slowdown
	numPhases
)

var phaseNames = [numPhases]string{"before", "slowdown", "after"}

// collector aggregates the load generator's results: overall vegeta
// metrics, per-second counts (atomic, so that the sampler may print them
// while the attack runs) and the latency of admitted (2xx) responses per
// phase. It keeps no per-request state.
type collector struct {
	cfg   Config
	start time.Time

	all      vegeta.Metrics
	admitted [numPhases]vegeta.LatencyMetrics
	nAdm     [numPhases]uint64
	admAll   vegeta.LatencyMetrics
	statuses map[int]uint64
	errors   uint64
	errSeen  map[string]struct{}
	errList  []string
	maxLat   time.Duration

	// Per second: sent by send time, the others by completion time.
	sent, ok, limited, shed, other []atomic.Uint64
}

func newCollector(cfg Config, start time.Time, secs int) *collector {
	return &collector{
		cfg:      cfg,
		start:    start,
		statuses: map[int]uint64{},
		errSeen:  map[string]struct{}{},
		sent:     make([]atomic.Uint64, secs),
		ok:       make([]atomic.Uint64, secs),
		limited:  make([]atomic.Uint64, secs),
		shed:     make([]atomic.Uint64, secs),
		other:    make([]atomic.Uint64, secs),
	}
}

func (c *collector) second(t time.Time) int {
	s := int(t.Sub(c.start) / time.Second)
	return min(max(s, 0), len(c.sent)-1)
}

func (c *collector) phase(t time.Time) int {
	switch d := t.Sub(c.start); {
	case d < c.cfg.SlowdownStart:
		return phaseBefore
	case d < c.cfg.SlowdownEnd:
		return phaseSlow
	default:
		return phaseAfter
	}
}

func (c *collector) add(r *vegeta.Result) {
	c.all.Add(r)
	c.sent[c.second(r.Timestamp)].Add(1)
	end := c.second(r.End())
	c.maxLat = max(c.maxLat, r.Latency)
	if r.Code == 0 {
		// No response: a transport error or a client timeout.
		c.errors++
		if len(c.errList) < 8 {
			if _, seen := c.errSeen[r.Error]; !seen {
				c.errSeen[r.Error] = struct{}{}
				c.errList = append(c.errList, r.Error)
			}
		}
		c.other[end].Add(1)
		return
	}
	c.statuses[int(r.Code)]++
	switch {
	case r.Code >= 200 && r.Code < 300:
		c.ok[end].Add(1)
		p := c.phase(r.End())
		c.admitted[p].Add(r.Latency)
		c.nAdm[p]++
		c.admAll.Add(r.Latency)
	case r.Code == http.StatusTooManyRequests:
		c.limited[end].Add(1)
	case r.Code == http.StatusServiceUnavailable:
		c.shed[end].Add(1)
	default:
		c.other[end].Add(1)
	}
}

// finish fills the traffic part of rep, with the upstream's figures.
func (c *collector) finish(rep *Report, up *upstream) {
	busy := up.busy
	for p := range numPhases {
		rep.EffectiveService[p] = up.effectiveService(p)
	}
	c.all.Close()
	rep.Requests = c.all.Requests
	rep.OfferedRate = c.all.Rate
	rep.Statuses = c.statuses
	rep.TransportErrors = c.errors
	rep.ErrorSamples = c.errList
	rep.MaxLatency = c.maxLat
	for code, n := range c.statuses {
		switch {
		case code >= 200 && code < 300:
			rep.Admitted += n
		case code == http.StatusTooManyRequests:
			rep.RateLimited += n
		case code == http.StatusServiceUnavailable:
			rep.Shed += n
		default:
			rep.OtherStatuses += n
		}
	}
	if rep.Requests > 0 {
		rep.ShedRate = float64(rep.RateLimited+rep.Shed) / float64(rep.Requests)
	}
	rep.AdmittedLatency.All = quantiles(&c.admAll, c.admAll.Total, sumPhases(c.nAdm))
	for p := range numPhases {
		rep.AdmittedLatency.Phases[p] = quantiles(&c.admitted[p], c.admitted[p].Total, c.nAdm[p])
	}

	workers := float64(c.cfg.Capacity) * float64(time.Second)
	util := func(s int) float64 { return float64(busy[s].Load()) / workers }
	dur := int(c.cfg.Duration / time.Second)
	rep.PerSecond = make([]Second, 0, len(c.sent))
	for s := range c.sent {
		row := Second{
			T:           s,
			Sent:        c.sent[s].Load(),
			OK:          c.ok[s].Load(),
			RateLimited: c.limited[s].Load(),
			Shed:        c.shed[s].Load(),
			Other:       c.other[s].Load(),
			Utilization: util(s),
		}
		if s >= dur && row.Sent+row.OK+row.RateLimited+row.Shed+row.Other == 0 {
			break
		}
		rep.PerSecond = append(rep.PerSecond, row)
	}

	// Levels before the slowdown (the first second is the ramp-up) and
	// during it, over whole seconds of the attack.
	ok := func(s int) float64 { return float64(c.ok[s].Load()) }
	sf, st := int(c.cfg.SlowdownStart/time.Second), int(c.cfg.SlowdownEnd/time.Second)
	rep.GoodputBefore, rep.UtilizationBefore = meanOver(ok, 1, sf), meanOver(util, 1, sf)
	rep.GoodputSlowdown = meanOver(ok, sf, st)
	share := c.cfg.Thresholds.RecoveryShare
	rep.Recovery = recoveryAfter(ok, st, dur, share*rep.GoodputBefore)
	rep.UtilizationRecovery = recoveryAfter(util, st, dur, share*rep.UtilizationBefore)
}

func meanOver(f func(int) float64, from, to int) float64 {
	if to <= from {
		return 0
	}
	var t float64
	for s := from; s < to; s++ {
		t += f(s)
	}
	return t / float64(to-from)
}

// recoveryAfter returns the time from second from to the end of the first
// second in [from, to) whose value reaches level, -1 when none does.
func recoveryAfter(f func(int) float64, from, to int, level float64) time.Duration {
	for s := from; s < to; s++ {
		if f(s) >= level {
			return time.Duration(s+1-from) * time.Second
		}
	}
	return -1
}

func sumPhases(n [numPhases]uint64) uint64 {
	var t uint64
	for _, v := range n {
		t += v
	}
	return t
}

func quantiles(l *vegeta.LatencyMetrics, total time.Duration, n uint64) Latency {
	if n == 0 {
		return Latency{}
	}
	return Latency{
		Count: n,
		Mean:  total / time.Duration(n),
		P50:   l.Quantile(0.5),
		P99:   l.Quantile(0.99),
		Max:   l.Max,
	}
}

// sampler reads the process's goroutines and heap and the limiter's state
// every cfg.SampleEvery.
type sampler struct {
	cfg     Config
	start   time.Time
	srv     *server
	samples []Sample
}

func newSampler(cfg Config, start time.Time, srv *server) *sampler {
	return &sampler{cfg: cfg, start: start, srv: srv}
}

func (s *sampler) run(stop <-chan struct{}, col *collector) {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	var ms runtime.MemStats
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			// A collection first, so that HeapInuse is live memory rather
			// than garbage awaiting the next cycle.
			runtime.GC()
			runtime.ReadMemStats(&ms)
			smp := Sample{
				T:           now.Sub(s.start),
				Goroutines:  runtime.NumGoroutine(),
				HeapInuse:   ms.HeapInuse,
				Limit:       s.srv.lim.Limit(),
				InFlight:    s.srv.lim.InFlight(),
				ServerConns: s.srv.conns.Load(),
			}
			s.samples = append(s.samples, smp)
			if s.cfg.Logf != nil {
				sec := col.second(now) - 1
				if sec >= 0 {
					s.cfg.Logf("t=%3ds sent=%5d 2xx=%4d 429=%4d 503=%5d other=%d limit=%3d inflight=%3d goroutines=%4d heap=%5.1fMiB conns=%d",
						sec+1, col.sent[sec].Load(), col.ok[sec].Load(), col.limited[sec].Load(), col.shed[sec].Load(), col.other[sec].Load(),
						smp.Limit, smp.InFlight, smp.Goroutines, float64(smp.HeapInuse)/(1<<20), smp.ServerConns)
				}
			}
		}
	}
}

// finish fills the resource part of rep.
func (s *sampler) finish(rep *Report) {
	rep.Samples = s.samples
	var after []Sample
	var warm []Sample
	for _, smp := range s.samples {
		if smp.T >= s.cfg.Warmup {
			after = append(after, smp)
		} else if smp.T >= s.cfg.Warmup/2 {
			warm = append(warm, smp)
		}
	}
	if len(warm) == 0 && len(s.samples) > 0 {
		warm = s.samples[:1]
	}
	rep.Goroutines = summarize(warm, after, func(x Sample) float64 { return float64(x.Goroutines) })
	rep.Heap = summarize(warm, after, func(x Sample) float64 { return float64(x.HeapInuse) })
	rep.LimitMin, rep.LimitMax = -1, 0
	for _, smp := range s.samples {
		if rep.LimitMin < 0 || smp.Limit < rep.LimitMin {
			rep.LimitMin = smp.Limit
		}
		rep.LimitMax = max(rep.LimitMax, smp.Limit)
	}
	// Merge the resource samples into the per-second rows (sample k is
	// taken at about k+1 seconds, at the end of row k).
	for i := range rep.PerSecond {
		for _, smp := range s.samples {
			if int((smp.T-time.Millisecond)/time.Second) == rep.PerSecond[i].T {
				rep.PerSecond[i].Limit = smp.Limit
				rep.PerSecond[i].InFlight = smp.InFlight
				rep.PerSecond[i].Goroutines = smp.Goroutines
				rep.PerSecond[i].HeapInuse = smp.HeapInuse
			}
		}
	}
}

// summarize computes the warm-up level, the peak after warm-up and the
// means of the first and last quarters of the samples after warm-up.
func summarize(warm, after []Sample, f func(Sample) float64) Resource {
	var r Resource
	r.Warmup = mean(warm, f)
	for _, x := range after {
		r.Peak = max(r.Peak, f(x))
	}
	if q := len(after) / 4; q > 0 {
		r.FirstQuarter = mean(after[:q], f)
		r.LastQuarter = mean(after[len(after)-q:], f)
	}
	r.Samples = len(after)
	return r
}

func mean(xs []Sample, f func(Sample) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var t float64
	for _, x := range xs {
		t += f(x)
	}
	return t / float64(len(xs))
}
