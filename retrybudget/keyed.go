package retrybudget

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// keyed is a bounded string-keyed map, read without locks or allocation:
// lookups load an immutable map through an atomic pointer; a miss copies
// the map under a mutex (O(n), rare once the keys are known). When full,
// a miss evicts an entry whose state is equivalent to a fresh one (idle),
// else, if lru is set, the least recently used entry, else it fails.
//
// Recency is approximate and cheap: every miss starts a new generation,
// and a hit stamps its entry with the current generation only when the
// stamp differs, so steady hits only read shared memory.
type keyed[V any] struct {
	p   atomic.Pointer[map[string]*entry[V]]
	gen atomic.Uint64
	mu  sync.Mutex
	max int
	lru bool
}

type entry[V any] struct {
	v   V
	gen atomic.Uint64
}

func (k *keyed[V]) get(key string) (V, bool) {
	if m := k.p.Load(); m != nil {
		if e, ok := (*m)[key]; ok {
			if g := k.gen.Load(); e.gen.Load() != g {
				e.gen.Store(g)
			}
			return e.v, true
		}
	}
	var zero V
	return zero, false
}

// getOrAdd returns the value for key, creating it with mk when absent.
// It returns false when the map is full and nothing may be evicted. The
// clock is read, for idle, only when the map is full.
func (k *keyed[V]) getOrAdd(key string, mk func() V, idle func(V, time.Time) bool, clock func() time.Time) (V, bool) {
	if v, ok := k.get(key); ok {
		return v, true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var old map[string]*entry[V]
	if p := k.p.Load(); p != nil {
		old = *p
	}
	if e, ok := old[key]; ok {
		return e.v, true
	}
	victim, evict := "", false
	if len(old) >= k.max {
		now := clock()
		for kk, e := range old {
			if idle != nil && idle(e.v, now) {
				victim, evict = kk, true
				break
			}
		}
		if !evict && k.lru {
			var oldest uint64
			for kk, e := range old {
				if g := e.gen.Load(); !evict || g < oldest {
					victim, evict, oldest = kk, true, g
				}
			}
		}
		if !evict {
			var zero V
			return zero, false
		}
	}
	g := k.gen.Add(1)
	nm := make(map[string]*entry[V], len(old)+1)
	for kk, e := range old {
		if !evict || kk != victim {
			nm[kk] = e
		}
	}
	e := &entry[V]{v: mk()}
	e.gen.Store(g)
	nm[key] = e
	k.p.Store(&nm)
	return e.v, true
}

func (k *keyed[V]) len() int {
	if p := k.p.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// DefaultMaxKeys bounds a [BudgetMap] and the per-host breakers of a
// [Transport] when their configs leave the bound at zero.
const DefaultMaxKeys = 1024

// BudgetMap holds one [Budget] per key (a destination host, typically),
// at most maxKeys of them. When it is full, a new key takes the place of a
// budget that has been idle for a whole TTL (an idle budget is the same
// as a fresh one, so nothing is lost); when none is idle, new keys share
// one overflow budget. Retries therefore stay bounded however many keys
// callers make up: never more than (maxKeys+1) floors plus the ratio.
type BudgetMap struct {
	cfg      BudgetConfig
	k        keyed[*Budget]
	overflow *Budget
}

// NewBudgetMap returns a map whose budgets are configured by cfg. maxKeys
// 0 means [DefaultMaxKeys].
func NewBudgetMap(cfg BudgetConfig, maxKeys int) (*BudgetMap, error) {
	if maxKeys < 0 || maxKeys > 1<<20 {
		return nil, fmt.Errorf("retrybudget: NewBudgetMap maxKeys must be in [0, %d], got %d", 1<<20, maxKeys)
	}
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	overflow, err := NewBudget(cfg)
	if err != nil {
		return nil, err
	}
	m := &BudgetMap{cfg: cfg, overflow: overflow}
	m.k.max = maxKeys
	return m, nil
}

// GetAt returns the budget of key, creating it if needed; now decides
// which budgets are idle when the map is full. It takes no lock when the
// key is known.
func (m *BudgetMap) GetAt(now time.Time, key string) *Budget {
	b, ok := m.k.getOrAdd(key, m.newBudget, m.idle, func() time.Time { return now })
	if !ok {
		return m.overflow
	}
	return b
}

// Get is GetAt with the wall clock, read only when the map is full.
func (m *BudgetMap) Get(key string) *Budget {
	b, ok := m.k.getOrAdd(key, m.newBudget, m.idle, time.Now)
	if !ok {
		return m.overflow
	}
	return b
}

// ForHost returns the budget of the request's destination host
// (URL.Host). It fits [TransportConfig.BudgetFor].
func (m *BudgetMap) ForHost(r *http.Request) *Budget {
	return m.Get(requestHost(r))
}

// Len returns the number of keys held, the overflow budget not included.
func (m *BudgetMap) Len() int { return m.k.len() }

func (m *BudgetMap) newBudget() *Budget {
	b, _ := NewBudget(m.cfg) // cfg was validated by NewBudgetMap
	return b
}

func (m *BudgetMap) idle(b *Budget, now time.Time) bool { return b.idleAt(now) }

func requestHost(r *http.Request) string {
	if r.URL != nil && r.URL.Host != "" {
		return r.URL.Host
	}
	return r.Host
}
