package shedredis_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/middleware/shedredis"
	"github.com/shedkit/shedkit/shed"
)

// Three replicas share each tenant's quota of 200 requests per second and
// 20 requests in flight. The example needs a Redis on 127.0.0.1:6379, so
// it is compiled but not run.
func Example() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // lets the store's time budget reach the socket
	})
	defer rdb.Close()
	cfg := shedredis.Config{Client: rdb, Replicas: 3} // 5 ms budget by default
	store, err := shedredis.NewStore(cfg)
	if err != nil {
		panic(err)
	}
	conc, err := shedredis.NewConcurrency(cfg)
	if err != nil {
		panic(err)
	}
	defer conc.Close()

	lim, err := shed.New(shed.Config{Limit: 100}) // per replica: in production an adaptive Source
	if err != nil {
		panic(err)
	}
	admission, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:    lim,
			KeyHeader:  "X-Tenant-Id", // set by the authenticating proxy
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 200, Burst: 20}},
			KeyStore:   store, // shared by the fleet
		},
	})
	if err != nil {
		panic(err)
	}
	perTenant, err := shedredis.ConcurrencyMiddleware(shedredis.MiddlewareConfig{
		Concurrency: conc,
		Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant-Id") },
		Limit:       20,
	})
	if err != nil {
		panic(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	handler := perTenant(admission(app))
	_ = http.ListenAndServe(":8080", handler)
}

// Charging the tokens of an LLM call against a tenant's quota of 100,000
// tokens per minute, shared by the fleet.
func ExampleStore_Decide() {
	var store *shedredis.Store // from shedredis.NewStore
	tokensPerMinute := shedhttp.RateLimit{Rate: 100_000.0 / 60, Burst: 100_000}
	handler := func(w http.ResponseWriter, r *http.Request) {
		tenant, estimate := r.Header.Get("X-Tenant-Id"), 4000
		d := store.Decide(r.Context(), time.Now(), 0, tenant, tokensPerMinute, estimate)
		if !d.Allowed {
			w.Header()["Retry-After"] = shedhttp.RetryAfterValue(d.RetryAfter)
			http.Error(w, "token quota exceeded", http.StatusTooManyRequests)
			return
		}
		// ... call the model; d.FellBack says whether Redis was used.
	}
	_ = handler
}

// Holding a fleet-wide slot for a background job of a tenant.
func ExampleConcurrency_Acquire() {
	var conc *shedredis.Concurrency // from shedredis.NewConcurrency
	ctx := context.Background()
	lease, err := conc.Acquire(ctx, "tenant-42", 5)
	var le *shedredis.LimitError
	if errors.As(err, &le) {
		fmt.Println("tenant at its limit; retry after", le.RetryAfter)
		return
	}
	if err != nil {
		return // ctx ended
	}
	defer lease.Release()
	// ... the work; the lease is renewed while it runs.
}
