package nethttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// TestRetryingClientOnClosedLimit: retrybudget's Transport calls a server
// whose limit is closed, over loopback. Its sleeps move the server's clock,
// so that a retry lands where the probe schedule puts it. With the
// server's no-retry header (the default) it makes one attempt; without
// it, it waits at least the Retry-After between attempts and stops at
// MaxAttempts, and its caller reads the last 503 unless an attempt was the
// probe, which the handler really served.
func TestRetryingClientOnClosedLimit(t *testing.T) {
	const maxAttempts = 4
	for _, tt := range []struct {
		name       string
		noHeader   bool          // the server's DisableNoRetryHeader
		every      time.Duration // the probe interval
		wantTries  int
		wantStatus int
	}{
		{"no-retry header", false, 2 * time.Second, 1, 503},
		{"retries never reach the probe", true, time.Hour, maxAttempts, 503},
		{"a retry is the probe", true, 2 * time.Second, 3, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := mwtest.NewFakeClock()
			src := mwtest.NewClosedSource(clk.Now(), tt.every)
			l, err := shed.New(shed.Config{Source: src, Clock: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			var ran, seen atomic.Int64
			mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l, DisableNoRetryHeader: tt.noHeader}})
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran.Add(1)
				io.WriteString(w, "served")
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Add(1)
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			var mu sync.Mutex
			var waits []time.Duration
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{
				Base: base, MaxAttempts: maxAttempts, NoBudget: true,
				Breaker: retrybudget.BreakerConfig{Disabled: true},
				Now:     clk.Now, Rand: func() float64 { return 0.5 },
				Sleep: func(ctx context.Context, d time.Duration) error {
					mu.Lock()
					waits = append(waits, d)
					mu.Unlock()
					clk.Advance(d)
					return ctx.Err()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			resp, body, err := mwtest.Get(t, &http.Client{Transport: tr}, context.Background(), srv.URL+"/", nil)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || seen.Load() != int64(tt.wantTries) {
				t.Fatalf("status %d (%q) after %d attempts, want %d after %d", resp.StatusCode, body, seen.Load(), tt.wantStatus, tt.wantTries)
			}
			// A 200 is the probe, which the handler served; nothing else ran.
			wantRan := int64(0)
			if tt.wantStatus == http.StatusOK {
				wantRan = 1
			}
			if ran.Load() != wantRan || (wantRan == 1 && string(body) != "served") {
				t.Fatalf("the handler ran %d times (body %q), want %d", ran.Load(), body, wantRan)
			}
			for i, d := range waits {
				if d < time.Second {
					t.Errorf("wait %d was %v, shorter than the Retry-After of 1 s", i, d)
				}
			}
		})
	}
}
