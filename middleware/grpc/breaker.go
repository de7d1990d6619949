package grpc

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/shedkit/shedkit/retrybudget"
)

// Breaker outcomes, under retrybudget's contract (see
// retrybudget.BreakerConfig): failed when the target could not serve the
// call, nil when it answered, excluded when the call says neither.
var (
	errAttemptFailed   = errors.New("attempt failed")
	errAttemptExcluded = errors.New("attempt not counted")
)

type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

// breakerOutcome says what a finished attempt tells its target's breaker.
// The rules are the HTTP transport's, with gRPC's codes:
//
//   - Unavailable without a pushback trailer fails: it is what gRPC
//     reports when it cannot reach the target (connection refused or
//     reset, no healthy backend), and what proxies answer when nothing
//     stands behind them;
//   - Unavailable with a pushback is excluded: the target is up and
//     shedding on purpose;
//   - DeadlineExceeded and Canceled, or a caller that gave up, are
//     excluded: slowness is for the limits and the budget, and an open
//     circuit would turn a slowdown into an outage;
//   - any other code, the application's errors included (Internal,
//     NotFound...), is a success: the target answered. Counting them would
//     let whoever can make one method fail cut the target off for all.
func breakerOutcome(code codes.Code, pb pushbackKind, callerDone bool) error {
	switch {
	case callerDone, code == codes.DeadlineExceeded, code == codes.Canceled:
		return errAttemptExcluded
	case code == codes.Unavailable && pb != pushbackNone:
		return errAttemptExcluded
	case code == codes.Unavailable:
		return errAttemptFailed
	}
	return nil
}

// target is what the Client keeps per call target (ClientConn.Target):
// its breaker (nil when breakers are disabled) and the span attributes
// naming it.
type target struct {
	br    *breaker
	attrs []attribute.KeyValue
}

// targets is a bounded map of targets. A process talks to few targets (one
// per ClientConn), so a full map evicts simply: a breaker in its fresh
// state (closed, no failure counted: nothing is lost), else any one.
type targets struct {
	m        sync.Map // string -> *target
	mu       sync.Mutex
	n        int
	max      int
	settings *gobreaker.Settings // nil: breakers disabled
}

// newTargets validates cfg as retrybudget.NewTransport does and returns the
// target map; onChange hears every breaker transition.
func newTargets(cfg retrybudget.BreakerConfig, onChange func(to gobreaker.State)) (*targets, error) {
	if cfg.OpenTimeout < 0 {
		return nil, configError("Breaker.OpenTimeout", "must not be negative, got %v", cfg.OpenTimeout)
	}
	if cfg.Interval < 0 {
		return nil, configError("Breaker.Interval", "must not be negative, got %v", cfg.Interval)
	}
	if cfg.MaxHosts < 0 || cfg.MaxHosts > 1<<20 {
		return nil, configError("Breaker.MaxHosts", "must be in [0, %d], got %d", 1<<20, cfg.MaxHosts)
	}
	t := &targets{max: cfg.MaxHosts}
	if t.max == 0 {
		t.max = retrybudget.DefaultMaxKeys
	}
	if cfg.Disabled {
		return t, nil
	}
	n := orDefault(cfg.ConsecutiveFailures, retrybudget.DefaultBreakerFailures)
	trip := cfg.ReadyToTrip
	if trip == nil {
		trip = func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n }
	}
	t.settings = &gobreaker.Settings{
		MaxRequests:   orDefault(cfg.HalfOpenRequests, 1),
		Interval:      cfg.Interval,
		Timeout:       orDefault(cfg.OpenTimeout, retrybudget.DefaultBreakerOpenTimeout),
		ReadyToTrip:   trip,
		IsExcluded:    func(err error) bool { return err == errAttemptExcluded },
		OnStateChange: func(_ string, _, to gobreaker.State) { onChange(to) },
	}
	return t, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// get returns the target named name, adding it if needed. It takes no
// lock when the target is known.
func (t *targets) get(name string) *target {
	if v, ok := t.m.Load(name); ok {
		return v.(*target)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m.Load(name); ok {
		return v.(*target)
	}
	if t.n >= t.max {
		t.evictLocked()
	}
	tg := &target{attrs: targetAttrs(name)}
	if t.settings != nil {
		s := *t.settings
		s.Name = name
		tg.br = gobreaker.NewTwoStepCircuitBreaker[struct{}](s)
	}
	t.m.Store(name, tg)
	t.n++
	return tg
}

// evictLocked removes a fresh target if there is one, else any one.
func (t *targets) evictLocked() {
	var victim any
	t.m.Range(func(k, v any) bool {
		victim = k
		br := v.(*target).br
		return br != nil && !(br.State() == gobreaker.StateClosed && br.Counts().ConsecutiveFailures == 0)
	})
	if victim != nil {
		t.m.Delete(victim)
		t.n--
	}
}

// state returns the breaker state of target name, false when unknown.
func (t *targets) state(name string) (gobreaker.State, bool) {
	v, ok := t.m.Load(name)
	if !ok || v.(*target).br == nil {
		return gobreaker.StateClosed, false
	}
	return v.(*target).br.State(), true
}

// targetAttrs returns server.address and server.port of a gRPC target
// ("host:port", "dns:///host:port", "passthrough:///host:port"...).
func targetAttrs(name string) []attribute.KeyValue {
	ep := name
	if i := strings.Index(ep, "://"); i >= 0 {
		scheme := ep[:i]
		ep = ep[i+3:]
		if j := strings.IndexByte(ep, '/'); j >= 0 {
			ep = ep[j+1:] // skip the authority
			if strings.HasPrefix(scheme, "unix") {
				ep = "/" + ep // a socket's path keeps its root
			}
		}
	} else if i := strings.IndexByte(ep, ':'); i >= 0 && !strings.Contains(ep[i+1:], ":") {
		if _, err := strconv.Atoi(ep[i+1:]); err != nil {
			ep = ep[i+1:] // "scheme:endpoint"
		}
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return []attribute.KeyValue{attrServerAddr.String(ep)}
	}
	kvs := []attribute.KeyValue{attrServerAddr.String(host)}
	if p, err := strconv.Atoi(port); err == nil {
		kvs = append(kvs, attrServerPort.Int(p))
	}
	return kvs
}

func sleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
