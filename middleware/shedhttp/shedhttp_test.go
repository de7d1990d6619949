package shedhttp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func store(t testing.TB, maxKeys int) *shedhttp.MemoryStore {
	t.Helper()
	s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryStoreBucket(t *testing.T) {
	s := store(t, 10)
	lim := shedhttp.RateLimit{Rate: 2, Burst: 3}
	for i := range 3 {
		if ok, _ := s.AllowAt(t0, 0, "a", lim); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	ok, wait := s.AllowAt(t0, 0, "a", lim)
	if ok || wait != 500*time.Millisecond {
		t.Errorf("over the burst: ok %v wait %v, want false 500ms", ok, wait)
	}
	if ok, wait = s.AllowAt(t0.Add(200*time.Millisecond), 0, "a", lim); ok || wait != 300*time.Millisecond {
		t.Errorf("200 ms later: ok %v wait %v, want false 300ms", ok, wait)
	}
	if ok, _ = s.AllowAt(t0.Add(500*time.Millisecond), 0, "a", lim); !ok {
		t.Error("a token refilled after 500 ms, refused")
	}
	// Classes and keys have separate buckets.
	if ok, _ = s.AllowAt(t0, 1, "a", lim); !ok {
		t.Error("another class shares the bucket")
	}
	if ok, _ = s.AllowAt(t0, 0, "b", lim); !ok {
		t.Error("another key shares the bucket")
	}
	// rate.Inf never limits and keeps no state.
	for range 100 {
		if ok, _ := s.AllowAt(t0, 0, "inf", shedhttp.RateLimit{Rate: rate.Inf, Burst: 1}); !ok {
			t.Fatal("rate.Inf refused")
		}
	}
	if k := s.Stats().Keys; k != 3 {
		t.Errorf("keys %d, want 3", k)
	}
}

func TestMemoryStoreCost(t *testing.T) {
	s := store(t, 10)
	lim := shedhttp.RateLimit{Rate: 100, Burst: 1000} // tokens per second
	if ok, _ := s.AllowNAt(t0, 0, "a", lim, 800); !ok {
		t.Fatal("a cost within the burst refused")
	}
	ok, wait := s.AllowNAt(t0, 0, "a", lim, 300)
	if ok || wait != time.Second {
		t.Errorf("over the bucket: ok %v wait %v, want false 1s (100 tokens at 100/s)", ok, wait)
	}
	if ok, _ = s.AllowNAt(t0.Add(time.Second), 0, "a", lim, 300); !ok {
		t.Error("the bucket refilled after 1 s, refused")
	}
	if ok, wait = s.AllowNAt(t0.Add(time.Second), 0, "a", lim, 1001); ok || wait != 0 {
		// Waiting never helps, as shedredis.CostStore states: a
		// Retry-After would send the client back to be refused again.
		t.Errorf("a cost larger than the burst: ok %v wait %v, want false 0", ok, wait)
	}
	if n := s.Stats().Keys; n != 1 {
		t.Errorf("%d buckets after a refused oversized cost on a new key, want 1 (a)", n)
	}
	if ok, _ = s.AllowNAt(t0.Add(time.Hour), 0, "c", lim, 1001); ok || s.Stats().Keys != 1 {
		t.Errorf("an oversized cost on a new key: ok %v, %d buckets, want false 1", ok, s.Stats().Keys)
	}
	if ok, _ = s.AllowNAt(t0, 0, "b", lim, 0); !ok {
		t.Error("a cost of 0 (counted as 1) refused")
	}
}

// TestMemoryStoreLimitChange: another limit for the same class and key is
// another bucket (see TestMemoryStoreSharedByDifferentLimits): it starts
// full, and the first limit's bucket keeps its count.
func TestMemoryStoreLimitChange(t *testing.T) {
	s := store(t, 10)
	slow, fast := shedhttp.RateLimit{Rate: 1, Burst: 1}, shedhttp.RateLimit{Rate: 10, Burst: 1}
	if ok, _ := s.AllowAt(t0, 0, "a", slow); !ok {
		t.Fatal("first refused")
	}
	if ok, _ := s.AllowAt(t0, 0, "a", slow); ok {
		t.Fatal("second allowed")
	}
	if ok, _ := s.AllowAt(t0.Add(100*time.Millisecond), 0, "a", fast); !ok {
		t.Error("the new limit's bucket did not start full")
	}
	if ok, _ := s.AllowAt(t0.Add(200*time.Millisecond), 0, "a", slow); ok {
		t.Error("the first limit's bucket refilled at the new rate")
	}
}

// TestMemoryStoreLRU: the least recently used bucket is evicted first, and
// evictions of buckets that had not refilled are counted apart.
func TestMemoryStoreLRU(t *testing.T) {
	s := store(t, 3) // one shard of 3
	lim := shedhttp.RateLimit{Rate: 1, Burst: 1}
	s.AllowAt(t0, 0, "a", lim)
	s.AllowAt(t0, 0, "b", lim)
	s.AllowAt(t0, 0, "c", lim)
	s.AllowAt(t0, 0, "a", lim) // a is now the most recent; b the least
	s.AllowAt(t0, 0, "d", lim) // evicts b
	if ok, _ := s.AllowAt(t0, 0, "a", lim); ok {
		t.Error("a was evicted (it starts again with a full bucket)")
	}
	if ok, _ := s.AllowAt(t0, 0, "b", lim); !ok {
		t.Error("b was not evicted") // evicts c, b is new
	}
	st := s.Stats()
	if st.Keys != 3 || st.Evicted != 2 || st.EvictedBusy != 2 {
		t.Errorf("stats %+v, want 3 keys, 2 evictions, both busy", st)
	}
	// Once idle for a second the buckets are full: evicting them loses nothing.
	later := t0.Add(time.Second)
	s.AllowAt(later, 0, "e", lim)
	if st := s.Stats(); st.Evicted != 3 || st.EvictedBusy != 2 {
		t.Errorf("stats %+v, want an idle eviction", st)
	}
}

// TestMemoryStoreBound: a flood of distinct keys, from many goroutines,
// never takes the store past MaxKeys.
func TestMemoryStoreBound(t *testing.T) {
	for _, maxKeys := range []int{1, 7, 100, 1000, 5000} {
		s := store(t, maxKeys)
		if s.MaxKeys() != maxKeys {
			t.Errorf("MaxKeys %d, want %d", s.MaxKeys(), maxKeys)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25_000 {
					s.AllowAt(t0, shed.Class(i%3), fmt.Sprintf("%d-%d", g, i), shedhttp.RateLimit{Rate: 1, Burst: 1})
				}
			}()
		}
		wg.Wait()
		if st := s.Stats(); st.Keys > maxKeys || st.Keys < maxKeys/2 || st.Evicted != uint64(100_000-st.Keys) {
			t.Errorf("MaxKeys %d: stats %+v", maxKeys, st)
		}
	}
}

func TestMemoryStoreLongKeys(t *testing.T) {
	s := store(t, 10)
	lim := shedhttp.RateLimit{Rate: 1, Burst: 1}
	long := strings.Repeat("k", 1<<20)
	if ok, _ := s.AllowAt(t0, 0, long, lim); !ok {
		t.Fatal("first refused")
	}
	if ok, _ := s.AllowAt(t0, 0, long, lim); ok {
		t.Error("a long key lost its bucket")
	}
	if ok, _ := s.AllowAt(t0, 0, long[:len(long)-1]+"j", lim); !ok {
		t.Error("two long keys share a bucket")
	}
}

func TestNewMemoryStore(t *testing.T) {
	if _, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: -1}); !errors.Is(err, shedhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxKeys") {
		t.Errorf("negative MaxKeys: %v", err)
	}
	if s := store(t, 0); s.MaxKeys() != shedhttp.DefaultMaxKeys {
		t.Errorf("default MaxKeys %d", s.MaxKeys())
	}
}

// TestMemoryStoreModel compares the store with a model: for a store large
// enough to evict nothing, each key is an independent x/time/rate bucket.
func TestMemoryStoreModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := store(t, 1000)
	model := map[string]*rate.Limiter{}
	lim := shedhttp.RateLimit{Rate: 5, Burst: 2}
	now := t0
	for i := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(100)) * time.Millisecond)
		key := strconv.Itoa(rng.IntN(50))
		m := model[key]
		if m == nil {
			m = rate.NewLimiter(lim.Rate, lim.Burst)
			model[key] = m
		}
		want := m.AllowN(now, 1)
		if got, _ := s.AllowAt(now, 0, key, lim); got != want {
			t.Fatalf("step %d key %s: got %v, want %v", i, key, got, want)
		}
	}
}

func TestRateLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l  shedhttp.RateLimit
		ok bool
	}{
		{shedhttp.RateLimit{Rate: 1, Burst: 1}, true},
		{shedhttp.RateLimit{Rate: rate.Inf, Burst: 1}, true},
		{shedhttp.RateLimit{Rate: 0, Burst: 1}, false},
		{shedhttp.RateLimit{Rate: -1, Burst: 1}, false},
		{shedhttp.RateLimit{Rate: rate.Limit(math.NaN()), Burst: 1}, false},
		{shedhttp.RateLimit{Rate: 1, Burst: 0}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.l, err)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "1"}, {0, "1"}, {time.Nanosecond, "1"}, {time.Second, "1"},
		{time.Second + time.Nanosecond, "2"}, {1500 * time.Millisecond, "2"},
		{300 * time.Second, "300"}, {301 * time.Second, "301"}, {time.Hour, "3600"},
		{time.Duration(math.MaxInt64), strconv.FormatInt(math.MaxInt64/int64(time.Second), 10)},
	} {
		v := shedhttp.RetryAfterValue(tc.d)
		if len(v) != 1 || v[0] != tc.want {
			t.Errorf("RetryAfterValue(%v) = %v, want [%s]", tc.d, v, tc.want)
		}
	}
}

func TestWriteProblem(t *testing.T) {
	for _, status := range []int{429, 503, 413, 500, 418} {
		w := httptest.NewRecorder()
		shedhttp.WriteProblem(w, httptest.NewRequest("GET", "/", nil), shedhttp.Rejection{Status: status, Reason: shed.ReasonQueueFull, Class: 3})
		if w.Code != status || w.Header().Get("Content-Type") != shedhttp.ProblemContentType {
			t.Errorf("%d: code %d content type %q", status, w.Code, w.Header().Get("Content-Type"))
		}
		if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(w.Body.Len()) {
			t.Errorf("%d: Content-Length %s for %d bytes", status, cl, w.Body.Len())
		}
		var p struct {
			Type, Title, Detail string
			Status              int
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != "about:blank" || p.Title != http.StatusText(status) || p.Status != status || p.Detail == "" {
			t.Errorf("%d: body %s (%v)", status, w.Body, err)
		}
		if strings.Contains(w.Body.String(), "queue") {
			t.Errorf("%d: body names the reason: %s", status, w.Body)
		}
		w = httptest.NewRecorder()
		shedhttp.WriteProblem(w, httptest.NewRequest("HEAD", "/", nil), shedhttp.Rejection{Status: status})
		if w.Body.Len() != 0 {
			t.Errorf("%d: HEAD body %q", status, w.Body)
		}
	}
}

func TestDefaultOutcome(t *testing.T) {
	get := httptest.NewRequest("GET", "/", nil)
	ws := httptest.NewRequest("GET", "/", nil)
	ws.Header.Set("Upgrade", "websocket")
	connect := httptest.NewRequest("CONNECT", "/", nil)
	for _, tc := range []struct {
		r      *http.Request
		status int
		want   shed.Outcome
	}{
		{get, 100, shed.Success}, {get, 200, shed.Success}, {get, 204, shed.Success},
		{get, 301, shed.Success}, {get, 304, shed.Success},
		{get, 400, shed.Ignored}, {get, 404, shed.Ignored}, {get, 408, shed.Ignored}, {get, 429, shed.Ignored},
		{get, 500, shed.Ignored}, {get, 501, shed.Ignored}, {get, 505, shed.Ignored},
		{get, 502, shed.Dropped}, {get, 503, shed.Dropped}, {get, 504, shed.Dropped},
		{ws, 101, shed.Ignored}, {ws, 200, shed.Ignored}, {ws, 503, shed.Dropped},
		{connect, 200, shed.Ignored}, {nil, 200, shed.Success},
	} {
		if got := shedhttp.DefaultOutcome(tc.r, tc.status); got != tc.want {
			t.Errorf("%v %d: %v, want %v", tc.r != nil && tc.r != get, tc.status, got, tc.want)
		}
	}
}
