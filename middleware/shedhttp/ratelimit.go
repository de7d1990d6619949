package shedhttp

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/shed"
)

// RateLimit is a token bucket: each request of a key takes one token; the
// bucket holds at most Burst tokens and refills at Rate tokens per second.
// A new key starts with a full bucket.
type RateLimit struct {
	// Rate is the sustained rate, in requests per second (rate.Every(d)
	// gives one per d). It must be > 0; rate.Inf means no limit.
	Rate rate.Limit
	// Burst is how many requests a key may send at once; at least 1.
	Burst int
}

// Validate reports whether l is usable.
func (l RateLimit) Validate() error {
	switch {
	case math.IsNaN(float64(l.Rate)) || l.Rate <= 0:
		return fmt.Errorf("rate must be > 0 (rate.Inf for no limit), got %v", float64(l.Rate))
	case l.Burst < 1:
		return fmt.Errorf("burst must be >= 1, got %d", l.Burst)
	}
	return nil
}

// KeyStore keeps the rate-limit state of every key. The middleware calls
// AllowAt once per request of a class that has a rate limit, from many
// goroutines at once. An implementation may be in memory (MemoryStore) or
// shared by the replicas of a service; it must bound the state it keeps.
type KeyStore interface {
	// AllowAt takes one token from the bucket of (class, key) at time now,
	// the bucket being described by limit. It reports whether the request
	// may proceed and, when it may not, how long until it would (the
	// Retry-After hint).
	AllowAt(now time.Time, class shed.Class, key string, limit RateLimit) (ok bool, retryAfter time.Duration)
}

// RequestKeyStore is a KeyStore that also sees the request and charges a
// cost. The middleware calls AllowRequest instead of AllowAt when its
// KeyStore implements it, so that a store shared by replicas can bound
// its call by the request's context and report on the request's span
// (whether its decision fell back, for one), and so that a rate limit can
// count the request's cost (Options.RateLimitCost) rather than requests:
// tokens per second for LLM work.
type RequestKeyStore interface {
	KeyStore
	// AllowRequest takes n tokens (n >= 1) from the bucket of (class,
	// key) for r at time now, as AllowAt takes one.
	AllowRequest(r *http.Request, now time.Time, class shed.Class, key string, limit RateLimit, n int) (ok bool, retryAfter time.Duration)
}

// DefaultIPv6KeyPrefix is the prefix length, in bits, by which the
// middleware's default rate-limit key groups IPv6 client addresses: 64,
// the smallest network an ISP assigns one subscriber (RFC 6177), who can
// pick any address in it. IPv4 clients are keyed by their address.
const DefaultIPv6KeyPrefix = 64

// ErrInvalidConfig is wrapped by the configuration errors of this package
// and of the middleware constructors.
var ErrInvalidConfig = errors.New("shedkit middleware: invalid config")
