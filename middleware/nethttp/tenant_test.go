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
	f := startFairShare(t, limit)
	stopNoisy := f.floodNoisy()
	f.sendQuiet(perQuiet)
	stopNoisy()
	if f.ctx.Err() != nil {
		t.Fatal("the test ran out of time")
	}

	for i := range f.quietOK {
		if n := f.quietOK[i].Load(); n < perQuiet*8/10 {
			t.Errorf("quiet tenant %d: %d of %d admitted", i+1, n, perQuiet)
		}
	}
	snap := f.l.Snapshot()
	if snap.Classes[0].Rejected[shed.ReasonTenantShare] == 0 || f.noisy503.Load() == 0 {
		t.Errorf("the noisy tenant was never held to its share: %d ok, %d 503, rejections %v", f.noisyOK.Load(), f.noisy503.Load(), snap.Classes[0].Rejected)
	}
	f.checkProblem(t, limit)
	f.waitTenantsGone(t)
	var qr [shed.NumReasons]int64
	for i := range qr {
		qr[i] = f.quietRej[i].Load()
	}
	t.Logf("rejections %v, of quiet tenants %v", snap.Classes[0].Rejected, qr)
	t.Logf("noisy: %d ok, %d 503; quiet: %d, %d of %d", f.noisyOK.Load(), f.noisy503.Load(), f.quietOK[0].Load(), f.quietOK[1].Load(), perQuiet)
}

// fairShare is the server of TestTenantFairShare and what each tenant got
// from it.
type fairShare struct {
	l                 *shed.Limiter
	srv               *httptest.Server
	tr                *http.Transport
	client            *http.Client
	ctx               context.Context // bounds the whole run
	quietRej          [shed.NumReasons]atomic.Int64
	noisyOK, noisy503 atomic.Int64
	problem           atomic.Pointer[[]byte] // a 503 body with Retry-After
	quietOK           [2]atomic.Int64
}

// startFairShare serves a 5 ms handler behind a limit of limit with
// TenantFromKey on X-Tenant, counting the rejections of the quiet tenants.
func startFairShare(t *testing.T, limit int) *fairShare {
	t.Helper()
	f := &fairShare{}
	var err error
	if f.l, err = shed.New(shed.Config{Limit: limit}); err != nil {
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
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: f.l, KeyHeader: "X-Tenant", TenantFromKey: true},
		Reject: func(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) {
			if r.Header.Get("X-Tenant") != "noisy" {
				f.quietRej[rej.Reason].Add(1)
			}
			shedhttp.WriteProblem(w, r, rej)
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(mw(app))
	t.Cleanup(f.srv.Close)
	f.tr = &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(f.tr.CloseIdleConnections)
	f.client = &http.Client{Transport: f.tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	f.ctx = ctx
	return f
}

// get sends one request as tenant; status 0 means it failed.
func (f *fairShare) get(tenant string) (int, http.Header, []byte) {
	req, _ := http.NewRequestWithContext(f.ctx, http.MethodGet, f.srv.URL, nil)
	req.Header.Set("X-Tenant", tenant)
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// floodNoisy sends as the noisy tenant from ten connections at once until
// stop is called, which waits for them.
func (f *fairShare) floodNoisy() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() && f.ctx.Err() == nil {
				switch status, h, body := f.get("noisy"); status {
				case http.StatusOK:
					f.noisyOK.Add(1)
				case http.StatusServiceUnavailable:
					f.noisy503.Add(1)
					if h.Get("Retry-After") != "" {
						f.problem.Store(&body)
					}
				}
			}
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// sendQuiet sends perQuiet requests as each quiet tenant, one at a time,
// and returns when both are done.
func (f *fairShare) sendQuiet(perQuiet int) {
	var wg sync.WaitGroup
	for i, q := range []string{"q1", "q2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond) // the noisy tenant first
			for range perQuiet {
				if status, _, _ := f.get(q); status == http.StatusOK {
					f.quietOK[i].Add(1)
				}
				time.Sleep(5 * time.Millisecond) // a quiet tenant paces itself
			}
		}()
	}
	wg.Wait()
}

// checkProblem checks that the noisy tenant got a 503 with Retry-After
// whose problem body names nothing internal (the tenant, its share, the
// limit).
func (f *fairShare) checkProblem(t *testing.T, limit int) {
	t.Helper()
	b := f.problem.Load()
	if b == nil {
		t.Error("no 503 with Retry-After")
		return
	}
	var p map[string]any
	if err := json.Unmarshal(*b, &p); err != nil || p["status"] != float64(503) {
		t.Errorf("503 body %q", *b)
	}
	for _, s := range []string{"tenant", "noisy", "share", strconv.Itoa(limit)} {
		if strings.Contains(strings.ToLower(string(*b)), s) {
			t.Errorf("503 body %q exposes %q", *b, s)
		}
	}
}

// waitTenantsGone closes the idle connections and waits (5 s at most)
// until nothing is in flight and no tenant is tracked any more.
func (f *fairShare) waitTenantsGone(t *testing.T) {
	t.Helper()
	f.tr.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for s := f.l.Snapshot(); s.InFlight != 0 || s.Tenants != 0; s = f.l.Snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("after the run: %d in flight, %d tenants tracked", s.InFlight, s.Tenants)
		}
		time.Sleep(time.Millisecond)
	}
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
