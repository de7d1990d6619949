package shedredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrConcurrencyLimit is wrapped by the error Acquire returns when the key
// already has its limit of leases in flight across the fleet.
var ErrConcurrencyLimit = errors.New("shedredis: concurrency limit reached")

// ErrClosed is returned by Acquire after Close: with the renewer stopped,
// a lease would stop counting in Redis while its work still ran.
var ErrClosed = errors.New("shedredis: concurrency closed")

// LimitError is the error of an Acquire refused at the limit.
type LimitError struct {
	// InFlight is the key's leases counted when it was refused: across
	// the fleet, or on this replica when the decision fell back.
	InFlight int
	// RetryAfter is a hint for the client: leases are released when
	// their work ends, so it is short (a second).
	RetryAfter time.Duration
	// FellBack reports that the decision was taken on this replica's
	// share because Redis could not be used.
	FellBack bool
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("shedredis: concurrency limit reached (%d in flight)", e.InFlight)
}

// Unwrap makes errors.Is(err, ErrConcurrencyLimit) true.
func (e *LimitError) Unwrap() error { return ErrConcurrencyLimit }

// The scripts keep one sorted set per key: each member a lease, scored by
// its expiry in milliseconds of Redis's clock (TIME), so that the
// replicas' clocks do not matter. The set itself expires one TTL after its
// last write, so an idle key leaves nothing behind.
var (
	// KEYS[1] the set; ARGV: limit, ttl ms, member. Returns {admitted
	// 0/1, in flight}.
	acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[1]) then
  return {0, n}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, n + 1}
`)
	// KEYS[1] the set; ARGV[1] the member.
	releaseScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
	// KEYS[1] the set; ARGV: ttl ms, members. Sets (or sets again, after
	// Redis lost them) the expiry of the members. Returns how many were
	// missing.
	renewScript = redis.NewScript(`
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('ZADD', KEYS[1], exp, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return added
`)
)

// Concurrency bounds the requests in flight per key (tenant) across the
// replicas of a service, with leases in Redis.
//
// A lease is a member of the key's sorted set in Redis, scored by its
// expiry (now + LeaseTTL, Redis's clock). Acquire drops the expired
// members, counts the rest and adds the lease when the count is under the
// limit, in one Lua script. While the lease is held, the Concurrency
// renews it every LeaseTTL/3 (one script per key for all of this
// replica's leases of that key); Release removes it. A replica that dies
// stops renewing, and its leases stop counting within LeaseTTL.
//
// Redis calls follow the Store's rules: a time budget, a breaker, and a
// fallback to a local share (limit/Replicas, rounded up) counted on this
// replica alone. A lease taken in fallback is registered in Redis at the
// next renewal that succeeds, so the fleet's count is whole again within
// LeaseTTL/3 of Redis coming back, also after Redis lost its data.
//
// A Concurrency runs one goroutine, the renewer; Close stops it.
type Concurrency struct {
	cfg     Config
	g       *guard
	leases  *leaseMetrics
	id      string
	seq     atomic.Uint64
	renewTO time.Duration

	mu      sync.Mutex
	active  map[*Lease]struct{}
	local   map[string]int // leases taken in fallback, per key
	orphans []orphan       // members to remove at the next renewal
	closed  bool

	stop chan struct{}
	done chan struct{}
}

// Lease is a slot of a key's concurrency limit, held until Release.
type Lease struct {
	c      *Concurrency
	rkey   string
	member string
	key    string
	local  bool
	// abandoned: granted on the local share after the acquire script
	// timed out, which may still run in Redis after this lease's release.
	abandoned bool
	released  atomic.Bool
	// renewalInDoubt: the last renewal that wrote this lease failed, and
	// may still run in Redis after the lease's release, writing it back.
	renewalInDoubt atomic.Bool
}

// orphan is a member that may be in Redis without a lease behind it: its
// acquire timed out (the script may have run, or still run) and was then
// refused on the local share or granted there and released, or its
// release failed. The renewer removes it.
type orphan struct{ rkey, member string }

// maxOrphans bounds the orphans kept while Redis is unreachable; past it,
// the rest expire on their own within LeaseTTL.
const maxOrphans = 4096

func (c *Concurrency) addOrphan(rkey, member string) {
	if len(c.orphans) < maxOrphans {
		c.orphans = append(c.orphans, orphan{rkey, member})
	}
}

// NewConcurrency returns a Concurrency and starts its renewer, or returns
// an error wrapping ErrInvalidConfig that names the invalid field.
func NewConcurrency(cfg Config) (*Concurrency, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g, err := newGuard(&cfg)
	if err != nil {
		return nil, err
	}
	leases, err := newLeaseMetrics(&cfg)
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	c := &Concurrency{
		cfg:     cfg,
		g:       g,
		leases:  leases,
		id:      hex.EncodeToString(b[:]),
		renewTO: max(cfg.Timeout, cfg.LeaseTTL/10), // renewals are off the request path
		active:  map[*Lease]struct{}{},
		local:   map[string]int{},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.renewer()
	return c, nil
}

// Acquire takes a lease of key, whose limit is limit leases in flight
// across the fleet. It returns a *LimitError (wrapping
// ErrConcurrencyLimit) when the key is at its limit, ctx's error when
// ctx ended during the call, and ErrClosed after Close. It never fails
// because of Redis: on timeout or error the decision falls back to this
// replica's share. ctx bounds the Redis call besides Timeout.
//
// When Acquire returns an error after its call to Redis was abandoned
// (Timeout passed, or ctx ended, with the script on its way), Redis may
// still add the lease: the next renewal removes it, within LeaseTTL/3.
//
// Each decision is counted in MetricLeaseDecisions.
func (c *Concurrency) Acquire(ctx context.Context, key string, limit int) (*Lease, error) {
	l, err := c.acquire(ctx, key, limit)
	c.leases.record(ctx, l, err)
	return l, err
}

// acquire is Acquire without its metric: counting what it returns, in
// one place, counts every one of its many returns once.
func (c *Concurrency) acquire(ctx context.Context, key string, limit int) (*Lease, error) {
	if limit < 1 {
		return nil, fmt.Errorf("shedredis: limit must be >= 1, got %d", limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	l := &Lease{c: c, key: key, rkey: c.key(key), member: c.id + ":" + strconv.FormatUint(c.seq.Add(1), 36)}
	ttl := c.cfg.LeaseTTL.Milliseconds()
	var admitted, inFlight int64
	cause := c.g.do(ctx, OpAcquire, func(ctx context.Context) error {
		v, err := acquireScript.Run(ctx, c.cfg.Client, []string{l.rkey}, limit, ttl, l.member).Int64Slice()
		if err != nil {
			return err
		}
		if len(v) != 2 {
			return fmt.Errorf("shedredis: acquire script returned %d values", len(v))
		}
		admitted, inFlight = v[0], v[1]
		return nil
	})
	if cause == causeCanceled {
		// The script may have run (or may still run) in Redis: the
		// next renewal removes the member, as for a timeout.
		c.mu.Lock()
		c.addOrphan(l.rkey, l.member)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
	c.mu.Lock()
	if c.closed {
		// Closed during the call: nothing would renew the lease.
		c.mu.Unlock()
		if cause == "" && admitted != 0 {
			c.g.do(context.Background(), OpRelease, func(ctx context.Context) error {
				return releaseScript.Run(ctx, c.cfg.Client, []string{l.rkey}, l.member).Err()
			})
		}
		return nil, ErrClosed
	}
	defer c.mu.Unlock()
	if cause == "" {
		if admitted == 0 {
			return nil, &LimitError{InFlight: int(inFlight), RetryAfter: time.Second}
		}
		c.active[l] = struct{}{}
		return l, nil
	}
	share := (limit-1)/c.cfg.Replicas + 1 // rounded up, at least 1, without overflow
	if n := c.local[key]; n >= share {
		if cause == CauseTimeout {
			c.addOrphan(l.rkey, l.member)
		}
		return nil, &LimitError{InFlight: n, RetryAfter: time.Second, FellBack: true}
	}
	c.local[key]++
	l.local, l.abandoned = true, cause == CauseTimeout
	c.active[l] = struct{}{}
	return l, nil
}

// FellBack reports whether the lease was granted on this replica's share
// because Redis could not be used.
func (l *Lease) FellBack() bool { return l.local }

// Release ends the lease. It is safe to call more than once; only the
// first call does anything. When Redis cannot be reached within the
// budget, the lease still stops counting on this replica and expires in
// Redis within LeaseTTL.
func (l *Lease) Release() {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return
	}
	c := l.c
	c.mu.Lock()
	delete(c.active, l)
	if l.local {
		if c.local[l.key]--; c.local[l.key] <= 0 {
			delete(c.local, l.key)
		}
	}
	c.mu.Unlock()
	cause := c.g.do(context.Background(), OpRelease, func(ctx context.Context) error {
		return releaseScript.Run(ctx, c.cfg.Client, []string{l.rkey}, l.member).Err()
	})
	if cause != "" || l.abandoned || l.renewalInDoubt.Load() {
		// The release failed, or a timed-out acquire or renewal may
		// reach Redis after this removal: the next renewal removes it
		// again.
		c.mu.Lock()
		c.addOrphan(l.rkey, l.member)
		c.mu.Unlock()
	}
}

// Close stops renewing leases. Leases not yet released stop counting
// within LeaseTTL; Release may still be called on them. Call it after
// the server has drained.
func (c *Concurrency) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.active = map[*Lease]struct{}{}
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	return nil
}

// InFlightLocal returns the leases this replica holds (in Redis or in
// fallback).
func (c *Concurrency) InFlightLocal() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.active)
}

func (c *Concurrency) key(key string) string {
	return c.cfg.Prefix + "c:" + hashKey(key)
}

func (c *Concurrency) renewer() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.renew()
		}
	}
}

// renewCall runs, within the renewal's budget, one pipeline that removes
// the orphans and runs the renewal script for each key of byKey (its
// arguments: the TTL, then the members), and returns the failure's cause,
// "" for none.
func (c *Concurrency) renewCall(byKey map[string][]any, orphans []orphan) string {
	return c.g.doWithin(context.Background(), OpRenew, c.renewTO, func(ctx context.Context) error {
		// EVALSHA in a pipeline cannot load a missing script; load it
		// first (a no-op when Redis has it).
		if len(byKey) > 0 {
			if err := renewScript.Load(ctx, c.cfg.Client).Err(); err != nil {
				return err
			}
		}
		_, err := c.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, o := range orphans {
				p.ZRem(ctx, o.rkey, o.member)
			}
			for rkey, args := range byKey {
				renewScript.EvalSha(ctx, p, []string{rkey}, args...)
			}
			return nil
		})
		return err
	})
}

// renew sets the expiry of every lease held again, one script per key,
// and removes the orphans, in one pipeline.
func (c *Concurrency) renew() {
	c.mu.Lock()
	if len(c.active) == 0 && len(c.orphans) == 0 {
		c.mu.Unlock()
		return
	}
	byKey := map[string][]any{}
	ttl := c.cfg.LeaseTTL.Milliseconds()
	renewed := make([]*Lease, 0, len(c.active))
	for l := range c.active {
		args := byKey[l.rkey]
		if args == nil {
			args = []any{ttl}
		}
		byKey[l.rkey] = append(args, l.member)
		renewed = append(renewed, l)
	}
	orphans := c.orphans
	c.orphans = nil
	c.mu.Unlock()
	cause := c.renewCall(byKey, orphans)
	// A renewal that failed may still run in Redis, after the release of
	// a lease it writes back: a lease released from now on is removed
	// again by the next renewal (see Release). Marked before the released
	// flags are read below, so that a release either sees the mark or is
	// seen.
	for _, l := range renewed {
		l.renewalInDoubt.Store(cause != "")
	}
	// A lease released after the snapshot above may have been removed
	// before this renewal wrote it back: remove it again, or it counts
	// for a whole LeaseTTL with no lease behind it. Its released flag is
	// set before its own removal is sent, so none is missed.
	var back []orphan
	for _, l := range renewed {
		if l.released.Load() {
			back = append(back, orphan{l.rkey, l.member})
		}
	}
	if cause == "" && len(back) > 0 {
		cause = c.g.doWithin(context.Background(), opCleanup, c.renewTO, func(ctx context.Context) error {
			_, err := c.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, o := range back {
					p.ZRem(ctx, o.rkey, o.member)
				}
				return nil
			})
			return err
		})
		orphans = nil // removed by the renewal that succeeded
	}
	if cause != "" {
		c.mu.Lock()
		for _, o := range orphans {
			c.addOrphan(o.rkey, o.member)
		}
		for _, o := range back {
			c.addOrphan(o.rkey, o.member)
		}
		c.mu.Unlock()
	}
}
