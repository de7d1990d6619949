package retrybudget

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Throttle defaults, those of Google's SRE book ("Handling Overload").
const (
	DefaultThrottleK       = 2.0
	DefaultThrottleWindow  = 2 * time.Minute
	DefaultThrottleBuckets = 24
)

// ThrottleConfig configures a [Throttle]. Zero fields mean the defaults.
type ThrottleConfig struct {
	// K is the multiplier of accepts: the backend may reject up to
	// (K-1)/K of the requests before the client starts rejecting
	// locally. Lower is more aggressive. Default 2; at least 1.
	K float64
	// Window is the span of history. Default 2 minutes.
	Window time.Duration
	// Buckets is the number of time buckets of the window. Default 24
	// (5 s each by default); at most 1000, and Window/Buckets >= 1ms.
	Buckets int
	// Rand returns uniform values in [0, 1) for the wall-clock [Throttle.Allow].
	// Default math/rand/v2's Float64. The explicit-time AllowAt takes its
	// value as an argument instead.
	Rand func() float64
}

// Throttle is Google SRE client-side adaptive throttling. A client that
// sees its backend reject requests for overload starts rejecting a share
// of its own requests locally, before they cost the backend anything:
//
//	p = max(0, (requests - K x accepts) / (requests + 1))
//
// where requests counts every request the client wanted to send whose
// outcome is known (the locally rejected ones included) and accepts those
// the backend accepted, both over a sliding window. A request is counted
// when its outcome is known: at once when rejected locally ([Throttle.AllowAt]),
// else when the backend answers ([Throttle.AcceptAt] or [Throttle.RejectAt]).
// Requests in flight are not counted at all: counting them at admission,
// before their accept can be, would make them look like rejections, and a
// burst of concurrent requests to a healthy backend would throttle itself.
// It is usable alone or by a [Transport] ([TransportConfig.Throttle]).
// Methods are safe for concurrent use, take no lock and do not allocate.
type Throttle struct {
	k    float64
	w    *window // a: requests, b: accepts
	rand func() float64
}

// NewThrottle returns a throttle configured by cfg, or an error naming the
// first invalid field.
func NewThrottle(cfg ThrottleConfig) (*Throttle, error) {
	if math.IsNaN(cfg.K) || math.IsInf(cfg.K, 0) || cfg.K < 0 || (cfg.K > 0 && cfg.K < 1) {
		return nil, fmt.Errorf("%w: ThrottleConfig.K must be 0 (default) or a finite value >= 1, got %v", ErrInvalidConfig, cfg.K)
	}
	if cfg.K == 0 {
		cfg.K = DefaultThrottleK
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("%w: ThrottleConfig.Window must not be negative, got %v", ErrInvalidConfig, cfg.Window)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultThrottleWindow
	}
	if cfg.Buckets < 0 || cfg.Buckets > 1000 {
		return nil, fmt.Errorf("%w: ThrottleConfig.Buckets must be in [0, 1000], got %d", ErrInvalidConfig, cfg.Buckets)
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultThrottleBuckets
	}
	if cfg.Window/time.Duration(cfg.Buckets) < time.Millisecond {
		return nil, fmt.Errorf("%w: ThrottleConfig.Window/Buckets must be at least 1ms, got %v/%d", ErrInvalidConfig, cfg.Window, cfg.Buckets)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Throttle{k: cfg.K, w: newWindow(cfg.Window, cfg.Buckets), rand: cfg.Rand}, nil
}

// RejectProbabilityAt returns the probability with which a request at now
// is rejected locally.
func (t *Throttle) RejectProbabilityAt(now time.Time) float64 {
	req, acc := t.w.sums(now)
	return t.probability(req, acc)
}

func (t *Throttle) probability(req, acc uint64) float64 {
	p := (float64(req) - t.k*float64(acc)) / (float64(req) + 1)
	if p < 0 {
		return 0
	}
	return p
}

// AllowAt decides whether a request at now may go to the backend, given
// u, a uniform random value in [0, 1): it is rejected when u < p. A
// request rejected locally is counted at once. An allowed one is not
// counted yet: its caller reports the backend's answer with
// [Throttle.AcceptAt] or [Throttle.RejectAt], and a caller that reports
// neither (it gave up before the answer) leaves no trace.
func (t *Throttle) AllowAt(now time.Time, u float64) bool {
	req, acc := t.w.sums(now)
	if u < t.probability(req, acc) {
		t.w.addA(now)
		return false
	}
	return true
}

// AcceptAt records at now a request that the backend accepted: it
// answered without signalling overload. It counts both the request and
// its accept.
func (t *Throttle) AcceptAt(now time.Time) {
	// The accept first: a concurrent reader may see it without its
	// request, which errs towards letting requests through.
	t.w.addB(now)
	t.w.addA(now)
}

// RejectAt records at now a request that the backend rejected (it
// signalled overload) or failed to answer: it counts the request only.
func (t *Throttle) RejectAt(now time.Time) { t.w.addA(now) }

// Allow is AllowAt(time.Now(), u) with u from the configured Rand.
func (t *Throttle) Allow() bool { return t.AllowAt(time.Now(), t.rand()) }

// Accept is AcceptAt(time.Now()).
func (t *Throttle) Accept() { t.AcceptAt(time.Now()) }

// Reject is RejectAt(time.Now()).
func (t *Throttle) Reject() { t.RejectAt(time.Now()) }

// ThrottleSnapshot is the state of a [Throttle] at one instant.
type ThrottleSnapshot struct {
	Requests, Accepts uint64  // counts in the window, requests in flight excluded
	RejectProbability float64 // p for the next request
}

// SnapshotAt returns the throttle's state at now.
func (t *Throttle) SnapshotAt(now time.Time) ThrottleSnapshot {
	req, acc := t.w.sums(now)
	return ThrottleSnapshot{Requests: req, Accepts: acc, RejectProbability: t.probability(req, acc)}
}

// Snapshot is SnapshotAt(time.Now()).
func (t *Throttle) Snapshot() ThrottleSnapshot { return t.SnapshotAt(time.Now()) }
