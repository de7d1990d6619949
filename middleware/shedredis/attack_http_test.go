package shedredis

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Over real loopback: handlers that panic, clients that hang up mid-request
// and tenants with hostile keys (colons, braces, a digest spelling, a key
// longer than MaxKeyBytes) must all leave no lease behind, on this replica
// or in Redis, once the requests are over.
func TestMiddlewareLeavesNoLeaseBehind(t *testing.T) {
	p := startRedis(t)
	client := p.client(t)
	// No renewal runs during the test (the first is due after LeaseTTL/3):
	// the test runs the one that matters itself, below.
	c, err := NewConcurrency(Config{Client: client, Replicas: 1, Timeout: 250 * time.Millisecond, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mw, err := ConcurrencyMiddleware(MiddlewareConfig{
		Concurrency: c,
		Key:         func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Limit:       2,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("handler bug")
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics
	srv.Start()
	defer srv.Close()
	keys := []string{"a:b", "{tenant}", "c:{x}:q:0", "sha256:00", strings.Repeat("k", 500), "ü\u00a0"}
	var wg sync.WaitGroup
	for _, key := range keys {
		for _, path := range []string{"/panic", "/slow", "/"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
				req.Header.Set("X-Tenant", key)
				if resp, err := srv.Client().Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}
	wg.Wait()
	// The clients give up after 50 ms, but the server may still be running
	// their requests (in Acquire, in the handler, or in Release's call to
	// Redis), and InFlightLocal is 0 both before Acquire grants a lease and
	// once Release has begun. Close returns when every request's handler,
	// and so the middleware's synchronous Release, has returned.
	srv.Close()
	if n := c.InFlightLocal(); n != 0 {
		t.Errorf("%d leases held on this replica after every request ended", n)
	}
	// A call to Redis abandoned at its time budget, or by its caller
	// hanging up, may still have written its lease (the acquire script ran
	// late): Acquire documents that the next renewal removes it. Run that
	// renewal now; whatever it leaves has outlived its request.
	c.renew()
	for _, key := range keys {
		if n, err := client.ZCard(t.Context(), c.key(key)).Result(); err != nil || n != 0 {
			t.Errorf("key %.20q: %d leases in Redis (%v) after every request ended", key, n, err)
		}
	}
}
