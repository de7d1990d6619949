package shedhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/shed"
)

// Defaults of MemoryStoreConfig.
const (
	// DefaultMaxKeys bounds a MemoryStore to 65,536 buckets: about 22 MB
	// with keys of 100 bytes, 15 MB with keys of 16 (see
	// MemoryStoreConfig.MaxKeys), enough for the active tenants or client
	// addresses of a large service.
	DefaultMaxKeys = 1 << 16
	// MaxKeyBytes is the longest key stored as is; longer keys are stored
	// as their SHA-256 digest, so that a key cannot make a bucket large.
	MaxKeyBytes = 128
)

// digestPrefix starts the stored form of a key longer than MaxKeyBytes.
const digestPrefix = "sha256:"

// MemoryStoreConfig configures a MemoryStore.
type MemoryStoreConfig struct {
	// MaxKeys bounds the number of buckets (one per class and key). The
	// store is split into up to 32 shards of MaxKeys/shards buckets, each
	// evicting its least recently used bucket when full, so eviction may
	// start a little before MaxKeys is reached, never after. A bucket
	// costs about 220 bytes plus its key (at most MaxKeyBytes). Default
	// DefaultMaxKeys.
	MaxKeys int
}

// MemoryStore is a KeyStore in memory, bounded to MaxKeys buckets of
// golang.org/x/time/rate limiters.
//
// Buckets are kept in shards, each a map and a least-recently-used list
// under its own mutex: a request costs one hash, one map lookup and a
// constant number of pointer moves, and allocates nothing unless its key is
// new. When a shard is full, its least recently used bucket is evicted. An
// evicted key starts again with a full bucket, which loses nothing if the
// bucket had refilled (the key was idle); Stats counts the evictions that
// lost a partly used bucket, a sign that MaxKeys is too small for the
// number of active keys. A flood of distinct keys therefore cannot grow
// the store past MaxKeys; it only evicts.
//
// The store starts no goroutines and reads no clock: time comes from the
// caller. It may be shared by several middlewares (HTTP and gRPC, say):
// a key's requests in a class count in one bucket per limit, so that the
// sides that give the class the same RateLimit share its tokens, and a
// side with another limit keeps its own bucket (were they one, requests
// to a looser side would refill it at the looser rate for the stricter).
type MemoryStore struct {
	seed     maphash.Seed
	shards   []memShard
	mask     uint64
	perShard int
	maxKeys  int
}

type bucketKey struct {
	class shed.Class
	key   string
	limit RateLimit
}

type bucket struct {
	k          bucketKey
	lim        *rate.Limiter
	limit      RateLimit
	prev, next *bucket
}

type memShard struct {
	mu      sync.Mutex
	m       map[bucketKey]*bucket
	head    *bucket // most recently used
	tail    *bucket // least recently used
	evicted atomic.Uint64
	busy    atomic.Uint64
	_       [64]byte // keep shards' mutexes on separate cache lines
}

// NewMemoryStore returns a MemoryStore, or an error naming the invalid field.
func NewMemoryStore(cfg MemoryStoreConfig) (*MemoryStore, error) {
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: MaxKeys: must be >= 0, got %d", ErrInvalidConfig, cfg.MaxKeys)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	// At least 64 buckets per shard, so that one shard's LRU order is a
	// fair stand-in for the global one; at most 32 shards.
	n := 1
	for n < 32 && cfg.MaxKeys/(n*2) >= 64 {
		n *= 2
	}
	s := &MemoryStore{
		seed:     maphash.MakeSeed(),
		shards:   make([]memShard, n),
		mask:     uint64(n - 1),
		perShard: cfg.MaxKeys / n, // rounding down keeps the total <= MaxKeys
		maxKeys:  cfg.MaxKeys,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[bucketKey]*bucket)
	}
	return s, nil
}

// MaxKeys returns the bound on the number of buckets.
func (s *MemoryStore) MaxKeys() int { return s.maxKeys }

// AllowAt implements KeyStore.
func (s *MemoryStore) AllowAt(now time.Time, class shed.Class, key string, limit RateLimit) (bool, time.Duration) {
	return s.AllowNAt(now, class, key, limit, 1)
}

// AllowRequest implements RequestKeyStore: AllowNAt, r aside.
func (s *MemoryStore) AllowRequest(_ *http.Request, now time.Time, class shed.Class, key string, limit RateLimit, n int) (bool, time.Duration) {
	return s.AllowNAt(now, class, key, limit, n)
}

// AllowNAt takes n tokens (n < 1 counts as 1) from the bucket of (class,
// key) at time now, as AllowAt takes one: for a cost quota (LLM tokens per
// tenant). A cost larger than limit.Burst is never allowed, and retryAfter
// is then 0, as waiting does not help (shedredis.Store answers the same);
// no bucket is made for it.
func (s *MemoryStore) AllowNAt(now time.Time, class shed.Class, key string, limit RateLimit, n int) (bool, time.Duration) {
	if limit.Rate == rate.Inf {
		return true, 0
	}
	n = max(n, 1)
	if n > limit.Burst {
		return false, 0
	}
	if len(key) > MaxKeyBytes || strings.HasPrefix(key, digestPrefix) {
		// A key spelled like a digest is digested too, so that no client
		// can name another key's bucket.
		sum := sha256.Sum256([]byte(key))
		key = digestPrefix + hex.EncodeToString(sum[:16])
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[(h^uint64(class)*0x9e3779b97f4a7c15)&s.mask]
	k := bucketKey{class, key, limit}
	sh.mu.Lock()
	b := sh.m[k]
	if b == nil {
		b = sh.insert(now, k, limit, s.perShard)
	} else {
		sh.touch(b)
	}
	ok := b.lim.AllowN(now, n)
	var wait time.Duration
	if !ok {
		wait = tokenWait(float64(n)-b.lim.TokensAt(now), limit.Rate)
	}
	sh.mu.Unlock()
	return ok, wait
}

// tokenWait is how long rate r takes to refill tokens.
func tokenWait(tokens float64, r rate.Limit) time.Duration {
	const maxWait = float64(1<<63 - 1)
	d := tokens / float64(r) * float64(time.Second)
	if d >= maxWait {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(d)
}

// insert adds a bucket for k, evicting the least recently used one when
// the shard is full (and reusing it).
func (sh *memShard) insert(now time.Time, k bucketKey, limit RateLimit, capacity int) *bucket {
	k.key = strings.Clone(k.key) // do not retain a larger string the key was cut from
	var b *bucket
	if len(sh.m) >= capacity && sh.tail != nil {
		b = sh.tail
		sh.unlink(b)
		delete(sh.m, b.k)
		sh.evicted.Add(1)
		if b.lim.TokensAt(now) < float64(b.limit.Burst) {
			sh.busy.Add(1)
		}
		*b = bucket{}
	} else {
		b = new(bucket)
	}
	b.k = k
	b.lim = rate.NewLimiter(limit.Rate, limit.Burst)
	b.limit = limit
	sh.m[k] = b
	sh.pushFront(b)
	return b
}

func (sh *memShard) touch(b *bucket) {
	if sh.head == b {
		return
	}
	sh.unlink(b)
	sh.pushFront(b)
}

func (sh *memShard) unlink(b *bucket) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		sh.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		sh.tail = b.prev
	}
	b.prev, b.next = nil, nil
}

func (sh *memShard) pushFront(b *bucket) {
	b.next = sh.head
	if sh.head != nil {
		sh.head.prev = b
	}
	sh.head = b
	if sh.tail == nil {
		sh.tail = b
	}
}

// MemoryStoreStats describes a MemoryStore's state.
type MemoryStoreStats struct {
	// Keys is the number of buckets held, at most MaxKeys.
	Keys int
	// Evicted counts buckets evicted to make room for new keys.
	Evicted uint64
	// EvictedBusy counts evicted buckets that had not refilled: their key
	// was still sending and starts again with a full bucket. A steady
	// stream of these means MaxKeys is smaller than the active keys.
	EvictedBusy uint64
}

// Stats returns the store's counters. It locks each shard in turn.
func (s *MemoryStore) Stats() MemoryStoreStats {
	var st MemoryStoreStats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.m)
		sh.mu.Unlock()
		st.Evicted += sh.evicted.Load()
		st.EvictedBusy += sh.busy.Load()
	}
	return st
}
