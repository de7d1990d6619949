package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of Config; see the package documentation for why.
const (
	DefaultDuration       = 60 * time.Second
	DefaultCapacity       = 20
	DefaultServiceTime    = 50 * time.Millisecond
	DefaultOverload       = 10
	DefaultSlowdownFactor = 10
	DefaultWorkers        = 256
	DefaultSampleEvery    = time.Second
)

// ErrInvalidConfig is wrapped by the configuration errors of Run and
// RunClient.
var ErrInvalidConfig = errors.New("soak: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// Config configures the server soak. Zero fields take the defaults.
type Config struct {
	// Duration of the attack. Default DefaultDuration; at least 6s.
	Duration time.Duration
	// Capacity is the upstream's number of workers and ServiceTime the
	// healthy time one request holds a worker: the upstream serves at most
	// Capacity/ServiceTime requests per second. Defaults DefaultCapacity,
	// DefaultServiceTime (400 requests per second).
	Capacity    int
	ServiceTime time.Duration
	// Overload is the offered rate as a multiple of the upstream's healthy
	// capacity. Default DefaultOverload. Rate, when set, overrides it.
	Overload float64
	Rate     int
	// SlowdownFactor multiplies the service time between SlowdownStart
	// and SlowdownEnd (offsets from the start of the attack). Defaults
	// DefaultSlowdownFactor, Duration/3 and 2*Duration/3, in whole seconds.
	SlowdownFactor             float64
	SlowdownStart, SlowdownEnd time.Duration
	// RequestTimeout is the server-side deadline of every request. Default
	// 6 slow service times, at least 1s.
	RequestTimeout time.Duration
	// ClientTimeout is the load generator's timeout; it must exceed
	// RequestTimeout so that the client never gives up on an answer the
	// server is bound to send. Default RequestTimeout + 5s.
	ClientTimeout time.Duration
	// StaticLimit, when > 0, replaces the adaptive limit by a static one.
	// A limit far above the upstream's capacity is a service without load
	// shedding: the run then fails its checks, which shows they can fail.
	StaticLimit int
	// Workers is the load generator's fixed number of workers (requests
	// outstanding at most). Default DefaultWorkers.
	Workers int
	// Warmup is the start of the run that resource checks ignore: the
	// limit, the connection pool and the heap settle. Default Duration/6,
	// at least 2s.
	Warmup time.Duration
	// SampleEvery is the resource sampling period. Default 1s.
	SampleEvery time.Duration
	// Thresholds of the checks; zero fields take their defaults.
	Thresholds Thresholds
	// Logf, when set, receives one progress line per second.
	Logf func(format string, args ...any)
}

// Thresholds are the pass marks of Report.Check. See the package
// documentation for why each default is what it is.
type Thresholds struct {
	// PeakFactor and the slacks bound the peak after warm-up:
	// peak <= PeakFactor x warm-up level + slack. Default 2.
	PeakFactor float64
	// TrendFactor bounds the trend: mean of the last quarter of the
	// samples after warm-up <= TrendFactor x mean of the first quarter +
	// slack. Default 1.5.
	TrendFactor float64
	// GoroutineSlack (default 64 + 4 x Workers: each worker may hold a
	// connection, which costs two client and one server goroutine) and
	// HeapSlack (default 16 MiB) are the absolute slacks of both bounds.
	GoroutineSlack int
	HeapSlack      uint64
	// LeftoverGoroutines is how many goroutines more than before the run
	// may remain once everything is closed. Default 4.
	LeftoverGoroutines int
	// MinOfferedShare is the least achieved offered rate, as a share of
	// the configured rate. Default 0.9.
	MinOfferedShare float64
	// MinGoodput is the least useful utilization of the upstream before
	// the slowdown: the share of its worker time spent on calls that
	// succeeded. Default 0.7.
	MinGoodput float64
	// MinShedRate is the least share of responses that are 429 or 503
	// (at 10x overload about 90% must be). Default 1 - 3/Overload.
	MinShedRate float64
	// P99Factor bounds the admitted (2xx) p99 latency before the
	// slowdown to P99Factor x the healthy service time (default 6), and
	// SlowP99Factor the p99 during the slowdown to SlowP99Factor x the
	// slow service time (default 3). The service time of a phase is the
	// configured one, or the effective one (measured) when the process
	// was starved of CPU and it is longer. Without load shedding both
	// reach RequestTimeout.
	P99Factor, SlowP99Factor float64
	// MaxRecovery bounds the time from the end of the slowdown until the
	// 2xx throughput of a second is back to RecoveryShare of its level
	// before the slowdown. Defaults 5s and 0.9.
	MaxRecovery   time.Duration
	RecoveryShare float64
}

// withDefaults fills the zero fields of c with their defaults and checks
// every field, in the order of Config.
func (c Config) withDefaults() (Config, error) {
	c, err := c.offeredLoadDefaults()
	if err != nil {
		return c, err
	}
	if c, err = c.slowdownDefaults(); err != nil {
		return c, err
	}
	if c, err = c.harnessDefaults(); err != nil {
		return c, err
	}
	c.Thresholds = c.Thresholds.withDefaults(c.Workers, c.Overload)
	return c, nil
}

// offeredLoadDefaults settles the run's length, the upstream's capacity
// and the offered rate, from which Overload is then derived.
func (c Config) offeredLoadDefaults() (Config, error) {
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Duration < 6*time.Second {
		return c, configError("Duration", "must be at least 6s, got %v", c.Duration)
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Capacity < 1 || c.Capacity > 10000 {
		return c, configError("Capacity", "must be in [1, 10000], got %d", c.Capacity)
	}
	if c.ServiceTime == 0 {
		c.ServiceTime = DefaultServiceTime
	}
	if c.ServiceTime < time.Millisecond {
		return c, configError("ServiceTime", "must be at least 1ms, got %v", c.ServiceTime)
	}
	if c.Overload == 0 {
		c.Overload = DefaultOverload
	}
	if !(c.Overload >= 1 && c.Overload <= 1000) {
		return c, configError("Overload", "must be in [1, 1000], got %v", c.Overload)
	}
	if c.Rate == 0 {
		c.Rate = int(c.Overload * c.capacityRPS())
	}
	if c.Rate < 1 {
		return c, configError("Rate", "must be > 0, got %d", c.Rate)
	}
	c.Overload = float64(c.Rate) / c.capacityRPS()
	return c, nil
}

// slowdownDefaults settles the slowdown (factor and window) and the two
// timeouts, which follow from the slow service time.
func (c Config) slowdownDefaults() (Config, error) {
	if c.SlowdownFactor == 0 {
		c.SlowdownFactor = DefaultSlowdownFactor
	}
	if !(c.SlowdownFactor >= 1 && c.SlowdownFactor <= 100) {
		return c, configError("SlowdownFactor", "must be in [1, 100], got %v", c.SlowdownFactor)
	}
	if c.SlowdownStart == 0 && c.SlowdownEnd == 0 {
		c.SlowdownStart = (c.Duration / 3).Truncate(time.Second)
		c.SlowdownEnd = (2 * c.Duration / 3).Truncate(time.Second)
	}
	if c.SlowdownStart < 2*time.Second || c.SlowdownEnd <= c.SlowdownStart || c.SlowdownEnd > c.Duration-2*time.Second {
		return c, configError("SlowdownStart", "need 2s <= SlowdownStart < SlowdownEnd <= Duration-2s, got %v, %v", c.SlowdownStart, c.SlowdownEnd)
	}
	slow := time.Duration(float64(c.ServiceTime) * c.SlowdownFactor)
	if c.RequestTimeout == 0 {
		c.RequestTimeout = max(time.Second, 6*slow)
	}
	if c.RequestTimeout < c.ServiceTime {
		return c, configError("RequestTimeout", "must be at least ServiceTime, got %v", c.RequestTimeout)
	}
	if c.ClientTimeout == 0 {
		c.ClientTimeout = c.RequestTimeout + 5*time.Second
	}
	if c.ClientTimeout <= c.RequestTimeout {
		return c, configError("ClientTimeout", "must exceed RequestTimeout (%v), got %v", c.RequestTimeout, c.ClientTimeout)
	}
	return c, nil
}

// harnessDefaults settles how the run is driven and measured: the static
// limit, the load generator's workers, the warm-up and the sampling period.
func (c Config) harnessDefaults() (Config, error) {
	if c.StaticLimit < 0 || c.StaticLimit > shed.MaxLimit {
		return c, configError("StaticLimit", "must be in [0, %d], got %d", shed.MaxLimit, c.StaticLimit)
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Workers < 1 || c.Workers > 100000 {
		return c, configError("Workers", "must be in [1, 100000], got %d", c.Workers)
	}
	if c.Warmup == 0 {
		c.Warmup = max(2*time.Second, c.Duration/6)
	}
	if c.Warmup < 0 || c.Warmup > c.Duration/2 {
		return c, configError("Warmup", "must be in [0, Duration/2], got %v", c.Warmup)
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = DefaultSampleEvery
	}
	if c.SampleEvery < 10*time.Millisecond {
		return c, configError("SampleEvery", "must be at least 10ms, got %v", c.SampleEvery)
	}
	return c, nil
}

// withDefaults fills the zero thresholds; two follow from the settled
// Config: the goroutine slack from workers, the shed rate from overload.
func (t Thresholds) withDefaults(workers int, overload float64) Thresholds {
	if t.PeakFactor == 0 {
		t.PeakFactor = 2
	}
	if t.TrendFactor == 0 {
		t.TrendFactor = 1.5
	}
	if t.GoroutineSlack == 0 {
		t.GoroutineSlack = 64 + 4*workers
	}
	if t.HeapSlack == 0 {
		t.HeapSlack = 16 << 20
	}
	if t.LeftoverGoroutines == 0 {
		t.LeftoverGoroutines = 4
	}
	if t.MinOfferedShare == 0 {
		t.MinOfferedShare = 0.9
	}
	if t.MinGoodput == 0 {
		t.MinGoodput = 0.7
	}
	if t.MinShedRate == 0 {
		t.MinShedRate = max(0, 1-3/overload)
	}
	if t.P99Factor == 0 {
		t.P99Factor = 6
	}
	if t.SlowP99Factor == 0 {
		t.SlowP99Factor = 3
	}
	if t.MaxRecovery == 0 {
		t.MaxRecovery = 5 * time.Second
	}
	if t.RecoveryShare == 0 {
		t.RecoveryShare = 0.9
	}
	return t
}

func (c Config) capacityRPS() float64 { return float64(c.Capacity) / c.ServiceTime.Seconds() }

// Run starts the server on 127.0.0.1, attacks it for cfg.Duration at
// cfg.Rate, samples goroutines, heap and the limiter every
// cfg.SampleEvery, then drains and closes everything. The error is about
// the run itself (configuration, listener, shutdown); whether the system
// behaved is Report.Check's business.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	rep := Report{Config: cfg, GoroutinesBefore: runtime.NumGoroutine()}
	start := time.Now()
	secs := int((cfg.Duration+cfg.ClientTimeout)/time.Second) + 2
	srv, err := startServer(cfg, start, secs)
	if err != nil {
		return rep, err
	}
	atk, tr := newSoakAttacker(cfg)
	targets := soakTargets(srv.url)

	col := newCollector(cfg, start, secs)
	smp := newSampler(cfg, start, srv)
	stopSampler := runSampler(smp, col)

	attackOver := stopAttackOnCancel(ctx, atk)
	res := atk.Attack(vegeta.NewStaticTargeter(targets...), vegeta.ConstantPacer{Freq: cfg.Rate, Per: time.Second}, cfg.Duration, "soak")
	for r := range res {
		col.add(r)
	}
	attackOver()
	rep.AttackEnd = time.Since(start)

	settleServer(cfg, srv, &rep)
	stopSampler()
	cerr := closeServer(cfg, srv, tr, &rep)
	rep.GoroutinesAfter = waitGoroutines(rep.GoroutinesBefore+cfg.Thresholds.LeftoverGoroutines, 5*time.Second)

	col.finish(&rep, srv.up)
	smp.finish(&rep)
	if cerr != nil {
		return rep, fmt.Errorf("soak: closing the server: %w", cerr)
	}
	return rep, ctx.Err()
}

// newSoakAttacker builds the load generator of the server soak and returns
// it with its transport, whose idle connections Run closes at the end.
func newSoakAttacker(cfg Config) (*vegeta.Attacker, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: cfg.Workers,
		// Idle connections beyond the current concurrency close soon, so
		// that connections (and their goroutines) track the load.
		IdleConnTimeout:    2 * time.Second,
		DisableCompression: true,
	}
	client := &http.Client{
		Transport:     tr,
		Timeout:       cfg.ClientTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.KeepAlive(true),
		vegeta.Workers(uint64(cfg.Workers)),
		vegeta.MaxWorkers(uint64(cfg.Workers)),
		vegeta.MaxBody(0),
	)
	return atk, tr
}

// soakTargets turns targetMix into vegeta targets on the server at url.
func soakTargets(url string) []vegeta.Target {
	targets := make([]vegeta.Target, len(targetMix))
	for i, m := range targetMix {
		targets[i] = vegeta.Target{Method: http.MethodGet, URL: url + m.path, Header: http.Header{tenantHeader: {m.tenant}}}
	}
	return targets
}

// runSampler runs smp in the background until stop is called; stop waits
// for the sampler to return, so that no sample races the report.
func runSampler(smp *sampler, col *collector) (stop func()) {
	smpDone := make(chan struct{})
	smpStop := make(chan struct{})
	go func() {
		defer close(smpDone)
		smp.run(smpStop, col)
	}()
	return func() {
		close(smpStop)
		<-smpDone
	}
}

// stopAttackOnCancel stops atk early if ctx ends (its results channel then
// closes); call attackOver once the results are read, to end the watch.
func stopAttackOnCancel(ctx context.Context, atk *vegeta.Attacker) (attackOver func()) {
	attackDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			atk.Stop()
		case <-attackDone:
		}
	}()
	return func() { close(attackDone) }
}

// settleServer waits, once every response has arrived, for the server side
// to settle, and records its end state and the limiter's figures by class.
func settleServer(cfg Config, srv *server, rep *Report) {
	// The permits of answered requests are released before the response
	// is flushed, so this is normally immediate.
	settle := time.Now()
	deadline := settle.Add(cfg.RequestTimeout + time.Second)
	for (srv.lim.InFlight() != 0 || srv.inflight.Load() != 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rep.SettleTime = time.Since(settle)
	snap := srv.lim.Snapshot()
	rep.End = EndState{
		LimiterInFlight: snap.InFlight,
		Queued:          snap.Queued,
		HandlerInFlight: int(srv.inflight.Load()),
		UpstreamBusy:    len(srv.up.workers),
	}
	for _, c := range snap.Classes {
		rep.Classes = append(rep.Classes, ClassFigures{
			Name:      c.Name,
			Admitted:  c.Admitted,
			AfterWait: c.AdmittedAfterWait,
			Rejected:  rejectedByName(c.Rejected),
			Dropped:   c.Released[shed.Dropped],
			Leaked:    c.Leaked,
		})
	}
}

// closeServer closes the client's idle connections, then drains and shuts
// the server down, recording the connections left open and the drain.
func closeServer(cfg Config, srv *server, tr *http.Transport, rep *Report) error {
	// Close the client's idle connections before the server: the server
	// must then see every connection closed (none held by a response body
	// left unread, none stuck in a handler). Closing happens
	// asynchronously on the server side.
	tr.CloseIdleConnections()
	for i := 0; i < 200 && srv.conns.Load() != 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	rep.End.ServerConnsOpen = srv.conns.Load()
	rep.ServerConnsAccepted = srv.newConns.Load()
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout+2*time.Second)
	drain, cerr := srv.close(closeCtx)
	cancel()
	rep.End.DrainInFlight = drain.InFlight
	return cerr
}

// waitGoroutines waits up to d for the goroutine count to fall to at most
// target and returns the last count.
func waitGoroutines(target int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := runtime.NumGoroutine()
		if n <= target || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rejectedByName(r [shed.NumReasons]uint64) map[string]uint64 {
	m := map[string]uint64{}
	for i, n := range r {
		if n > 0 {
			m[shed.Reason(i).String()] = n
		}
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
