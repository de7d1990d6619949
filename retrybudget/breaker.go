package retrybudget

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker defaults.
const (
	DefaultBreakerFailures    = 5
	DefaultBreakerOpenTimeout = 5 * time.Second
)

// BreakerConfig configures the per-host circuit breakers of a
// [Transport] (sony/gobreaker TwoStepCircuitBreaker). Zero fields mean the
// defaults.
//
// A breaker answers one question: can the host serve anyone at all? It
// counts logical requests, not attempts: a request counts once, with the
// outcome of its last attempt, so that retries neither multiply a failure
// nor hide a request they rescued. A request fails when its last attempt
// shows that the host cannot serve:
//
//   - a transport error that says the host or the connection failed:
//     a dial, read or write error, connection refused or reset,
//     connection closed before the response, TLS failure;
//   - a 502 or a 503 without an overload signal ([NoRetryHeader] or
//     Retry-After): what proxies and load balancers answer when nothing
//     healthy stands behind them.
//
// Any other response is a success: the host answered. A 500 (or any other
// status) speaks of the request, not of the host: counting it would let
// whoever can make one URL fail (a bug, or crafted input through a
// gateway) cut the host off for every other caller, and a plain 5xx says
// nothing about capacity. Not counted at all: requests the caller
// cancelled, timeouts (AttemptTimeout, the base transport's, a 504), 502
// or 503 with an overload signal, and transport errors that speak of the
// request only or of nothing known (its body failed to read, net/http
// refused a header value or the scheme): whoever can send a bad request
// must not cut the host off either. Those say that the host is slow or
// deliberately shedding, not that it is down; slowness and overload are
// for an adaptive concurrency limit and the retry budget to handle, and
// an open circuit would turn a slowdown into an outage.
//
// An open breaker fails requests fast, before anything is sent, and
// stops the retries of requests in flight. After OpenTimeout it lets
// HalfOpenRequests requests through as probes (with their retries) and
// closes once they all succeed.
type BreakerConfig struct {
	// Disabled turns the breakers off.
	Disabled bool
	// ConsecutiveFailures is the number of failed requests in a row
	// that trips a closed breaker. Default 5.
	ConsecutiveFailures uint32
	// ReadyToTrip, when set, replaces the ConsecutiveFailures rule. It
	// is called with the breaker's counts (of logical requests) after
	// each failure.
	ReadyToTrip func(gobreaker.Counts) bool
	// OpenTimeout is how long a breaker stays open. Default 5s.
	OpenTimeout time.Duration
	// HalfOpenRequests is the number of probes let through when
	// half-open. Default 1.
	HalfOpenRequests uint32
	// Interval clears the counts of a closed breaker periodically; 0
	// never does (consecutive failures are reset by any success anyway).
	Interval time.Duration
	// MaxHosts bounds the number of breakers. When full, a new host
	// replaces a breaker in its fresh state (closed, no failure counted:
	// nothing is lost), else one not used lately: a clock hand sweeps
	// the breakers, passing over each one used since it last passed (an
	// approximation of least recently used). Adding a host costs O(1)
	// amortized, whatever MaxHosts. Default [DefaultMaxKeys].
	MaxHosts int
}

var (
	errAttemptFailed   = errors.New("attempt failed")
	errAttemptExcluded = errors.New("attempt not counted")
)

type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

// breakerOutcome says what an attempt tells its host's breaker, under the
// contract of [BreakerConfig]: errAttemptFailed when the host could not
// serve it, nil when the host answered, errAttemptExcluded when the
// attempt says neither (the caller gave up, the host is slow, or it is
// up and shedding on purpose).
func breakerOutcome(resp *http.Response, err error, callerDone bool) error {
	if err != nil {
		if callerDone || classifyError(err) != errHost {
			return errAttemptExcluded
		}
		return errAttemptFailed
	}
	if resp == nil { // a base that breaks the RoundTripper contract
		return errAttemptExcluded
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		if hasValue(resp.Header, NoRetryHeader) || hasValue(resp.Header, "Retry-After") {
			return errAttemptExcluded
		}
		return errAttemptFailed
	case http.StatusGatewayTimeout:
		return errAttemptExcluded
	}
	return nil
}

type breakers struct {
	k        keyed[*breaker]
	settings gobreaker.Settings
	now      func() time.Time // for the table's eviction of idle hosts
}

func newBreakers(cfg BreakerConfig, onChange func(from, to gobreaker.State)) (*breakers, error) {
	if cfg.Disabled {
		return nil, nil
	}
	if cfg.OpenTimeout < 0 {
		return nil, fmt.Errorf("%w: BreakerConfig.OpenTimeout must not be negative, got %v", ErrInvalidConfig, cfg.OpenTimeout)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: BreakerConfig.Interval must not be negative, got %v", ErrInvalidConfig, cfg.Interval)
	}
	if cfg.MaxHosts < 0 || cfg.MaxHosts > 1<<20 {
		return nil, fmt.Errorf("%w: BreakerConfig.MaxHosts must be in [0, %d], got %d", ErrInvalidConfig, 1<<20, cfg.MaxHosts)
	}
	if cfg.ConsecutiveFailures == 0 {
		cfg.ConsecutiveFailures = DefaultBreakerFailures
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = DefaultBreakerOpenTimeout
	}
	if cfg.HalfOpenRequests == 0 {
		cfg.HalfOpenRequests = 1
	}
	if cfg.MaxHosts == 0 {
		cfg.MaxHosts = DefaultMaxKeys
	}
	trip := cfg.ReadyToTrip
	if trip == nil {
		n := cfg.ConsecutiveFailures
		trip = func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n }
	}
	b := &breakers{settings: gobreaker.Settings{
		MaxRequests: cfg.HalfOpenRequests,
		Interval:    cfg.Interval,
		Timeout:     cfg.OpenTimeout,
		ReadyToTrip: trip,
		IsExcluded:  func(err error) bool { return err == errAttemptExcluded },
	}}
	if onChange != nil {
		b.settings.OnStateChange = func(_ string, from, to gobreaker.State) { onChange(from, to) }
	}
	b.now = time.Now
	b.k.max = cfg.MaxHosts
	b.k.lru = true
	return b, nil
}

// get returns the breaker of host, creating it if needed.
func (b *breakers) get(host string) *breaker {
	br, _ := b.k.getOrAdd(host, func() *breaker {
		s := b.settings
		s.Name = host
		return gobreaker.NewTwoStepCircuitBreaker[struct{}](s)
	}, breakerFresh, b.now)
	return br
}

// breakerFresh reports whether a breaker is as good as a new one.
func breakerFresh(br *breaker, _ time.Time) bool {
	return br.State() == gobreaker.StateClosed && br.Counts().ConsecutiveFailures == 0
}
