package shedredis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// CostStore is a shedhttp.KeyStore that can also charge a request more
// than one token: its cost (LLM tokens, bytes, rows). The middleware's
// KeyStore hook charges one token per request; call AllowNAt yourself
// (from a handler, or a wrapper such as Concurrency's middleware) to
// enforce a cost quota, for example tokens per minute per tenant:
//
//	limit := shedhttp.RateLimit{Rate: 100_000.0 / 60, Burst: 100_000}
//	ok, retryAfter := store.AllowNAt(now, class, tenant, limit, tokens)
type CostStore interface {
	shedhttp.KeyStore
	// AllowNAt takes n tokens (n >= 1) from the bucket of (class, key)
	// at time now, as AllowAt takes one. A cost larger than limit.Burst
	// is never allowed (retryAfter is then 0: waiting does not help).
	AllowNAt(now time.Time, class shed.Class, key string, limit shedhttp.RateLimit, n int) (ok bool, retryAfter time.Duration)
}

// Store is a shedhttp.KeyStore (and a CostStore) whose buckets live in
// Redis, so that the replicas of a service share each key's quota: GCRA
// (the generic cell rate algorithm, a token bucket kept as one timestamp
// per key) run by one Lua script per decision through
// github.com/go-redis/redis_rate, with Redis's clock, so that the
// replicas' clocks do not matter. As in shedhttp.MemoryStore, a bucket
// belongs to a class, a key and a limit: a token quota charged beside the
// middleware's request limit on the same class and key, or a limit
// changed by a deploy, counts apart.
//
// Each call has a time budget (Config.Timeout). On timeout, error, or
// while the breaker is open, the decision falls back to an in-memory
// shedhttp.MemoryStore holding this replica's share of the quota
// (Rate/Replicas, Burst/Replicas, at least 1): Redis failing is not an
// outage, and the fleet as a whole still enforces about the quota. The
// local share is charged for the requests Redis admits too, so that a
// fallback starts from this replica's recent use, not from a full burst.
// The fallback uses the now it is given; Redis uses its own clock.
//
// A Store starts no goroutines; Close is not needed. It is safe for
// concurrent use.
type Store struct {
	cfg      Config
	g        *guard
	lim      *redis_rate.Limiter
	local    *shedhttp.MemoryStore
	fellBack atomic.Bool
	decided  atomic.Uint64
	fallen   atomic.Uint64
}

// StoreStats counts a Store's decisions.
type StoreStats struct {
	// Decisions counts the decisions that needed Redis (not rate.Inf,
	// not a cost over the burst).
	Decisions uint64
	// FellBack counts those taken on the local share.
	FellBack uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() StoreStats {
	return StoreStats{Decisions: s.decided.Load(), FellBack: s.fallen.Load()}
}

var _ CostStore = (*Store)(nil)

// NewStore returns a Store, or an error wrapping ErrInvalidConfig that
// names the invalid field.
func NewStore(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := newGuard(&cfg)
	if err != nil {
		return nil, err
	}
	local, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: cfg.FallbackMaxKeys})
	if err != nil {
		return nil, configError("FallbackMaxKeys", "%v", err)
	}
	return &Store{cfg: cfg, g: g, lim: redis_rate.NewLimiter(cfg.Client), local: local}, nil
}

// Decision is the full answer of Store.Decide.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// RetryAfter is how long until it would, when not allowed; 0 when
	// it never would (a cost larger than the burst).
	RetryAfter time.Duration
	// Remaining is how many more tokens the key could take right now,
	// as Redis counts them; -1 when the decision fell back.
	Remaining int
	// FellBack reports that Redis could not be used and the decision
	// was taken on this replica's share of the quota.
	FellBack bool
	// Cause says why it fell back: CauseTimeout, CauseError or
	// CauseBreakerOpen; "" when it did not.
	Cause string
}

// AllowAt implements shedhttp.KeyStore: AllowNAt with n = 1.
func (s *Store) AllowAt(now time.Time, class shed.Class, key string, limit shedhttp.RateLimit) (bool, time.Duration) {
	d := s.Decide(context.Background(), now, class, key, limit, 1)
	return d.Allowed, d.RetryAfter
}

// AllowNAt implements CostStore.
func (s *Store) AllowNAt(now time.Time, class shed.Class, key string, limit shedhttp.RateLimit, n int) (bool, time.Duration) {
	d := s.Decide(context.Background(), now, class, key, limit, n)
	return d.Allowed, d.RetryAfter
}

// FellBack reports whether the store's latest decision fell back to the
// local share. With concurrent requests "latest" is any one of the most
// recent; Decide tells it per decision.
func (s *Store) FellBack() bool { return s.fellBack.Load() }

// Decide takes n tokens (n < 1 counts as 1) from the bucket of (class,
// key) and tells how the decision was taken. An invalid limit (see
// shedhttp.RateLimit.Validate) allows nothing. ctx bounds the Redis call in
// addition to the time budget, and carries the metrics' context.
func (s *Store) Decide(ctx context.Context, now time.Time, class shed.Class, key string, limit shedhttp.RateLimit, n int) Decision {
	n = max(n, 1)
	if limit.Rate == rate.Inf {
		return Decision{Allowed: true, Remaining: math.MaxInt}
	}
	if n > limit.Burst || limit.Validate() != nil {
		// It would never be allowed, or the limit is invalid (the
		// middleware validates its RateLimits): nothing to ask Redis.
		return Decision{Remaining: -1}
	}
	s.decided.Add(1)
	rkey := s.key(class, key, limit)
	rl := redisLimit(limit)
	var res *redis_rate.Result
	cause := s.g.do(ctx, OpAllow, func(ctx context.Context) error {
		var err error
		res, err = s.lim.AllowN(ctx, rkey, rl, n)
		return err
	})
	if cause == "" {
		s.fellBack.Store(false)
		d := Decision{Allowed: res.Allowed > 0, Remaining: res.Remaining}
		if !d.Allowed {
			d.RetryAfter = max(res.RetryAfter, time.Millisecond)
		} else {
			// Shadow the admission on the local share, so that a
			// fallback starts from this replica's recent use rather than
			// a full bucket: a replica that used its share admits no
			// extra burst when Redis goes away.
			s.localAllow(now, class, key, limit, n)
		}
		return d
	}
	if cause == causeCanceled {
		cause = CauseTimeout // the caller's deadline: decide locally all the same
	}
	s.fellBack.Store(true)
	s.fallen.Add(1)
	d := Decision{FellBack: true, Cause: cause, Remaining: -1}
	d.Allowed, d.RetryAfter = s.localAllow(now, class, key, limit, n)
	return d
}

// localAllow decides on this replica's share of limit.
func (s *Store) localAllow(now time.Time, class shed.Class, key string, limit shedhttp.RateLimit, n int) (bool, time.Duration) {
	share := s.share(limit)
	// The key is digested as in Redis: the local store digests long keys
	// into the same spelling a short key can forge.
	key = hashKey(key)
	// Every cost is charged to one bucket that holds the largest cost the
	// fleet's quota allows (n <= limit.Burst), refilled at the share's
	// rate, so that this replica keeps to its share of the rate whatever
	// mix of costs a key sends. The bucket used to grow to each cost, and
	// as the memory store keeps a bucket per limit, each cost larger than
	// the share's burst had a full bucket of its own (and a key sending
	// many costs filled the fallback's MaxKeys with them).
	whole := shedhttp.RateLimit{Rate: share.Rate, Burst: limit.Burst}
	if whole == share {
		return s.local.AllowNAt(now, class, key, share, n)
	}
	if n <= share.Burst {
		// Costs the share's bucket holds keep to its burst too.
		if ok, wait := s.local.AllowNAt(now, class, key, share, n); !ok {
			return false, wait
		}
	}
	return s.local.AllowNAt(now, class, key, whole, n)
}

// share is this replica's part of limit while Redis cannot be used.
func (s *Store) share(limit shedhttp.RateLimit) shedhttp.RateLimit {
	r := s.cfg.Replicas
	if r == 1 {
		return limit
	}
	return shedhttp.RateLimit{
		Rate:  limit.Rate / rate.Limit(r),
		Burst: (limit.Burst-1)/r + 1, // rounded up, at least 1 (Burst >= 1), without overflow
	}
}

// key is the Redis key of (class, key) under limit, without redis_rate's
// own "rate:" prefix. Keys longer than shedhttp.MaxKeyBytes, or that start
// with "sha256:", are stored as a digest.
//
// The limit is part of the key, as in shedhttp.MemoryStore, because GCRA
// keeps one timestamp (TAT) per key and reads it with the caller's limit:
// a token quota's cost pushed it seconds ahead and the same tenant's
// request limit then refused it for seconds; a raised limit refused what
// the old one had spent. Callers with the same limit still share a
// bucket. "ql:" rather than the former "q:" so that no tenant key on a
// replica of an older version ("q:<class>:<key>") can spell a new key.
// The class and the limit contain no ':', so the key after them is
// unambiguous.
func (s *Store) key(class shed.Class, key string, limit shedhttp.RateLimit) string {
	return s.cfg.Prefix + "ql:" + strconv.Itoa(int(class)) + ":" + limitTag(limit) + ":" + hashKey(key)
}

// limitTag spells limit as "<rate>/<burst>": the shortest decimal that
// reads back as the same float64, so that different limits never share a
// tag.
func limitTag(l shedhttp.RateLimit) string {
	return strconv.FormatFloat(float64(l.Rate), 'g', -1, 64) + "/" + strconv.Itoa(l.Burst)
}

const digestPrefix = "sha256:"

// hashKey returns key, or its digest when it is longer than
// shedhttp.MaxKeyBytes, so that a key cannot make Redis state large. A key
// that starts like a digest is digested too, so that no tenant can name
// itself after another's digest and share its bucket.
func hashKey(key string) string {
	if len(key) > shedhttp.MaxKeyBytes || strings.HasPrefix(key, digestPrefix) {
		sum := sha256.Sum256([]byte(key))
		return digestPrefix + hex.EncodeToString(sum[:16])
	}
	return key
}

// redisLimit expresses l for redis_rate, whose rate is a whole number of
// events per period: one event per emission interval 1/Rate. An interval
// longer than time.Duration holds (a rate under about 1e-9 per second)
// is the longest one: converted as it is, it would overflow to a negative
// period, with which redis_rate admits everything.
func redisLimit(l shedhttp.RateLimit) redis_rate.Limit {
	period := time.Duration(math.MaxInt64)
	if p := float64(time.Second) / float64(l.Rate); p < float64(math.MaxInt64) {
		period = time.Duration(p)
	}
	return redis_rate.Limit{Rate: 1, Burst: l.Burst, Period: period}
}
