package retrybudget

import (
	"errors"
	"fmt"
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
// A breaker counts an attempt as a failure when it ends in a transport
// error or a 5xx status, as a success otherwise. It does not count attempts
// the caller cancelled, attempts that timed out (AttemptTimeout, or a 504),
// and responses that carry [NoRetryHeader]: those say the host is slow or
// deliberately shedding, not down. Slowness is for an adaptive concurrency
// limit to handle; an open circuit would turn a slowdown into an outage. An open breaker fails attempts fast, before
// anything is sent; after OpenTimeout it lets HalfOpenRequests probes
// through and closes once they all succeed.
type BreakerConfig struct {
	// Disabled turns the breakers off.
	Disabled bool
	// ConsecutiveFailures trips a closed breaker. Default 5.
	ConsecutiveFailures uint32
	// ReadyToTrip, when set, replaces the ConsecutiveFailures rule. It
	// is called with the breaker's counts after each failure.
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
	// replaces a breaker in its fresh state if any, else the least
	// recently used one. Default [DefaultMaxKeys].
	MaxHosts int
}

var (
	errAttemptFailed   = errors.New("attempt failed")
	errAttemptExcluded = errors.New("attempt not counted")
)

type breaker = gobreaker.TwoStepCircuitBreaker[struct{}]

type breakers struct {
	k        keyed[*breaker]
	settings gobreaker.Settings
}

func newBreakers(cfg BreakerConfig, onChange func(from, to gobreaker.State)) (*breakers, error) {
	if cfg.Disabled {
		return nil, nil
	}
	if cfg.OpenTimeout < 0 {
		return nil, fmt.Errorf("retrybudget: BreakerConfig.OpenTimeout must not be negative, got %v", cfg.OpenTimeout)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("retrybudget: BreakerConfig.Interval must not be negative, got %v", cfg.Interval)
	}
	if cfg.MaxHosts < 0 || cfg.MaxHosts > 1<<20 {
		return nil, fmt.Errorf("retrybudget: BreakerConfig.MaxHosts must be in [0, %d], got %d", 1<<20, cfg.MaxHosts)
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
	}, breakerFresh, time.Now)
	return br
}

// breakerFresh reports whether a breaker is as good as a new one.
func breakerFresh(br *breaker, _ time.Time) bool {
	return br.State() == gobreaker.StateClosed && br.Counts().ConsecutiveFailures == 0
}
