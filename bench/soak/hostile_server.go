package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// Paths, headers and classes of the hostile soak's service.
const (
	healthPath = "/healthz"
	itemsPath  = "/api/items"
	uploadPath = "/api/upload"
	streamPath = "/api/stream"
	wsPath     = "/api/ws"
	exportPath = "/batch/export"
	// failHeader asks the upstream to answer every attempt with 503 and
	// an endless body (the hostile "flaky" requests).
	failHeader = "X-Soak-Fail"
	// interactiveClass and batchClass index the limiter's classes; batch
	// is the last, so the middleware's default.
	interactiveClass = shed.Class(0)
	batchClass       = shed.Class(1)
	// maxUploadBytes bounds request bodies (MaxBodyBytes).
	maxUploadBytes = 64 << 10
	// streamChunks chunks of 1 KiB, one per streamTick, make a stream.
	streamChunks = 16
	streamTick   = 20 * time.Millisecond
)

// hostileSkipPaths bypass the middleware.
var hostileSkipPaths = []string{healthPath}

// connCounter counts the connections a dialer opened and those still
// open, on the client side: the server's ConnState cannot see a client
// that keeps a connection it no longer uses.
type connCounter struct {
	open, opened atomic.Int64
}

func (c *connCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.open.Add(1)
	c.opened.Add(1)
	return &countedConn{Conn: conn, c: c}, nil
}

// countedConn decrements its counter on the first Close.
type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() { cc.c.open.Add(-1) })
	return cc.Conn.Close()
}

// reset closes the connection with an RST instead of a FIN: the abrupt
// disconnect of a client that crashed or was killed.
func (cc *countedConn) reset() {
	if tc, ok := cc.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = cc.Close()
}

// serverConns counts a server's connections with ConnState.
type serverConns struct {
	open, accepted atomic.Int64
}

func (s *serverConns) track(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.accepted.Add(1)
		s.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
	}
}

// errorLog keeps the lines net/http logs (a handler panic shows there) and
// counts them.
type errorLog struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (l *errorLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.lines) < 8 {
		l.lines = append(l.lines, strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (l *errorLog) snapshot() (int, []string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	panics := 0
	for _, s := range l.lines {
		if strings.Contains(s, "panic") {
			panics++
		}
	}
	return l.n, append([]string(nil), l.lines...), panics
}

// hostileUpstream is the dependency the service calls through the
// retrying client. Every FailEvery-th attempt, and every attempt that
// carries failHeader, gets 503 headers at once and then a body that never
// ends: silent or trickling one byte per 100 ms, until the client closes
// the connection or the upstream stops.
type hostileUpstream struct {
	srv      *http.Server
	url      string
	served   chan error
	stop     chan struct{}
	conns    serverConns
	inflight atomic.Int64 // handlers running, endless bodies included
	attempts atomic.Uint64
	endless  atomic.Uint64 // attempts answered with an endless body
	service  time.Duration
	every    uint64
}

func startUpstream(cfg HostileConfig) (*hostileUpstream, error) {
	u := &hostileUpstream{served: make(chan error, 1), stop: make(chan struct{}), service: cfg.ServiceTime, every: uint64(cfg.FailEvery)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u.url = "http://" + ln.Addr().String()
	u.srv = &http.Server{
		Handler:           http.HandlerFunc(u.serve),
		ReadHeaderTimeout: 5 * time.Second,
		ConnState:         u.conns.track,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { u.served <- u.srv.Serve(ln) }()
	return u, nil
}

func (u *hostileUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.inflight.Add(1)
	defer u.inflight.Add(-1)
	n := u.attempts.Add(1)
	if r.Header.Get(failHeader) != "" || n%u.every == 0 {
		u.endless.Add(1)
		u.endlessBody(w, r, n%2 == 0)
		return
	}
	t := time.NewTimer(u.service)
	defer t.Stop()
	select {
	case <-t.C:
		_, _ = io.WriteString(w, "ok\n")
	case <-r.Context().Done():
	}
}

// endlessBody answers a plain (retryable) 503 whose body never ends. The
// handler returns when its client closes the connection (the request
// context ends) or the upstream stops: a client that neither reads nor
// closes would keep it forever, which the end-of-run checks would see.
func (u *hostileUpstream) endlessBody(w http.ResponseWriter, r *http.Request, trickle bool) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusServiceUnavailable)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-u.stop:
			return
		case <-tick.C:
			if trickle {
				if _, err := w.Write([]byte{'x'}); err != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
			}
		}
	}
}

func (u *hostileUpstream) close(ctx context.Context) error {
	close(u.stop)
	err := u.srv.Shutdown(ctx)
	if serr := <-u.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// runStats counts the runs of the service's handlers: with a permit
// (admitted by the limiter), without one on a skipped path, and without
// one anywhere else (a bypass of the limit). Percent-encoded paths are
// counted apart: they must never run without a permit, nor in a class
// above the default.
type runStats struct {
	withPermit, skipped, bypass atomic.Uint64
	encoded, encodedBypass      atomic.Uint64
	escalated                   atomic.Uint64
}

// note records a handler run; call it first thing in every handler.
func (s *runStats) note(r *http.Request) {
	p := nethttp.Permit(r.Context())
	switch {
	case p != nil:
		s.withPermit.Add(1)
	case r.URL.RawPath == "" && r.URL.Path == healthPath:
		s.skipped.Add(1)
	default:
		s.bypass.Add(1)
	}
	if r.URL.RawPath == "" {
		return
	}
	// The encoded variants the soak sends start with no route prefix
	// as sent, so the middleware must give them the default class.
	s.encoded.Add(1)
	if p == nil {
		s.encodedBypass.Add(1)
	} else if p.Class() != batchClass {
		s.escalated.Add(1)
	}
}

// callStats classifies the service's calls to the upstream through the
// retrying client. A call "met an endless body" when an attempt was
// answered 503 (the transport then retried, draining the body within
// MaxDrainTime, or returned that 503). A call cut by the request
// deadline is what a retry hung on an endless body looked like before
// the drain was bounded.
type callStats struct {
	calls, ok, last503, cancelled, deadline, otherErr atomic.Uint64
	metEndless, retried                               atomic.Uint64
	maxEndless                                        atomic.Int64 // longest call that met an endless body, ns
	errMu                                             sync.Mutex
	errSample                                         []string
}

func (c *callStats) note(ctx context.Context, d time.Duration, status, attempts int, err error) {
	c.calls.Add(1)
	if attempts > 1 {
		c.retried.Add(1)
	}
	met := status == http.StatusServiceUnavailable || attempts > 1
	switch {
	case err == nil && status == http.StatusOK:
		c.ok.Add(1)
	case err == nil:
		c.last503.Add(1)
	case errors.Is(ctx.Err(), context.Canceled):
		c.cancelled.Add(1)
		met = false // the client left: its time says nothing
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		c.deadline.Add(1)
	default:
		c.otherErr.Add(1)
		c.errMu.Lock()
		if len(c.errSample) < 4 {
			c.errSample = append(c.errSample, portRE.ReplaceAllString(err.Error(), ":PORT"))
		}
		c.errMu.Unlock()
	}
	if met {
		c.metEndless.Add(1)
		for m := c.maxEndless.Load(); int64(d) > m && !c.maxEndless.CompareAndSwap(m, int64(d)); m = c.maxEndless.Load() {
		}
	}
}

// hostileServer is the service under attack: a net/http server on
// 127.0.0.1, a request-timeout middleware, shedkit's middleware (two
// classes, per-key rate limits, SkipPaths, a Gradient limit that can only
// stay or fall) and a ServeMux whose handlers read bodies, stream, hijack
// and call the upstream through retrybudget.Transport.
type hostileServer struct {
	cfg       HostileConfig
	lim       *shed.Limiter
	grad      *limits.Gradient
	srv       *http.Server
	url, addr string
	served    chan error
	up        *hostileUpstream
	base      *http.Transport // the retrying client's connections
	rt        *retrybudget.Transport
	budget    *retrybudget.Budget
	perKey    rate.Limit
	burst     int

	// shutdown ends every request's context when cancelled, as a
	// graceful-shutdown middleware (or a cancelled BaseContext) does.
	shutdown       context.Context
	cancelShutdown context.CancelFunc

	conns        serverConns
	upClient     connCounter // the retrying client's side of the upstream connections
	inflight     atomic.Int64
	hijackedOpen atomic.Int64
	hijacks      atomic.Uint64
	hijackHeld   atomic.Uint64 // hijacked connections whose permit was still held after the hijack
	runs         runStats
	calls        callStats
	bodyErrors   atomic.Uint64 // uploads whose body failed (client gone, reset, cut)
	lateBodies   atomic.Uint64 // uploads whose body ended after the request deadline
	streamCut    atomic.Uint64 // streams whose client left mid-response
	errLog       errorLog
}

// startHostileServer starts the upstream and the service.
func startHostileServer(cfg HostileConfig) (*hostileServer, error) {
	up, err := startUpstream(cfg)
	if err != nil {
		return nil, err
	}
	s := &hostileServer{cfg: cfg, up: up, served: make(chan error, 1)}
	s.shutdown, s.cancelShutdown = context.WithCancel(context.Background())
	if err := s.buildLimiter(); err != nil {
		_ = up.close(context.Background())
		return nil, err
	}
	if err := s.buildClient(); err != nil {
		_ = up.close(context.Background())
		return nil, err
	}
	h, err := s.handler()
	if err != nil {
		_ = up.close(context.Background())
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = up.close(context.Background())
		return nil, err
	}
	s.addr = ln.Addr().String()
	s.url = "http://" + s.addr
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		// ReadTimeout cuts an upload that stalls for good. It is twice
		// the request deadline so that a stalled upload misses its
		// deadline first, the case where the middleware must see that
		// the client, not the service, was slow. (Shorter, the failed
		// read would cancel the request context first, which reads as a
		// client that left.)
		ReadTimeout: 2 * cfg.RequestTimeout,
		IdleTimeout: 30 * time.Second,
		ConnState:   s.conns.track,
		ErrorLog:    log.New(&s.errLog, "", 0),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// buildLimiter makes the limiter, tuned as an instrument that shows any
// overload signal: a Gradient whose initial limit is also its maximum, so
// that it can only stay or fall; a backoff of 0.5, so that a window with
// drops beyond the background halves it; one-second windows, so that the
// drops of requests that arrive spread over a deadline land several to a
// window (Gradient never counts a window's single drop); a baseline and
// background learned in the first window, before the hostile clients; and
// a tolerance of 10, so that latency cuts it only far above the baseline,
// not for the noise of a shared machine; and a MinUtilization of 0.05,
// so that the normal traffic's few requests in flight count as using the
// limit and it does not shrink to their demand before the hostile clients
// come (the check compares the limit with them against the limit before).
func (s *hostileServer) buildLimiter() error {
	g, err := limits.NewGradient(limits.GradientConfig{
		InitialLimit: s.cfg.Limit,
		MaxLimit:     s.cfg.Limit,
		Backoff:      0.5,
		Tolerance:    10,
		// In use at 2 requests in flight of 32: no shrinking to demand.
		MinUtilization: 0.05,
		// The baseline and the drop background are learned in the
		// first window, before the hostile clients come.
		BaselineWindows: 1,
		Window:          limits.WindowConfig{MinDuration: time.Second, MinSamples: 10},
	})
	if err != nil {
		return err
	}
	lim, err := shed.New(shed.Config{
		Source: g,
		Classes: []shed.ClassConfig{
			// Nothing queues in the run (the limit never binds); at its
			// end the shutdown step queues requests on purpose, and they
			// wait until the request deadline if nothing ends them.
			{Name: "interactive", Protected: 0.8, QueueDepth: s.cfg.Limit, MaxWait: s.cfg.RequestTimeout},
			{Name: "batch"},
		},
	})
	if err != nil {
		return err
	}
	s.grad, s.lim = g, lim
	return nil
}

// buildClient makes the retrying client: the defaults (3 attempts,
// backoff, drain bounded to 100 ms) and one budget, breaker off: the
// flaky requests fail on purpose, and an open breaker would fail every
// call to the host, which would hide what the drain does.
func (s *hostileServer) buildClient() error {
	budget, err := retrybudget.NewBudget(retrybudget.BudgetConfig{Name: "hostile"})
	if err != nil {
		return err
	}
	s.base = &http.Transport{
		DialContext:         s.upClient.dial,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	rt, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Base:    s.base,
		Name:    "hostile",
		Budget:  budget,
		Breaker: retrybudget.BreakerConfig{Disabled: true},
	})
	if err != nil {
		return err
	}
	s.rt, s.budget = rt, budget
	return nil
}

// handler assembles the chain: count, request deadline, shedkit, mux.
func (s *hostileServer) handler() (http.Handler, error) {
	s.perKey = rate.Limit(s.cfg.perKeyRate())
	s.burst = max(1, int(s.cfg.perKeyRate()/10))
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:   s.lim,
			Routes:    map[string]string{"/api/": "interactive", "/batch/": "batch"},
			KeyHeader: tenantHeader,
			RateLimits: map[string]shedhttp.RateLimit{
				"interactive": {Rate: s.perKey, Burst: s.burst},
				"batch":       {Rate: s.perKey, Burst: s.burst},
			},
			MaxBodyBytes: maxUploadBytes,
			SkipPaths:    hostileSkipPaths,
			// The service answers 502 when the upstream failed (its 503s,
			// endless bodies included, come back as 502). That is the
			// upstream's trouble, which the retry budget bounds, not this
			// service's overload: counted as Dropped it would cut the limit
			// and blur what the soak measures, the effect of slow clients.
			Outcome: func(r *http.Request, status int) shed.Outcome {
				if status == http.StatusBadGateway {
					return shed.Ignored
				}
				return shedhttp.DefaultOutcome(r, status)
			},
		},
	})
	if err != nil {
		return nil, err
	}
	protected := mw(s.mux())
	timeout := s.cfg.RequestTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		// The request-timeout middleware: a deadline on the context
		// only, as most do. A body that comes slowly is read past it.
		// At shutdown it ends every request's context.
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		defer context.AfterFunc(s.shutdown, cancel)()
		protected.ServeHTTP(w, r.WithContext(ctx))
	}), nil
}

func (s *hostileServer) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc(healthPath, func(w http.ResponseWriter, r *http.Request) {
		s.runs.note(r)
		writeProof(w, r)
	})
	m.HandleFunc(itemsPath, s.items)
	m.HandleFunc(exportPath, s.items)
	m.HandleFunc(uploadPath, s.upload)
	m.HandleFunc(streamPath, s.stream)
	m.HandleFunc(wsPath, s.websocket)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.runs.note(r)
		http.NotFound(w, r)
	})
	return m
}

// writeProof ends a successful response with "ok <id>": a 200 without it
// was not written by a handler that ran for that request.
func writeProof(w http.ResponseWriter, r *http.Request) {
	_, _ = fmt.Fprintf(w, "ok %s\n", r.URL.Query().Get("id"))
}

// items calls the upstream and answers with the proof.
func (s *hostileServer) items(w http.ResponseWriter, r *http.Request) {
	s.runs.note(r)
	if s.slowWork(w, r) {
		return
	}
	if status := s.callUpstream(r); status != http.StatusOK {
		http.Error(w, http.StatusText(status), status)
		return
	}
	writeProof(w, r)
}

// slowWork is the ablation of HostileConfig.SlowWork: the request works
// until its deadline and answers 503, the service's own slowness, which
// the limit must see (Dropped).
func (s *hostileServer) slowWork(w http.ResponseWriter, r *http.Request) bool {
	if !s.cfg.SlowWork || r.URL.Query().Get("work") != "slow" {
		return false
	}
	<-r.Context().Done()
	http.Error(w, "timeout", http.StatusServiceUnavailable)
	return true
}

// upload reads the body, then calls the upstream. A body that ended after
// the request deadline gets 503, as a request-timeout middleware answers.
func (s *hostileServer) upload(w http.ResponseWriter, r *http.Request) {
	s.runs.note(r)
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		s.bodyErrors.Add(1)
		status := http.StatusBadRequest
		if r.Context().Err() != nil {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, "body: "+http.StatusText(status), status)
		return
	}
	if r.Context().Err() != nil {
		s.lateBodies.Add(1)
		http.Error(w, "request timeout", http.StatusServiceUnavailable)
		return
	}
	if s.slowWork(w, r) {
		return
	}
	if status := s.callUpstream(r); status != http.StatusOK {
		http.Error(w, http.StatusText(status), status)
		return
	}
	writeProof(w, r)
}

// stream does its costly part (an upstream call), then streams 16 chunks
// and the proof. Unless asked to hold its permit (hold=1), it releases it
// before streaming, as the nethttp documentation advises for streams (the
// time spent writing to the client is no latency of the service); a held
// permit must come back when the client leaves mid-stream.
func (s *hostileServer) stream(w http.ResponseWriter, r *http.Request) {
	s.runs.note(r)
	if status := s.callUpstream(r); status != http.StatusOK {
		http.Error(w, http.StatusText(status), status)
		return
	}
	if p := nethttp.Permit(r.Context()); p != nil && r.URL.Query().Get("hold") == "" {
		p.Release(shed.Success)
	}
	w.Header().Set("Content-Type", "text/plain")
	rc := http.NewResponseController(w)
	chunk := []byte(strings.Repeat("s", 1023) + "\n")
	tick := time.NewTicker(streamTick)
	defer tick.Stop()
	for range streamChunks {
		if _, err := w.Write(chunk); err != nil || rc.Flush() != nil {
			s.streamCut.Add(1)
			return
		}
		select {
		case <-r.Context().Done():
			s.streamCut.Add(1)
			return
		case <-tick.C:
		}
	}
	writeProof(w, r)
}

// websocket hijacks the connection, answers 101 and idles until the
// client closes (or HangBound passes: everything ends by itself).
func (s *hostileServer) websocket(w http.ResponseWriter, r *http.Request) {
	s.runs.note(r)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.hijacks.Add(1)
	// The middleware releases the permit at the hijack: an idle
	// connection must not hold a slot of the limit for its life.
	if p := nethttp.Permit(r.Context()); p != nil && p.Valid() {
		s.hijackHeld.Add(1)
	}
	s.hijackedOpen.Add(1)
	defer s.hijackedOpen.Add(-1)
	defer conn.Close()
	// The server's ReadTimeout deadline stays on a hijacked connection;
	// a WebSocket library replaces it, as this does.
	_ = conn.SetDeadline(time.Now().Add(s.cfg.HangBound))
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: soak\r\nConnection: Upgrade\r\n\r\n")
	if brw.Flush() != nil {
		return
	}
	_, _ = io.Copy(io.Discard, brw)
}

// callUpstream calls the upstream through the retrying client and returns
// the status to answer: 200, 502 (the upstream failed: its last 503, or
// an error) or 503 (the request's context ended).
func (s *hostileServer) callUpstream(r *http.Request) int {
	ctx := r.Context()
	var rep retrybudget.Report
	req, err := http.NewRequestWithContext(retrybudget.WithReport(ctx, &rep), http.MethodGet, s.up.url+"/work", nil)
	if err != nil {
		return http.StatusInternalServerError
	}
	if r.URL.Query().Get("fail") != "" {
		req.Header.Set(failHeader, "all")
	}
	start := time.Now()
	resp, err := s.rt.RoundTrip(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
		if status == http.StatusOK {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
		}
		// A 503's body never ends: closing it unread must not block.
		resp.Body.Close()
	}
	s.calls.note(ctx, time.Since(start), status, rep.Attempts, err)
	switch {
	case err == nil && status == http.StatusOK:
		return http.StatusOK
	case err != nil && ctx.Err() != nil:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// QueuedShutdown is what the shutdown step saw: Held permits taken to
// fill the limit, Sent requests of which Queued were waiting when the
// shutdown ended their contexts, and how their clients were answered.
type QueuedShutdown struct {
	Held, Sent, Queued                         int
	Answered503, FalseSuccess, Other, NoAnswer int
	// HandlerRuns counts handler runs during the step: none may start
	// for a request whose context ended while it waited.
	HandlerRuns uint64
}

// shutdownWhileQueued fills the limit, queues n requests, then shuts
// down (ends every request context) while their clients still wait. Each
// must get a 503, never the empty 200 net/http sends for a handler chain
// that wrote nothing. It runs once all traffic is over, and the held
// permits are released Ignored before it returns.
func (s *hostileServer) shutdownWhileQueued(get func(ctx context.Context, path, tenant, id string) outcome, n int) QueuedShutdown {
	var q QueuedShutdown
	// Exactly the free slots: one more TryAcquire would count a rejection.
	var held []shed.Permit
	for range s.lim.Limit() - s.lim.InFlight() {
		p, err := s.lim.TryAcquire(shed.Request{Class: batchClass})
		if err != nil {
			break
		}
		held = append(held, p)
	}
	defer func() {
		for i := range held {
			held[i].Release(shed.Ignored)
		}
	}()
	q.Held, q.Sent = len(held), n
	runs := s.runs.withPermit.Load()
	results := make(chan outcome, n)
	for i := range n {
		id := fmt.Sprintf("q%d", i)
		// A tenant each: n at once would exceed one key's burst.
		go func() { results <- get(context.Background(), itemsPath+"?id="+id, "queued"+id, id) }()
	}
	deadline := time.Now().Add(s.cfg.RequestTimeout / 2)
	for s.lim.Snapshot().Queued < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	q.Queued = s.lim.Snapshot().Queued
	s.cancelShutdown()
	for range n {
		switch o := <-results; {
		case o.err != nil:
			q.NoAnswer++
		case o.status == http.StatusServiceUnavailable:
			q.Answered503++
		case o.status == http.StatusOK && !o.proof:
			q.FalseSuccess++
		default:
			q.Other++
		}
	}
	q.HandlerRuns = s.runs.withPermit.Load() - runs
	return q
}

// close drains the limiter, shuts the service down, then the upstream.
func (s *hostileServer) close(ctx context.Context) (shed.DrainReport, error) {
	s.cancelShutdown()
	rep, derr := s.lim.Drain(ctx)
	err := s.srv.Shutdown(ctx)
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	s.base.CloseIdleConnections()
	err = errors.Join(err, s.up.close(ctx))
	if derr != nil {
		err = errors.Join(err, fmt.Errorf("drain: %w", derr))
	}
	return rep, err
}
