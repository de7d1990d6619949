package retrybudget

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBudgetMap(t *testing.T) {
	if _, err := NewBudgetMap(BudgetConfig{}, -1); err == nil || !strings.Contains(err.Error(), "maxKeys") {
		t.Fatalf("negative maxKeys: err = %v", err)
	}
	if _, err := NewBudgetMap(BudgetConfig{TTL: -1}, 1); err == nil || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("bad config: err = %v", err)
	}
	m, err := NewBudgetMap(BudgetConfig{}, 3) // TTL 10s
	if err != nil {
		t.Fatal(err)
	}
	a := m.GetAt(t0, "a:80")
	if m.GetAt(t0, "a:80") != a || m.Get("a:80") != a {
		t.Fatal("Get returned a different budget for the same key")
	}
	r, _ := http.NewRequest(http.MethodGet, "http://a:80/x", nil)
	if m.ForHost(r) != a {
		t.Fatal("ForHost does not key by URL.Host")
	}
	for _, k := range []string{"a:80", "b:80", "c:80"} {
		m.GetAt(t0, k).DepositAt(t0)
	}
	// Every budget is busy: new keys share the overflow budget.
	if m.GetAt(t0.Add(time.Second), "d:80") != m.overflow || m.GetAt(t0.Add(time.Second), "e:80") != m.overflow {
		t.Fatal("a full map of busy budgets must hand out the overflow budget")
	}
	if m.Len() != 3 {
		t.Fatalf("Len = %d, want 3", m.Len())
	}
	// A TTL later they are idle, as good as new: a new key replaces one.
	d := m.GetAt(t0.Add(10*time.Second), "d:80")
	if d == m.overflow || m.Len() != 3 {
		t.Fatalf("an idle budget was not evicted for a new key (Len %d)", m.Len())
	}
	if m.GetAt(t0.Add(10*time.Second), "d:80") != d {
		t.Fatal("the new key's budget is not kept")
	}
}

func TestKeyedLRU(t *testing.T) {
	k := keyed[int]{max: 3, lru: true}
	n := 0
	mk := func() int { n++; return n }
	for _, key := range []string{"a", "b", "c"} {
		k.getOrAdd(key, mk, nil, time.Now)
	}
	k.get("a") // a is recent; b is now the least recently used
	k.getOrAdd("c", mk, nil, time.Now)
	if _, ok := k.getOrAdd("d", mk, nil, time.Now); !ok {
		t.Fatal("LRU map refused a key")
	}
	if _, ok := k.get("b"); ok {
		t.Fatal("b should have been evicted")
	}
	for _, key := range []string{"a", "c", "d"} {
		if _, ok := k.get(key); !ok {
			t.Fatalf("%s was evicted", key)
		}
	}
	// Bounded under churn.
	for i := range 1000 {
		k.getOrAdd(fmt.Sprint(i), mk, nil, time.Now)
	}
	if k.len() != 3 {
		t.Fatalf("len = %d, want 3", k.len())
	}
}

// TestKeyedAddCostDoesNotGrow: adding a key to a full map (evicting one)
// costs the same whatever the map's size. (Before the fix, every new key
// copied the whole map: about 66 KB allocated per new host with 5,000
// hosts.)
func TestKeyedAddCostDoesNotGrow(t *testing.T) {
	const adds = 1000
	for _, max := range []int{100, 10_000} {
		k := keyed[int]{max: max, lru: true}
		keys := make([]string, max+adds)
		for i := range keys {
			keys[i] = fmt.Sprint("host-", i)
		}
		for _, key := range keys[:max] {
			k.getOrAdd(key, func() int { return 0 }, nil, time.Now)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, key := range keys[max:] {
			k.getOrAdd(key, func() int { return 0 }, nil, time.Now)
		}
		runtime.ReadMemStats(&after)
		if perAdd := (after.TotalAlloc - before.TotalAlloc) / adds; perAdd > 1024 {
			t.Errorf("max %d: %d bytes allocated per new key, want a small constant", max, perAdd)
		}
		if k.len() != max {
			t.Errorf("max %d: len %d", max, k.len())
		}
	}
}

// TestKeyedProbeIsBounded: without lru, a new key looks at no more than
// maxProbe entries for an idle one; the hand goes on where it stopped, so
// an idle entry is found within a few misses wherever it is.
func TestKeyedProbeIsBounded(t *testing.T) {
	const max = 4 * maxProbe
	k := keyed[int]{max: max}
	for i := range max {
		k.getOrAdd(fmt.Sprint(i), func() int { return i }, nil, time.Now)
	}
	looked := 0
	idle := func(v int, _ time.Time) bool { looked++; return v == 2*maxProbe+3 }
	for miss := range 3 {
		looked = 0
		_, ok := k.getOrAdd(fmt.Sprint("new", miss), func() int { return -1 }, idle, time.Now)
		if looked > maxProbe {
			t.Fatalf("miss %d looked at %d entries", miss, looked)
		}
		if ok != (miss == 2) {
			t.Fatalf("miss %d: added %v; the idle entry is in the 3rd stretch of %d", miss, ok, maxProbe)
		}
	}
	if _, ok := k.get(fmt.Sprint(2*maxProbe + 3)); ok || k.len() != max {
		t.Fatalf("the idle entry was not replaced (len %d)", k.len())
	}
}

// TestKeyedConcurrent: concurrent lookups and adds over more keys than
// the map holds keep it bounded and consistent: every key the sweep knows
// is in the lookup map, and nothing else is.
func TestKeyedConcurrent(t *testing.T) {
	k := keyed[string]{max: 32, lru: true}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint((i*7 + g*13) % 100)
				if v, _ := k.getOrAdd(key, func() string { return key }, nil, time.Now); v != key {
					t.Errorf("key %s has value %s", key, v)
					return
				}
			}
		})
	}
	wg.Wait()
	n := 0
	k.m.Range(func(key, e any) bool {
		n++
		if e.(*entry[string]).key != key {
			t.Errorf("entry under %v has key %s", key, e.(*entry[string]).key)
		}
		return true
	})
	if n != 32 || k.len() != 32 {
		t.Fatalf("%d keys in the lookup map, %d in the sweep, want 32", n, k.len())
	}
	for _, e := range k.all {
		if got, ok := k.get(e.key); !ok || got != e.v {
			t.Fatalf("key %s of the sweep is not found", e.key)
		}
	}
}
