package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

func ExampleNew() {
	// Interactive requests keep half of the capacity and may wait briefly;
	// batch requests use what is idle and are each tenant rate limited.
	lim, err := shed.New(shed.Config{
		Limit: 2, // in production, an adaptive Source from package limits
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 50, MaxWait: 100 * time.Millisecond},
			{Name: "batch"},
		},
	})
	if err != nil {
		panic(err)
	}
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:      lim,
			Routes:       map[string]string{"/api/": "interactive", "/api/export/": "batch"},
			RateLimits:   map[string]shedhttp.RateLimit{"batch": {Rate: 10, Burst: 20}},
			KeyHeader:    "X-Tenant-Id", // set by the authenticating proxy, never by clients
			MaxBodyBytes: 1 << 20,
			SkipPaths:    []string{"/healthz", "/metrics"},
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		p := nethttp.Permit(r.Context())
		fmt.Fprintf(w, "class %s, waited %v", lim.ClassName(p.Class()), p.Wait())
	})
	handler := mw(mux) // http.ListenAndServe(":8080", handler)

	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/api/users", nil))
	fmt.Println(w.Code, w.Body)

	// With every slot taken by batch work, a new export is shed.
	a, _ := lim.TryAcquire(shed.Request{Class: 1})
	b, _ := lim.TryAcquire(shed.Request{Class: 1})
	w = httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest("GET", "/api/export/all", nil))
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), "Shedkit-No-Retry:", w.Header().Get("Shedkit-No-Retry"))
	fmt.Println(w.Body)
	a.Release(shed.Success)
	b.Release(shed.Success)
	// Output:
	// 200 class interactive, waited 0s
	// 503 Retry-After: 1 Shedkit-No-Retry: overloaded
	// {"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The server is overloaded. Retry after the number of seconds in the Retry-After header."}
}

// Cost-aware admission: the request reserves its estimated tokens, and the
// handler reconciles them with what it really used.
func ExampleReconcile() {
	lim, err := shed.New(shed.Config{Limit: 100, MaxCost: 100_000})
	if err != nil {
		panic(err)
	}
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter: lim,
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Cost, _ = strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
			return def
		},
	})
	if err != nil {
		panic(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("reserved:", lim.Snapshot().InFlightCost)
		used := int64(1200) // the tokens the model really produced
		if err := nethttp.Reconcile(r.Context(), used); err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		fmt.Println("after reconcile:", lim.Snapshot().InFlightCost)
	}))
	handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/complete?max_tokens=4000", nil))
	fmt.Println("after the request:", lim.Snapshot().InFlightCost)
	// Output:
	// reserved: 4000
	// after reconcile: 1200
	// after the request: 0
}
