package shedhttp_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// A MemoryStore can be shared by several middlewares, and reports how
// often it had to evict keys that were still active.
func ExampleNewMemoryStore() {
	store, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: 10_000})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	limit := shedhttp.RateLimit{Rate: 1, Burst: 2} // one per second, bursts of 2
	for i := range 3 {
		ok, retryAfter := store.AllowAt(now, 0, "tenant-a", limit)
		fmt.Println(i, ok, retryAfter)
	}
	fmt.Printf("%+v\n", store.Stats())
	// Output:
	// 0 true 0s
	// 1 true 0s
	// 2 false 1s
	// {Keys:1 Evicted:0 EvictedBusy:0}
}

// WriteProblem is the default rejection response; a custom RejectFunc can
// call it after logging, or replace it.
func ExampleWriteProblem() {
	w := httptest.NewRecorder()
	shedhttp.WriteProblem(w, httptest.NewRequest("GET", "/", nil), shedhttp.Rejection{Status: 429})
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Println(w.Body)
	// Output:
	// 429 application/problem+json
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Too many requests from this client. Retry after the number of seconds in the Retry-After header."}
}
