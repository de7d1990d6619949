package retrybudget

import (
	"fmt"
	"net/http"
	"strings"
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
