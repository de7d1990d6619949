package sim

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"

	xrate "golang.org/x/time/rate"
)

// keyDist draws the key of a class's requests (see Keys).
type keyDist struct {
	cum []float64 // cumulative weights of keys 0..n-1; nil: one key
	rng *rand.Rand
	// During a surge of key 0 (from, to in ns from the start), a request
	// is key 0's extra traffic with probability extra, else drawn as
	// usual (see KeySurge).
	from, to int64
	extra    float64
}

func newKeyDist(k *Keys, rng *rand.Rand) keyDist {
	if k == nil || k.Count <= 1 {
		return keyDist{}
	}
	cum := make([]float64, k.Count)
	sum := 0.0
	for i := range cum {
		sum += math.Pow(float64(i+1), -k.Zipf)
		cum[i] = sum
	}
	d := keyDist{cum: cum, rng: rng}
	if s := k.Surge; s != nil {
		// Of the rate (1 + (F-1)p) during the surge, (F-1)p is key 0's
		// extra: key 0 then gets (F-1)p + p of it, F times its share.
		p := 1 / sum
		d.from, d.to = int64(s.At), int64(s.At+s.For)
		d.extra = (s.Factor - 1) * p / (1 + (s.Factor-1)*p)
	}
	return d
}

// hotShare returns the share of the class's requests that key 0 sends
// outside a surge: 1 / sum over keys of 1/(k+1)^Zipf.
func (k *Keys) hotShare() float64 {
	if k == nil || k.Count <= 1 {
		return 1
	}
	sum := 0.0
	for i := range k.Count {
		sum += math.Pow(float64(i+1), -k.Zipf)
	}
	return 1 / sum
}

// next returns the key of the next request, arriving at now (ns from the
// start).
func (d *keyDist) next(now int64) int32 {
	if d.cum == nil {
		return 0
	}
	if d.extra > 0 && now >= d.from && now < d.to && d.rng.Float64() < d.extra {
		return 0
	}
	u := d.rng.Float64() * d.cum[len(d.cum)-1]
	return int32(min(sort.SearchFloat64s(d.cum, u), len(d.cum)-1))
}

// keyBuckets is one store's token buckets for one class's rate limit, one
// per key, each made when its key first comes: a new key's bucket starts
// full, as it does in the middleware's MemoryStore and in shedredis.
type keyBuckets struct {
	rps   float64
	burst int
	b     []*xrate.Limiter // by key
}

func newKeyBuckets(rps float64, burst, keys int) keyBuckets {
	return keyBuckets{rps: rps, burst: burst, b: make([]*xrate.Limiter, keys)}
}

// allow takes a token of key's bucket at now, and returns the bucket.
func (k *keyBuckets) allow(now time.Time, key int32) (*xrate.Limiter, bool) {
	l := k.b[key]
	if l == nil {
		l = xrate.NewLimiter(xrate.Limit(k.rps), k.burst)
		k.b[key] = l
	}
	return l, l.AllowN(now, 1)
}

// rateStore holds every bucket of the rate limits: per replica (the
// MemoryStore, and the fallback share of shared limits when the store
// has outages) and, for Shared limits, the fleet's (shedredis.Store).
type rateStore struct {
	local  [][]keyBuckets // by replica, then class; a zero keyBuckets: no limit
	shared []keyBuckets   // by class
}

// newRateStore returns the buckets of sc's rate limits, or nil when no
// class has one. x/time/rate driven with explicit times (AllowN) is what
// the MemoryStore runs, so the simulated 429s are the real ones.
func newRateStore(sc *Scenario) *rateStore {
	var s *rateStore
	n := sc.Service.Replicas
	for c := range sc.Classes {
		l := sc.Classes[c].RateLimit
		if l == nil {
			continue
		}
		if s == nil {
			s = &rateStore{local: make([][]keyBuckets, n), shared: make([]keyBuckets, len(sc.Classes))}
			for r := range s.local {
				s.local[r] = make([]keyBuckets, len(sc.Classes))
			}
		}
		keys := sc.Classes[c].keyCount()
		rps, burst := l.RPS, l.Burst
		if l.Shared {
			s.shared[c] = newKeyBuckets(rps, burst, keys)
			if !sc.Service.storeFails() {
				continue // never a fallback
			}
			// The fallback share, rounded up as shedredis's is.
			rps, burst = rps/float64(n), (burst+n-1)/n
		}
		for r := range s.local {
			s.local[r][c] = newKeyBuckets(rps, burst, keys)
		}
	}
	return s
}

// allow decides request t of class c with key at replica r at now, on
// the replica's share of a Shared limit when fallback (the store could
// not be used): the
// bucket that decided, and whether it let t through. A class without a
// rate limit always passes (nil bucket). What the fleet's bucket admits
// is charged to the replica's share too, as shedredis does, so that an
// outage starts from the replica's recent use rather than a full burst.
func (s *rateStore) allow(now time.Time, r, c int, key int32, fallback bool) (*xrate.Limiter, bool) {
	local := &s.local[r][c]
	if b := &s.shared[c]; b.b != nil && !fallback {
		l, ok := b.allow(now, key)
		if ok && local.b != nil {
			local.allow(now, key)
		}
		return l, ok
	}
	if local.b == nil {
		return nil, true
	}
	return local.allow(now, key)
}
