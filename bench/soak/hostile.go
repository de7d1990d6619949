package soak

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Defaults of HostileConfig; see the package documentation for why.
const (
	DefaultHostileDuration       = 30 * time.Second
	DefaultHostileRate           = 200
	DefaultHostileWorkers        = 32
	DefaultHostileRequestTimeout = 2 * time.Second
	DefaultHostileServiceTime    = 10 * time.Millisecond
	DefaultHostileLimit          = 32
	DefaultFailEvery             = 8
	DefaultUploadRate            = 8
)

// Phases of the hostile soak, by send time: normal traffic alone, then
// with the hostile clients, then alone again.
const (
	hostileBaseline = iota
	hostileAttack
	hostileAfter
	numHostilePhases
)

var hostilePhaseNames = [numHostilePhases]string{"baseline", "hostile", "after"}

// shutdownQueued is how many requests the shutdown step queues.
const shutdownQueued = 8

// HostileConfig configures the hostile soak. Zero fields take the
// defaults.
type HostileConfig struct {
	// Duration of the run: the hostile clients run in its middle half.
	// Default DefaultHostileDuration; at least 6s.
	Duration time.Duration
	// Rate of the normal traffic (requests per second) and the load
	// generator's workers. Defaults DefaultHostileRate,
	// DefaultHostileWorkers.
	Rate, Workers int
	// RequestTimeout is the server-side deadline of every request.
	// Default DefaultHostileRequestTimeout.
	RequestTimeout time.Duration
	// ServiceTime is the upstream's answer time. Default
	// DefaultHostileServiceTime.
	ServiceTime time.Duration
	// Limit is the Gradient's initial and maximum limit. Default
	// DefaultHostileLimit.
	Limit int
	// FailEvery: the upstream answers every FailEvery-th attempt with 503
	// and an endless body. Default DefaultFailEvery.
	FailEvery int
	// SlowUploaders (default 6) upload a few bytes per second
	// (UploadRate, default DefaultUploadRate), in turn a body that ends
	// within the deadline, one that ends after it, and one that stalls.
	SlowUploaders, UploadRate int
	// Disconnectors (2) reset or close their connection in the middle of
	// a request body; Streamers (2) in the middle of a streamed response;
	// Impatient clients (2) give up on requests within 1-100 ms, in the
	// queue, in the upstream call or in its retries; Hijackers (2) hold
	// idle upgraded connections.
	Disconnectors, Streamers, Impatient, Hijackers int
	// FlakyRate (default 5 per second) is the rate of requests whose
	// every upstream attempt gets an endless 503.
	FlakyRate int
	// EncodedRate (default twice the per-key rate limit) is the rate of
	// requests to percent-encoded variants of the service's paths, all
	// from one key.
	EncodedRate int
	// SlowWork replaces the slow uploads by requests that take as long
	// in the handler: the service's own slowness, which must cut the
	// limit. A run that must fail the limit-held check, to show it can.
	SlowWork bool
	// SampleEvery is the resource sampling period. Default 1s.
	SampleEvery time.Duration
	// HangBound is how long any client waits for anything before it
	// counts as a hang. Default 2 x RequestTimeout + 5s.
	HangBound time.Duration
	// Thresholds of the checks.
	Thresholds HostileThresholds
	// Logf, when set, receives one progress line per sample.
	Logf func(format string, args ...any)
}

// HostileThresholds are the pass marks of HostileReport.Check.
type HostileThresholds struct {
	// LimitFloor: the lowest limit while the hostile clients run is at
	// least LimitFloor x the lowest before them. Default 0.75.
	LimitFloor float64
	// MinFastSuccess is the least share of the normal requests answered
	// 200, over the run and while the hostile clients run. Default 0.97.
	MinFastSuccess float64
	// GoroutineSlack and HeapSlack bound the level after the hostile
	// clients left against the level before they came, under the same
	// normal traffic. Defaults 32 + 2 x Workers and 16 MiB.
	GoroutineSlack int
	HeapSlack      uint64
	// LeftoverGoroutines is how many goroutines more than before the run
	// may remain once everything is closed. Default 4.
	LeftoverGoroutines int
}

func (c HostileConfig) withDefaults() (HostileConfig, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Duration == 0 {
		c.Duration = DefaultHostileDuration
	}
	if c.Duration < 6*time.Second {
		return c, configError("Duration", "must be at least 6s, got %v", c.Duration)
	}
	def(&c.Rate, DefaultHostileRate)
	def(&c.Workers, DefaultHostileWorkers)
	def(&c.Limit, DefaultHostileLimit)
	def(&c.FailEvery, DefaultFailEvery)
	def(&c.SlowUploaders, 6)
	def(&c.UploadRate, DefaultUploadRate)
	def(&c.Disconnectors, 2)
	def(&c.Streamers, 2)
	def(&c.Impatient, 2)
	def(&c.Hijackers, 2)
	def(&c.FlakyRate, 5)
	if c.EncodedRate == 0 {
		c.EncodedRate = int(2 * c.perKeyRate())
	}
	for _, f := range []struct {
		name     string
		v, lo, h int
	}{
		{"Rate", c.Rate, 10, 100000}, {"Workers", c.Workers, 1, 10000}, {"Limit", c.Limit, 8, 10000},
		{"FailEvery", c.FailEvery, 2, 1000}, {"SlowUploaders", c.SlowUploaders, 0, 100},
		{"UploadRate", c.UploadRate, 1, 1000}, {"Disconnectors", c.Disconnectors, 0, 100},
		{"Streamers", c.Streamers, 0, 100}, {"Impatient", c.Impatient, 0, 100},
		{"Hijackers", c.Hijackers, 0, 100}, {"FlakyRate", c.FlakyRate, 0, 1000}, {"EncodedRate", c.EncodedRate, 0, 10000},
	} {
		if f.v < f.lo || f.v > f.h {
			return c, configError(f.name, "must be in [%d, %d], got %d", f.lo, f.h, f.v)
		}
	}
	return c.durationDefaults()
}

func (c HostileConfig) durationDefaults() (HostileConfig, error) {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultHostileRequestTimeout
	}
	if c.RequestTimeout < 500*time.Millisecond {
		return c, configError("RequestTimeout", "must be at least 500ms, got %v", c.RequestTimeout)
	}
	if c.ServiceTime == 0 {
		c.ServiceTime = DefaultHostileServiceTime
	}
	if c.ServiceTime < 0 || c.ServiceTime > c.RequestTimeout/10 {
		return c, configError("ServiceTime", "must be in [0, RequestTimeout/10], got %v", c.ServiceTime)
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = time.Second
	}
	if c.SampleEvery < 10*time.Millisecond {
		return c, configError("SampleEvery", "must be at least 10ms, got %v", c.SampleEvery)
	}
	if c.HangBound == 0 {
		c.HangBound = 2*c.RequestTimeout + 5*time.Second
	}
	if c.HangBound < 2*c.RequestTimeout {
		return c, configError("HangBound", "must be at least 2 x RequestTimeout, got %v", c.HangBound)
	}
	t := &c.Thresholds
	if t.LimitFloor == 0 {
		t.LimitFloor = 0.75
	}
	if t.MinFastSuccess == 0 {
		t.MinFastSuccess = 0.97
	}
	if t.GoroutineSlack == 0 {
		t.GoroutineSlack = 32 + 2*c.Workers
	}
	if t.HeapSlack == 0 {
		t.HeapSlack = 16 << 20
	}
	if t.LeftoverGoroutines == 0 {
		t.LeftoverGoroutines = 4
	}
	return c, nil
}

// perKeyRate is the rate limit of each key: twice the share of one
// normal tenant, so that normal tenants never reach it.
func (c HostileConfig) perKeyRate() float64 {
	return 2 * float64(c.Rate) / float64(len(normalMix))
}

// phases returns the start and the end of the hostile clients' window.
func (c HostileConfig) phases() (from, to time.Duration) {
	return c.Duration / 4, 3 * c.Duration / 4
}

func (c HostileConfig) phaseOf(t time.Duration) int {
	from, to := c.phases()
	switch {
	case t < from:
		return hostileBaseline
	case t < to:
		return hostileAttack
	}
	return hostileAfter
}

// normalMix is the normal traffic, in turn: 6 interactive readers, 2
// interactive uploaders (a 256-byte body), a batch reader and the skipped
// health check, each a tenant of its own.
var normalMix = []struct {
	method, path, tenant string
}{
	{http.MethodGet, itemsPath, "t1"}, {http.MethodGet, itemsPath, "t2"}, {http.MethodGet, itemsPath, "t3"},
	{http.MethodGet, itemsPath, "t4"}, {http.MethodGet, itemsPath, "t5"}, {http.MethodGet, itemsPath, "t6"},
	{http.MethodPost, uploadPath, "t7"}, {http.MethodPost, uploadPath, "t8"},
	{http.MethodGet, exportPath, "b1"}, {http.MethodGet, healthPath, "h"},
}

// RunHostile runs the hostile soak: normal traffic from vegeta for
// cfg.Duration, hostile clients in the middle half, resources sampled
// throughout; then it stops every client, checks that everything was
// released and closed, and shuts down. The error is about the run itself;
// whether the service behaved is HostileReport.Check's business.
func RunHostile(ctx context.Context, cfg HostileConfig) (HostileReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return HostileReport{}, err
	}
	rep := HostileReport{Config: cfg}
	rep.Before = measureResources()
	start := time.Now()
	srv, err := startHostileServer(cfg)
	if err != nil {
		return rep, err
	}
	rep.Idle = measureResources()
	normal := newNormalTraffic(cfg, srv.url)
	hc := newHostileClients(cfg, srv)
	smp := newHostileSampler(cfg, start, srv, normal, hc)
	smpStop, smpDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(smpDone)
		smp.run(smpStop)
	}()
	hostileDone := make(chan struct{})
	go func() {
		defer close(hostileDone)
		hc.run(ctx, start)
	}()
	normal.attack(ctx, start)
	<-hostileDone
	close(smpStop)
	<-smpDone
	rep.HostileEnded = hc.ended.Sub(start)
	rep.HostileWindDown = hc.windDown
	rep.End = settle(cfg, srv)
	rep.Shutdown = srv.shutdownWhileQueued(hc.get, shutdownQueued)
	closeClients(srv, normal, hc, &rep.End)
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout+2*time.Second)
	drain, cerr := srv.close(closeCtx)
	cancel()
	rep.End.DrainInFlight = drain.InFlight
	rep.GoroutinesAfter = waitGoroutines(rep.Before.Goroutines+cfg.Thresholds.LeftoverGoroutines, 5*time.Second)
	rep.After = measureResources()
	rep.fill(srv, normal, hc, smp)
	if cerr != nil {
		return rep, fmt.Errorf("soak: closing the hostile server: %w", cerr)
	}
	return rep, ctx.Err()
}

// Resources is one measurement of the process: goroutines, and the heap
// in use after a collection.
type Resources struct {
	Goroutines int
	HeapInuse  uint64
}

func measureResources() Resources {
	// Two collections: the first may leave objects that finalizers or
	// sync.Pool victim caches keep one more cycle.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Resources{Goroutines: runtime.NumGoroutine(), HeapInuse: ms.HeapInuse}
}

// settle waits (up to RequestTimeout + 1s) for the service to have nothing
// in flight once every client returned, and reads the state then.
func settle(cfg HostileConfig, srv *hostileServer) HostileEnd {
	began := time.Now()
	deadline := began.Add(cfg.RequestTimeout + time.Second)
	busy := func() bool {
		return srv.lim.InFlight() != 0 || srv.inflight.Load() != 0 || srv.up.inflight.Load() != 0 || srv.hijackedOpen.Load() != 0
	}
	for busy() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	snap := srv.lim.Snapshot()
	return HostileEnd{
		SettleTime:       time.Since(began),
		LimiterInFlight:  snap.InFlight,
		Queued:           snap.Queued,
		HandlerInFlight:  int(srv.inflight.Load()),
		UpstreamInFlight: int(srv.up.inflight.Load()),
		HijackedOpen:     int(srv.hijackedOpen.Load()),
	}
}

// closeClients closes the idle connections of every client, the
// service's own client of the upstream included, and waits (up to 2s)
// for both ends of every connection to be closed.
func closeClients(srv *hostileServer, normal *normalTraffic, hc *hostileClients, e *HostileEnd) {
	normal.tr.CloseIdleConnections()
	hc.closeIdle()
	srv.base.CloseIdleConnections()
	open := func() [numConnKinds]int64 {
		return [numConnKinds]int64{
			srv.conns.open.Load(), normal.conns.open.Load() + hc.conns.open.Load(),
			srv.up.conns.open.Load(), srv.upClient.open.Load(),
		}
	}
	for i := 0; i < 200 && open() != [numConnKinds]int64{}; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	e.ConnsOpen = open()
}

// normalTraffic is the well-behaved load: vegeta at cfg.Rate over
// normalMix, each request with its own id, which a 200 must echo.
type normalTraffic struct {
	cfg   HostileConfig
	atk   *vegeta.Attacker
	tr    *http.Transport
	conns connCounter
	url   string
	seq   atomic.Uint64
	stats normalStats
}

func newNormalTraffic(cfg HostileConfig, url string) *normalTraffic {
	n := &normalTraffic{cfg: cfg, url: url}
	n.tr = &http.Transport{
		DialContext:         n.conns.dial,
		MaxIdleConnsPerHost: cfg.Workers,
		IdleConnTimeout:     2 * time.Second,
		DisableCompression:  true,
	}
	client := &http.Client{
		Transport:     n.tr,
		Timeout:       cfg.HangBound,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	n.atk = vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.KeepAlive(true),
		vegeta.Workers(uint64(cfg.Workers)),
		vegeta.MaxWorkers(uint64(cfg.Workers)),
		vegeta.MaxBody(256),
	)
	return n
}

var uploadBody = []byte(fmt.Sprintf("%0256d", 0))

// target is vegeta's Targeter: the next request of the mix, numbered.
func (n *normalTraffic) target(t *vegeta.Target) error {
	i := n.seq.Add(1) - 1
	m := normalMix[i%uint64(len(normalMix))]
	t.Method = m.method
	t.URL = fmt.Sprintf("%s%s?id=n%d", n.url, m.path, i)
	t.Header = http.Header{tenantHeader: {m.tenant}}
	t.Body = nil
	if m.method == http.MethodPost {
		t.Body = uploadBody
	}
	return nil
}

// attack sends the normal traffic for cfg.Duration (less if ctx ends)
// and collects the results.
func (n *normalTraffic) attack(ctx context.Context, start time.Time) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			n.atk.Stop()
		case <-done:
		}
	}()
	res := n.atk.Attack(n.target, vegeta.ConstantPacer{Freq: n.cfg.Rate, Per: time.Second}, n.cfg.Duration, "hostile-normal")
	for r := range res {
		n.stats.add(n.cfg, start, r)
	}
}
