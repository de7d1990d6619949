package mwtest

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// testRateLimitCost: with RateLimitCost a request takes its cost from its
// key's bucket (tokens per second), without it one token; another key's
// bucket is untouched, and a cost above the burst is never admitted: 413
// without Retry-After, since a client that honoured one would retry for
// ever.
func testRateLimitCost(t *testing.T, a Adapter) {
	for _, c := range []struct {
		name       string
		charge     bool
		costs      []int64
		wantStatus []int
	}{
		{"cost", true, []int64{4, 4, 4}, []int{200, 200, 429}},
		{"requests", false, []int64{4, 4, 4}, []int{200, 200, 200}},
		{"above the burst", true, []int64{11, 8, 11, 4}, []int{413, 200, 413, 429}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := twoClasses(t, 100)
			s := a.start(t, Options{
				Options: shedhttp.Options{
					Limiter:       l,
					KeyHeader:     "X-Tenant",
					RateLimits:    map[string]shedhttp.RateLimit{"batch": {Rate: 1e-3, Burst: 10}},
					RateLimitCost: c.charge,
					Clock:         NewFakeClock().Now,
				},
				Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
					def.Cost, _ = strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
					return def
				},
			}, a.classApp(l))
			for i, cost := range c.costs {
				h := http.Header{"X-Tenant": {"a"}, "X-Cost": {strconv.FormatInt(cost, 10)}}
				resp, _ := s.get("/b", h)
				if resp.StatusCode != c.wantStatus[i] {
					t.Fatalf("request %d (cost %d): status %d, want %d", i+1, cost, resp.StatusCode, c.wantStatus[i])
				}
				if ra := resp.Header.Get("Retry-After"); (ra != "") != (resp.StatusCode == 429) {
					t.Errorf("request %d (cost %d): status %d with Retry-After %q", i+1, cost, resp.StatusCode, ra)
				}
			}
			if resp, _ := s.get("/b", http.Header{"X-Tenant": {"b"}, "X-Cost": {"4"}}); resp.StatusCode != 200 {
				t.Errorf("another key: status %d, want 200", resp.StatusCode)
			}
			waitIdle(t, l)
		})
	}
}
