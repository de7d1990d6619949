package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// Paths and header of the system under test.
const (
	interactivePath = "/api/items"
	batchPath       = "/batch/export"
	tenantHeader    = "X-Tenant"
)

// upstream models the dependency the service calls: Capacity workers, each
// busy for the service time of one request. Past Capacity requests wait
// for a worker, so latency grows with the queue and throughput is capped at
// Capacity / service time. Between slowFrom and slowTo (offsets from
// start) the service time is multiplied by factor.
type upstream struct {
	workers          chan struct{}
	healthy          time.Duration
	factor           float64
	start            time.Time
	slowFrom, slowTo time.Duration
	// busy[s] is the worker time (ns) spent in second s on calls that
	// succeeded: the useful work the upstream did.
	busy []atomic.Int64
	// held and calls sum the worker time and count the calls that
	// succeeded, by the phase in which they ended: the effective service
	// time, which exceeds the configured one when the process is starved
	// of CPU and timers fire late.
	held, calls [numPhases]atomic.Int64
}

func (u *upstream) phase(t time.Duration) int {
	switch {
	case t < u.slowFrom:
		return phaseBefore
	case t < u.slowTo:
		return phaseSlow
	}
	return phaseAfter
}

// effectiveService returns the mean worker time of the successful calls
// that ended in phase p, 0 when there were none.
func (u *upstream) effectiveService(p int) time.Duration {
	n := u.calls[p].Load()
	if n == 0 {
		return 0
	}
	return time.Duration(u.held[p].Load() / n)
}

func (u *upstream) serviceTime(now time.Time) time.Duration {
	if t := now.Sub(u.start); t >= u.slowFrom && t < u.slowTo {
		return time.Duration(float64(u.healthy) * u.factor)
	}
	return u.healthy
}

// call does one unit of upstream work; false when ctx ended first (the
// caller's deadline: the worker is given back at once, as a dependency
// that sees its caller hang up would).
func (u *upstream) call(ctx context.Context) bool {
	select {
	case u.workers <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-u.workers }()
	began := time.Now()
	t := time.NewTimer(u.serviceTime(began))
	defer t.Stop()
	select {
	case <-t.C:
		from, to := began.Sub(u.start), time.Since(u.start)
		u.addBusy(from, to)
		p := u.phase(to)
		u.held[p].Add(int64(to - from))
		u.calls[p].Add(1)
		return true
	case <-ctx.Done():
		return false
	}
}

// addBusy spreads the worker time [from, to) (offsets from the start)
// over the seconds it spans.
func (u *upstream) addBusy(from, to time.Duration) {
	for from < to {
		s := int(from / time.Second)
		if s < 0 || s >= len(u.busy) {
			return
		}
		end := min(to, time.Duration(s+1)*time.Second)
		u.busy[s].Add(int64(end - from))
		from = end
	}
}

// server is the system under test: a net/http server on 127.0.0.1 with the
// shedkit middleware (per-tenant rate limit, then a shed.Limiter with a
// Gradient limit and two classes) in front of a handler that calls the
// upstream model.
type server struct {
	up       *upstream
	lim      *shed.Limiter
	srv      *http.Server
	url      string
	inflight atomic.Int64 // requests inside the handler chain
	conns    atomic.Int64 // open server-side connections
	newConns atomic.Int64 // connections accepted
	served   chan error
}

// soakAdmission builds the service's limiter (Gradient at its defaults
// from the upstream's concurrency, or a static limit) and its middleware:
// interactive protected, batch borrowing, a rate limit per tenant.
func soakAdmission(cfg Config) (*shed.Limiter, func(http.Handler) http.Handler, error) {
	var source shed.LimitSource
	if cfg.StaticLimit == 0 {
		// Gradient's defaults, started at the upstream's concurrency.
		gradient, err := limits.NewGradient(limits.GradientConfig{
			InitialLimit: cfg.Capacity,
			MaxLimit:     20 * cfg.Capacity,
		})
		if err != nil {
			return nil, nil, err
		}
		source = gradient
	} else {
		fixed, err := limits.NewFixed(cfg.StaticLimit)
		if err != nil {
			return nil, nil, err
		}
		source = fixed
	}
	lim, err := shed.New(shed.Config{
		Source: source,
		Classes: []shed.ClassConfig{
			// Interactive keeps most of the limit and may wait one healthy
			// service time; batch borrows what interactive leaves idle.
			{Name: "interactive", Protected: 0.8, QueueDepth: cfg.Capacity, MaxWait: cfg.ServiceTime},
			{Name: "batch"},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	// Each tenant may send twice its fair share of the offered rate: the
	// ordinary tenants never reach it, the greedy one (4 shares) does.
	perKey := rate.Limit(2 * float64(cfg.Rate) / float64(len(targetMix)))
	burst := max(1, int(perKey/10))
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:   lim,
			Routes:    map[string]string{"/api/": "interactive", "/batch/": "batch"},
			KeyHeader: tenantHeader,
			RateLimits: map[string]shedhttp.RateLimit{
				"interactive": {Rate: perKey, Burst: burst},
				"batch":       {Rate: perKey, Burst: burst},
			},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	return lim, mw, nil
}

func startServer(cfg Config, start time.Time, secs int) (*server, error) {
	up := &upstream{
		workers:  make(chan struct{}, cfg.Capacity),
		healthy:  cfg.ServiceTime,
		factor:   cfg.SlowdownFactor,
		start:    start,
		slowFrom: cfg.SlowdownStart,
		slowTo:   cfg.SlowdownEnd,
		busy:     make([]atomic.Int64, secs),
	}
	lim, mw, err := soakAdmission(cfg)
	if err != nil {
		return nil, err
	}
	s := &server{up: up, lim: lim, served: make(chan error, 1)}
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.call(r.Context()) {
			// The request's deadline passed: the service gives up on the
			// upstream and says so. The middleware releases the permit as
			// Dropped, the overload signal for the limit.
			http.Error(w, "upstream timeout", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	protected := mw(work)
	timeout := cfg.RequestTimeout
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		// Every request has a deadline, so the server answers within
		// RequestTimeout whatever the upstream does, and admission can
		// refuse work whose deadline is shorter than the expected wait.
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		protected.ServeHTTP(w, r.WithContext(ctx))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.newConns.Add(1)
				s.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.conns.Add(-1)
			}
		},
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// close drains the limiter, shuts the server down and waits for Serve to
// return.
func (s *server) close(ctx context.Context) (shed.DrainReport, error) {
	rep, derr := s.lim.Drain(ctx)
	err := s.srv.Shutdown(ctx)
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if derr != nil {
		err = errors.Join(err, fmt.Errorf("drain: %w", derr))
	}
	return rep, err
}

// targetMix is the traffic: 8 ordinary tenants, one greedy tenant with four
// times their share (rate limited: 429), and two batch tenants. Every
// request costs 1.
var targetMix = []struct{ path, tenant string }{
	{interactivePath, "t1"}, {interactivePath, "t2"}, {interactivePath, "t3"}, {interactivePath, "t4"},
	{interactivePath, "t5"}, {interactivePath, "t6"}, {interactivePath, "t7"}, {interactivePath, "t8"},
	{interactivePath, "greedy"}, {interactivePath, "greedy"}, {interactivePath, "greedy"}, {interactivePath, "greedy"},
	{batchPath, "b1"}, {batchPath, "b2"},
}
