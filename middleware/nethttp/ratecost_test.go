package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// TestRateLimitCostAboveBurst: with RateLimitCost, a request that costs
// more tokens than its bucket holds can never pass: it gets 413 without a
// Retry-After (a client that honoured one would retry for ever), while a
// request that only waits for tokens gets 429 with one.
func TestRateLimitCostAboveBurst(t *testing.T) {
	l := newLimiter(t, 100)
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:       l,
			KeyHeader:     "X-Tenant",
			RateLimits:    map[string]shedhttp.RateLimit{l.Snapshot().Classes[0].Name: {Rate: rate.Limit(1), Burst: 10}},
			RateLimitCost: true,
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost, _ = strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
			return def
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tc := range []struct {
		cost       string
		status     int
		retryAfter bool
	}{
		{"11", http.StatusRequestEntityTooLarge, false}, // never fits
		{"8", http.StatusOK, false},
		{"11", http.StatusRequestEntityTooLarge, false},
		{"5", http.StatusTooManyRequests, true}, // waits for tokens
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Tenant", "a")
		req.Header.Set("X-Cost", tc.cost)
		h.ServeHTTP(rec, req)
		if ra := rec.Header().Get("Retry-After"); rec.Code != tc.status || (ra != "") != tc.retryAfter {
			t.Errorf("cost %s: status %d, Retry-After %q; want %d, Retry-After set %v", tc.cost, rec.Code, ra, tc.status, tc.retryAfter)
		}
	}
}
