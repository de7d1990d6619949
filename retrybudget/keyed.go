package retrybudget

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// keyed is a bounded string-keyed map. Lookups are a sync.Map load:
// no lock, no allocation. Adding a key takes a mutex and costs O(1)
// amortized, however many keys the map holds: a map that copied itself on
// each new key cost O(max) per new destination, 66 KB allocated per
// request with 5,000 hosts.
//
// When full, a new key replaces an entry chosen by a clock hand sweeping
// the slots (CLOCK, the usual approximation of least recently used): the
// first entry that is idle (its state is that of a fresh one, so nothing
// is lost), or, if lru is set, the first one that has not been used since
// the hand last passed it. A hit marks its entry used only when it is not
// marked yet, so steady hits only read shared memory. Without lru, the
// hand looks at no more than maxProbe entries per new key, and the add
// fails when none of them is idle; with lru, it clears the marks it
// passes, so it finds an entry within one turn (and takes the one under
// the hand if concurrent hits keep marking them). Every step of the hand
// either clears a mark set by a hit or ends the search, so the sweep
// costs O(1) amortized per operation.
type keyed[V any] struct {
	m   sync.Map // string -> *entry[V]
	mu  sync.Mutex
	all []*entry[V] // the slots the hand sweeps; guarded by mu
	hnd int         // the hand: the next slot to look at
	max int
	lru bool
}

// maxProbe bounds the entries the hand looks at for one new key when the
// map is not lru.
const maxProbe = 16

type entry[V any] struct {
	key  string
	v    V
	used atomic.Bool
}

func (k *keyed[V]) get(key string) (V, bool) {
	if e, ok := k.m.Load(key); ok {
		e := e.(*entry[V])
		if !e.used.Load() {
			e.used.Store(true)
		}
		return e.v, true
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
	if e, ok := k.m.Load(key); ok { // added meanwhile: adds hold mu
		return e.(*entry[V]).v, true
	}
	e := &entry[V]{key: key}
	if len(k.all) < k.max {
		e.v = mk()
		k.all = append(k.all, e)
		k.m.Store(key, e)
		return e.v, true
	}
	slot := k.victim(idle, clock())
	if slot < 0 {
		var zero V
		return zero, false
	}
	k.m.Delete(k.all[slot].key)
	e.v = mk()
	k.all[slot] = e
	k.m.Store(key, e)
	return e.v, true
}

// victim moves the hand to the slot of the entry to evict and returns it,
// or -1 when nothing may be evicted. k.mu is held and the map is full.
func (k *keyed[V]) victim(idle func(V, time.Time) bool, now time.Time) int {
	steps := maxProbe
	if k.lru {
		steps = 2 * len(k.all) // a turn to clear the marks, one to find
	}
	for range steps {
		i := k.hnd
		k.hnd = (k.hnd + 1) % len(k.all)
		e := k.all[i]
		switch {
		case idle != nil && idle(e.v, now):
			return i
		case !k.lru:
		case e.used.Load():
			e.used.Store(false) // a second chance
		default:
			return i
		}
	}
	if k.lru { // every entry was used again behind the hand
		i := k.hnd
		k.hnd = (k.hnd + 1) % len(k.all)
		return i
	}
	return -1
}

func (k *keyed[V]) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.all)
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
//
// A new key costs O(1), whatever maxKeys: it looks for an idle budget
// among at most 16, continuing where the previous new key stopped, so
// that an idle budget anywhere in the map is found within maxKeys/16 new
// keys; meanwhile they use the overflow budget.
type BudgetMap struct {
	cfg      BudgetConfig
	k        keyed[*Budget]
	overflow *Budget
}

// NewBudgetMap returns a map whose budgets are configured by cfg. maxKeys
// 0 means [DefaultMaxKeys].
func NewBudgetMap(cfg BudgetConfig, maxKeys int) (*BudgetMap, error) {
	if maxKeys < 0 || maxKeys > 1<<20 {
		return nil, fmt.Errorf("%w: NewBudgetMap maxKeys must be in [0, %d], got %d", ErrInvalidConfig, 1<<20, maxKeys)
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
