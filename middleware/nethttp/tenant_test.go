package nethttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestTenantFairShare runs a real server on 127.0.0.1 with a limit of 6
// and TenantFromKey: one tenant sends from ten connections at once, two
// quiet tenants one request at a time, 5 ms apart. The quiet tenants are
// admitted nearly always (at least 80%: 39 or 40 of 40 when measured,
// against 21 to 28 without TenantFromKey); the noisy one gets 503
// tenant_share (with Retry-After and a problem body that names nothing
// internal). Bounded: 40 requests per quiet tenant, 20 s at most; goleak
// (TestMain) checks that nothing is left running.
func TestTenantFairShare(t *testing.T) {
	const limit, perQuiet = 6, 40
	var quietRej [shed.NumReasons]atomic.Int64
	l, err := shed.New(shed.Config{Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inflight := map[string]int{}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant")
		mu.Lock()
		inflight[tenant]++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the work
		mu.Lock()
		inflight[tenant]--
		mu.Unlock()
	})
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l, KeyHeader: "X-Tenant", TenantFromKey: true},
		Reject: func(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) {
			if r.Header.Get("X-Tenant") != "noisy" {
				quietRej[rej.Reason].Add(1)
			}
			shedhttp.WriteProblem(w, r, rej)
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(app))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	get := func(tenant string) (int, http.Header, []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}
	var stop atomic.Bool
	var noisyOK, noisy503 atomic.Int64
	var problem atomic.Pointer[[]byte]
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				switch status, h, body := get("noisy"); status {
				case http.StatusOK:
					noisyOK.Add(1)
				case http.StatusServiceUnavailable:
					noisy503.Add(1)
					if h.Get("Retry-After") != "" {
						problem.Store(&body)
					}
				}
			}
		}()
	}
	var quietOK [2]atomic.Int64
	var qwg sync.WaitGroup
	for i, q := range []string{"q1", "q2"} {
		qwg.Add(1)
		go func() {
			defer qwg.Done()
			time.Sleep(20 * time.Millisecond) // the noisy tenant first
			for range perQuiet {
				if status, _, _ := get(q); status == http.StatusOK {
					quietOK[i].Add(1)
				}
				time.Sleep(5 * time.Millisecond) // a quiet tenant paces itself
			}
		}()
	}
	qwg.Wait()
	stop.Store(true)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the test ran out of time")
	}

	for i := range quietOK {
		if n := quietOK[i].Load(); n < perQuiet*8/10 {
			t.Errorf("quiet tenant %d: %d of %d admitted", i+1, n, perQuiet)
		}
	}
	snap := l.Snapshot()
	if snap.Classes[0].Rejected[shed.ReasonTenantShare] == 0 || noisy503.Load() == 0 {
		t.Errorf("the noisy tenant was never held to its share: %d ok, %d 503, rejections %v", noisyOK.Load(), noisy503.Load(), snap.Classes[0].Rejected)
	}
	if b := problem.Load(); b != nil {
		var p map[string]any
		if err := json.Unmarshal(*b, &p); err != nil || p["status"] != float64(503) {
			t.Errorf("503 body %q", *b)
		}
		for _, f := range []string{"tenant", "noisy", "share", strconv.Itoa(limit)} {
			if strings.Contains(strings.ToLower(string(*b)), f) {
				t.Errorf("503 body %q exposes %q", *b, f)
			}
		}
	} else {
		t.Error("no 503 with Retry-After")
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for s := l.Snapshot(); s.InFlight != 0 || s.Tenants != 0; s = l.Snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("after the run: %d in flight, %d tenants tracked", s.InFlight, s.Tenants)
		}
		time.Sleep(time.Millisecond)
	}
	var qr [shed.NumReasons]int64
	for i := range qr {
		qr[i] = quietRej[i].Load()
	}
	t.Logf("rejections %v, of quiet tenants %v", snap.Classes[0].Rejected, qr)
	t.Logf("noisy: %d ok, %d 503; quiet: %d, %d of %d", noisyOK.Load(), noisy503.Load(), quietOK[0].Load(), quietOK[1].Load(), perQuiet)
}

// TestTenantFromClassify: Classify may set the tenant itself, and without
// TenantFromKey the key is no tenant.
func TestTenantFromClassify(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(int64(l.Snapshot().Tenants))
	})
	for _, tc := range []struct {
		name     string
		cfg      nethttp.Config
		want     int64
		classify func(*http.Request, shedhttp.Classification) shedhttp.Classification
	}{
		{"no tenant by default", nethttp.Config{Options: shedhttp.Options{KeyHeader: "X-Tenant"}}, 0, nil},
		{"from the key", nethttp.Config{Options: shedhttp.Options{KeyHeader: "X-Tenant", TenantFromKey: true}}, 1, nil},
		{"from the address", nethttp.Config{Options: shedhttp.Options{TenantFromKey: true}}, 1, nil},
		{"from Classify", nethttp.Config{}, 1, func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			def.Tenant = "acme"
			return def
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Limiter, cfg.Classify = l, tc.classify
			mw, err := nethttp.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("X-Tenant", "a")
			mw(app).ServeHTTP(rec, req)
			if rec.Code != 200 || seen.Load() != tc.want {
				t.Fatalf("status %d, %d tenants tracked while serving, want %d", rec.Code, seen.Load(), tc.want)
			}
			if n := l.Snapshot().Tenants; n != 0 {
				t.Fatalf("%d tenants tracked afterwards", n)
			}
		})
	}
}
