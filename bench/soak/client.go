package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/shedkit/shedkit/retrybudget"
)

// Defaults of ClientConfig.
const (
	DefaultClientDuration = 20 * time.Second
	DefaultClientRate     = 200
	DefaultClientWorkers  = 64
	DefaultMaxAttempts    = 3
)

// maxAttemptSlots bounds the attempt-number histogram; later attempts
// share the last slot.
const maxAttemptSlots = 16

// ClientConfig configures the client soak. Zero fields take the defaults.
type ClientConfig struct {
	// Duration of the attack. Default DefaultClientDuration; at least 3s.
	Duration time.Duration
	// Rate of logical requests per second. Default DefaultClientRate.
	Rate int
	// OutageStart and OutageEnd (offsets from the start) delimit the
	// window in which the upstream answers every attempt with 503.
	// Defaults Duration/10 and 7*Duration/10.
	OutageStart, OutageEnd time.Duration
	// OutageReset makes the upstream reset the connection (TCP RST)
	// instead of answering 503 during the outage: every attempt then
	// fails without a response and costs a connection.
	OutageReset bool
	// Budget configures the shared retry budget (zero: Finagle's
	// defaults, see retrybudget.BudgetConfig).
	Budget retrybudget.BudgetConfig
	// NoBudget retries without a budget (bounded by MaxAttempts only): a
	// run that must fail the amplification check, to show it can.
	NoBudget bool
	// MaxAttempts per logical request. Default DefaultMaxAttempts.
	MaxAttempts int
	// Breaker turns the per-host circuit breaker on. Off by default: an
	// open breaker sends nothing, which would hide what the budget does.
	Breaker bool
	// Workers is the load generator's fixed number of workers. Default
	// DefaultClientWorkers.
	Workers int
	// Timeout bounds each logical request. Default 5s.
	Timeout time.Duration
	// Thresholds of the checks.
	Thresholds ClientThresholds
}

// ClientThresholds are the pass marks of ClientReport.Check.
type ClientThresholds struct {
	// RetrySlack is added to the budget's bound on retries: callers whose
	// clocks straddle a bucket boundary may each overshoot the balance by
	// one retry. Default Workers.
	RetrySlack int
	// ExtraConns is how many connections more than Workers the server may
	// accept (keep-alive works: no connection per attempt). Default 2.
	ExtraConns int
	// LeftoverGoroutines is how many goroutines more than before the run
	// may remain once everything is closed. Default 4.
	LeftoverGoroutines int
	// MinRecovered is the least share of the logical requests sent after
	// the outage that succeed. Default 0.99.
	MinRecovered float64
}

func (c ClientConfig) withDefaults() (ClientConfig, error) {
	if c.Duration == 0 {
		c.Duration = DefaultClientDuration
	}
	if c.Duration < 3*time.Second {
		return c, configError("Duration", "must be at least 3s, got %v", c.Duration)
	}
	if c.Rate == 0 {
		c.Rate = DefaultClientRate
	}
	if c.Rate < 1 || c.Rate > 100000 {
		return c, configError("Rate", "must be in [1, 100000], got %d", c.Rate)
	}
	if c.OutageStart == 0 && c.OutageEnd == 0 {
		c.OutageStart = c.Duration / 10
		c.OutageEnd = 7 * c.Duration / 10
	}
	if c.OutageStart < 0 || c.OutageEnd <= c.OutageStart || c.OutageEnd > c.Duration-time.Second {
		return c, configError("OutageStart", "need 0 <= OutageStart < OutageEnd <= Duration-1s, got %v, %v", c.OutageStart, c.OutageEnd)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptSlots-1 {
		return c, configError("MaxAttempts", "must be in [1, %d], got %d", maxAttemptSlots-1, c.MaxAttempts)
	}
	if c.Workers == 0 {
		c.Workers = DefaultClientWorkers
	}
	if c.Workers < 1 || c.Workers > 10000 {
		return c, configError("Workers", "must be in [1, 10000], got %d", c.Workers)
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Timeout < 100*time.Millisecond {
		return c, configError("Timeout", "must be at least 100ms, got %v", c.Timeout)
	}
	// The budget's own defaults, made explicit for the bound.
	if c.Budget.TTL == 0 {
		c.Budget.TTL = retrybudget.DefaultBudgetTTL
	}
	if c.Budget.Buckets == 0 {
		c.Budget.Buckets = retrybudget.DefaultBudgetBuckets
	}
	if c.Budget.RetryRatio == 0 {
		c.Budget.RetryRatio = retrybudget.DefaultRetryRatio
	}
	if c.Budget.MinRetriesPerSecond == 0 {
		c.Budget.MinRetriesPerSecond = retrybudget.DefaultMinRetriesPerSecond
	}
	if c.Budget.Name == "" {
		c.Budget.Name = "soak"
	}
	t := &c.Thresholds
	if t.RetrySlack == 0 {
		t.RetrySlack = c.Workers
	}
	if t.ExtraConns == 0 {
		t.ExtraConns = 2
	}
	if t.LeftoverGoroutines == 0 {
		t.LeftoverGoroutines = 4
	}
	if t.MinRecovered == 0 {
		t.MinRecovered = 0.99
	}
	return c, nil
}

// ClientReport is what a client soak measured.
type ClientReport struct {
	Config ClientConfig

	// Logical requests (as the load generator saw them) by outcome, and
	// the achieved rate.
	Logical, LogicalOK, Logical503, LogicalOther, LogicalErrors uint64
	OfferedRate                                                 float64
	ErrorSamples                                                []string
	// Attempts the upstream received, by attempt number (index 1 is
	// first attempts; the last slot collects anything later).
	Attempts         uint64
	AttemptsByNumber [maxAttemptSlots]uint64
	// Amplification is attempts per logical request; MaxAmplification the
	// bound the budget allows (see the package documentation).
	Amplification, MaxAmplification float64
	// OutageLogical and OutageAttempts are the first attempts and all
	// attempts that reached the upstream during the outage.
	OutageLogical, OutageAttempts uint64
	// AfterSent and AfterOK count the logical requests sent once the
	// outage was over, and those that succeeded.
	AfterSent, AfterOK uint64
	// ErrorsOutside counts the logical requests without a response that
	// were sent neither during the outage nor within a request timeout
	// before it: with OutageReset, the only ones allowed are those.
	ErrorsOutside uint64
	// BudgetDenials is how many retries the budget refused.
	BudgetDenials uint64

	// Connections the upstream accepted, the most open at once, and
	// those still open after the client closed its idle connections.
	ConnsAccepted, ConnsPeak, ConnsOpenAfter int64
	GoroutinesBefore, GoroutinesAfter        int
}

// RunClient runs the client soak: an upstream on 127.0.0.1 that answers
// 503 to every attempt during the outage, and cfg.Rate logical requests
// per second sent by vegeta through a retrybudget.Transport with one
// shared Budget.
func RunClient(ctx context.Context, cfg ClientConfig) (ClientReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return ClientReport{}, err
	}
	rep := ClientReport{Config: cfg, GoroutinesBefore: runtime.NumGoroutine()}
	up, err := startClientUpstream(cfg)
	if err != nil {
		return rep, err
	}
	client, base, budget, err := newRetryingClient(cfg)
	if err != nil {
		up.abort()
		return rep, err
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(cfg.Workers)),
		vegeta.MaxWorkers(uint64(cfg.Workers)),
		vegeta.MaxBody(0),
	)
	attackOver := stopAttackOnCancel(ctx, atk)
	var m vegeta.Metrics
	seen := map[string]struct{}{}
	res := atk.Attack(vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: up.url}),
		vegeta.ConstantPacer{Freq: cfg.Rate, Per: time.Second}, cfg.Duration, "client-soak")
	for r := range res {
		m.Add(r)
		rep.tally(r, up.start, seen)
	}
	attackOver()
	m.Close()
	rep.Logical = m.Requests
	rep.OfferedRate = m.Rate
	attackTime := time.Since(up.start)

	// Close the client's idle connections first: the server must then see
	// every connection closed (none held by an unread body).
	base.CloseIdleConnections()
	cerr := up.shutdown(&rep)

	up.countAttempts(&rep)
	rep.BudgetDenials = budget.Snapshot().Denials
	if rep.Logical > 0 {
		rep.Amplification = float64(rep.Attempts) / float64(rep.Logical)
		rep.MaxAmplification = 1 + float64(cfg.maxRetries(rep.Logical, attackTime))/float64(rep.Logical)
	}
	rep.GoroutinesAfter = waitGoroutines(rep.GoroutinesBefore+cfg.Thresholds.LeftoverGoroutines, 5*time.Second)
	if cerr != nil {
		return rep, fmt.Errorf("soak: closing the upstream: %w", cerr)
	}
	return rep, ctx.Err()
}

// clientUpstream is the client soak's upstream: it fails every attempt
// during the outage, and counts attempts by number and connections.
type clientUpstream struct {
	cfg   ClientConfig
	start time.Time // the outage is timed from it
	url   string

	byNumber        [maxAttemptSlots]atomic.Uint64
	outageFirst     atomic.Uint64
	outageAll       atomic.Uint64
	conns, newConns atomic.Int64
	peak            atomic.Int64

	srv    *http.Server
	served chan error
}

// startClientUpstream starts the upstream on 127.0.0.1; the outage's
// offsets count from now.
func startClientUpstream(cfg ClientConfig) (*clientUpstream, error) {
	u := &clientUpstream{cfg: cfg, start: time.Now()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u.srv = &http.Server{
		Handler:           http.HandlerFunc(u.serve),
		ReadHeaderTimeout: 5 * time.Second,
		ConnState:         u.track,
	}
	u.served = make(chan error, 1)
	go func() { u.served <- u.srv.Serve(ln) }()
	u.url = "http://" + ln.Addr().String() + "/v1/thing"
	return u, nil
}

// serve counts the attempt by number and answers ok, or, during the
// outage, 503 or a connection reset.
func (u *clientUpstream) serve(w http.ResponseWriter, r *http.Request) {
	n := retrybudget.RequestAttempt(r)
	u.byNumber[min(max(n, 0), maxAttemptSlots-1)].Add(1)
	if t := time.Since(u.start); t >= u.cfg.OutageStart && t < u.cfg.OutageEnd {
		u.outageAll.Add(1)
		if n == 1 {
			u.outageFirst.Add(1)
		}
		if u.cfg.OutageReset {
			resetConn(w)
			return
		}
		// A plain 503: retryable (no no-retry header, no Retry-After).
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// track counts the connections accepted, open, and the most open at once.
func (u *clientUpstream) track(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		u.newConns.Add(1)
		n := u.conns.Add(1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
	case http.StateClosed, http.StateHijacked:
		u.conns.Add(-1)
	}
}

// abort closes the upstream at once, for a run that fails to start.
func (u *clientUpstream) abort() {
	_ = u.srv.Close()
	<-u.served
}

// shutdown waits (up to 2s) for every connection to be closed, records
// the connections in rep, and shuts the upstream down.
func (u *clientUpstream) shutdown(rep *ClientReport) error {
	for i := 0; i < 200 && u.conns.Load() != 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	rep.ConnsOpenAfter = u.conns.Load()
	rep.ConnsAccepted = u.newConns.Load()
	rep.ConnsPeak = u.peak.Load()
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	cerr := u.srv.Shutdown(shutCtx)
	cancel()
	if serr := <-u.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		cerr = errors.Join(cerr, serr)
	}
	return cerr
}

// countAttempts records in rep the attempts the upstream received, by
// number and during the outage.
func (u *clientUpstream) countAttempts(rep *ClientReport) {
	for i := range u.byNumber {
		rep.AttemptsByNumber[i] = u.byNumber[i].Load()
		rep.Attempts += rep.AttemptsByNumber[i]
	}
	rep.OutageLogical, rep.OutageAttempts = u.outageFirst.Load(), u.outageAll.Load()
}

// newRetryingClient builds the client under test: a retrybudget.Transport
// (with the shared budget, unless NoBudget) over base, whose idle
// connections RunClient closes at the end.
func newRetryingClient(cfg ClientConfig) (client *http.Client, base *http.Transport, budget *retrybudget.Budget, err error) {
	budget, err = retrybudget.NewBudget(cfg.Budget)
	if err != nil {
		return nil, nil, nil, err
	}
	base = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: cfg.Workers,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	tcfg := retrybudget.TransportConfig{
		Base:        base,
		Name:        "soak",
		MaxAttempts: cfg.MaxAttempts,
		Budget:      budget,
		Breaker:     retrybudget.BreakerConfig{Disabled: !cfg.Breaker},
	}
	if cfg.NoBudget {
		tcfg.Budget, tcfg.NoBudget = nil, true
	}
	rt, err := retrybudget.NewTransport(tcfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return &http.Client{Transport: rt, Timeout: cfg.Timeout}, base, budget, nil
}

// tally counts one logical request by outcome, and among those sent after
// the outage; it keeps one sample per kind of error (seen holds the kinds).
func (r *ClientReport) tally(res *vegeta.Result, start time.Time, seen map[string]struct{}) {
	cfg := r.Config
	after := res.Timestamp.Sub(start) >= cfg.OutageEnd
	if after {
		r.AfterSent++
	}
	switch {
	case res.Code == 0:
		r.LogicalErrors++
		if sent := res.Timestamp.Sub(start); sent < cfg.OutageStart-cfg.Timeout || sent >= cfg.OutageEnd {
			r.ErrorsOutside++
		}
		// One sample per kind of error: ports differ, kinds rarely.
		if e := portRE.ReplaceAllString(res.Error, ":PORT"); len(r.ErrorSamples) < 8 {
			if _, ok := seen[e]; !ok {
				seen[e] = struct{}{}
				r.ErrorSamples = append(r.ErrorSamples, e)
			}
		}
	case res.Code == http.StatusOK:
		r.LogicalOK++
		if after {
			r.AfterOK++
		}
	case res.Code == http.StatusServiceUnavailable:
		r.Logical503++
	default:
		r.LogicalOther++
	}
}

// maxRetries is the most retries the budget allows for n logical requests
// sent at a constant rate over a run of length d. Split the run into
// chunks of L = TTL - TTL/Buckets (the shortest time an event counts):
// the retries of one chunk all count in the window of its last retry,
// which holds at most the deposits of one TTL, so a chunk allows at most
// RetryRatio x rate x TTL + MinRetriesPerSecond x TTL retries. Summed:
// RetryRatio x n x TTL/L + floor x TTL x ceil(d/L), plus the slack.
func (c ClientConfig) maxRetries(n uint64, d time.Duration) int64 {
	ttl := c.Budget.TTL
	l := ttl - ttl/time.Duration(c.Budget.Buckets)
	ratio := max(c.Budget.RetryRatio, 0)
	floor := max(c.Budget.MinRetriesPerSecond, 0)
	chunks := math.Ceil(float64(d) / float64(l))
	r := ratio*float64(n)*float64(ttl)/float64(l) + floor*ttl.Seconds()*chunks
	return int64(r) + int64(c.Thresholds.RetrySlack)
}

// Checks evaluates every check of the report.
func (r ClientReport) Checks() []CheckResult {
	c := r.Config
	t := c.Thresholds
	var out []CheckResult
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, CheckResult{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	add("amplification", r.Logical > 0 && r.Amplification <= r.MaxAmplification,
		"%.3f attempts per logical request (%d / %d), budget bound %.3f", r.Amplification, r.Attempts, r.Logical, r.MaxAmplification)
	var beyond uint64
	for n := c.MaxAttempts + 1; n < maxAttemptSlots; n++ {
		beyond += r.AttemptsByNumber[n]
	}
	add("max-attempts", beyond == 0 && r.AttemptsByNumber[0] == 0,
		"%d attempts beyond MaxAttempts %d, %d without an attempt number", beyond, c.MaxAttempts, r.AttemptsByNumber[0])
	// With resets, the requests of the outage end without a response (the
	// last attempt's error); nothing else may.
	errorsOK := r.LogicalErrors == 0
	if c.OutageReset {
		errorsOK = r.ErrorsOutside == 0
	}
	add("outcomes", errorsOK && r.LogicalOther == 0,
		"%d 200, %d 503, %d other, %d without response (%d outside the outage) %v",
		r.LogicalOK, r.Logical503, r.LogicalOther, r.LogicalErrors, r.ErrorsOutside, r.ErrorSamples)
	add("recovered", r.AfterSent > 0 && float64(r.AfterOK) >= t.MinRecovered*float64(r.AfterSent),
		"%d of %d logical requests sent after the outage succeeded (need >= %.0f%%)", r.AfterOK, r.AfterSent, 100*t.MinRecovered)
	// Each reset costs a connection; everything else reuses them.
	var resets int64
	if c.OutageReset {
		resets = int64(r.OutageAttempts)
	}
	add("connections-reused", r.ConnsAccepted <= int64(c.Workers+t.ExtraConns)+resets,
		"%d connections for %d attempts (need <= %d workers + %d + %d resets)", r.ConnsAccepted, r.Attempts, c.Workers, t.ExtraConns, resets)
	add("no-leaks-at-end", r.ConnsOpenAfter == 0 && r.GoroutinesAfter <= r.GoroutinesBefore+t.LeftoverGoroutines,
		"server connections open after closing idle ones %d, goroutines %d before, %d after (tolerance %d)",
		r.ConnsOpenAfter, r.GoroutinesBefore, r.GoroutinesAfter, t.LeftoverGoroutines)
	return out
}

// Check returns nil when every check passes, else an error (wrapping
// ErrCheck) that lists every failed check.
func (r ClientReport) Check() error { return checkError(r.Checks()) }

// WriteTo writes the report and its checks.
func (r ClientReport) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	c := r.Config
	budget := fmt.Sprintf("budget ratio %g, floor %g/s, TTL %v", c.Budget.RetryRatio, c.Budget.MinRetriesPerSecond, c.Budget.TTL)
	if c.NoBudget {
		budget = "no budget"
	}
	outageKind := "503"
	if c.OutageReset {
		outageKind = "connection resets"
	}
	fmt.Fprintf(&b, "client soak: %v at %d logical req/s, upstream %s from %v to %v; MaxAttempts %d, %s, breaker %v\n",
		c.Duration, c.Rate, outageKind, c.OutageStart, c.OutageEnd, c.MaxAttempts, budget, c.Breaker)
	fmt.Fprintf(&b, "  logical %d (achieved %.0f/s): 200 %d, 503 %d, other %d, no response %d\n",
		r.Logical, r.OfferedRate, r.LogicalOK, r.Logical503, r.LogicalOther, r.LogicalErrors)
	fmt.Fprintf(&b, "  attempts %d by number:", r.Attempts)
	for n := 1; n < maxAttemptSlots; n++ {
		if r.AttemptsByNumber[n] > 0 {
			fmt.Fprintf(&b, " #%d=%d", n, r.AttemptsByNumber[n])
		}
	}
	fmt.Fprintf(&b, "; budget denials %d\n", r.BudgetDenials)
	outage := 0.0
	if r.OutageLogical > 0 {
		outage = float64(r.OutageAttempts) / float64(r.OutageLogical)
	}
	fmt.Fprintf(&b, "  amplification %.3f overall (bound %.3f), %.3f during the outage (%d attempts / %d logical)\n",
		r.Amplification, r.MaxAmplification, outage, r.OutageAttempts, r.OutageLogical)
	fmt.Fprintf(&b, "  after the outage %d of %d succeeded; connections accepted %d (peak open %d, open after close %d); goroutines %d before, %d after\n",
		r.AfterOK, r.AfterSent, r.ConnsAccepted, r.ConnsPeak, r.ConnsOpenAfter, r.GoroutinesBefore, r.GoroutinesAfter)
	writeChecks(&b, r.Checks())
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// resetConn aborts the request's connection with a TCP RST (SO_LINGER 0)
// and no response.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // cannot hijack: abort the response
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// portRE matches the port of an address in an error message.
var portRE = regexp.MustCompile(`:\d+\b`)
