package retrybudget

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a loopback server whose answers are scripted per hit.
type upstream struct {
	srv    *httptest.Server
	hits   atomic.Int64
	conns  atomic.Int64 // new connections accepted
	closed atomic.Int64 // connections closed or hijacked

	mu       sync.Mutex
	attempts []string // AttemptHeader of each hit
	bodies   []string
	headers  []http.Header
}

// newUpstream starts a server that calls answer with the 1-based hit
// number. It is closed when the test ends.
func newUpstream(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(u.hits.Add(1))
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.attempts = append(u.attempts, r.Header.Get(AttemptHeader))
		u.bodies = append(u.bodies, string(body))
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		answer(n, w, r)
	}))
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
		}
	}
	u.srv.Start()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) url() string { return u.srv.URL + "/path" }

func (u *upstream) host() string { return u.srv.Listener.Addr().String() }

func (u *upstream) seenAttempts() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.attempts...)
}

// statuses answers hit n with codes[n-1], and the last code after that.
func statuses(codes ...int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		code := codes[min(n, len(codes))-1]
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}
}

// fakeSleep records the waits and returns at once.
type fakeSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (f *fakeSleep) sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	f.waits = append(f.waits, d)
	f.mu.Unlock()
	return ctx.Err()
}

func (f *fakeSleep) all() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// fakeClock is a TransportConfig.Now that moves only when told to, so a
// test can make an attempt take seconds without waiting for them.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// newFakeClock starts at the real time, so that contexts with a real
// deadline and the fake clock agree on what is left when the test begins.
func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newBase returns a fresh http.Transport whose idle connections are
// closed when the test ends.
func newBase(t *testing.T) *http.Transport {
	base := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(base.CloseIdleConnections)
	return base
}

// testTransport returns a Transport with test-friendly defaults: its own
// base transport, no budget, no breaker, a fake sleep and a fixed jitter
// of 0.5, unless cfg sets them.
func testTransport(t *testing.T, cfg TransportConfig) (*Transport, *fakeSleep) {
	t.Helper()
	fs := &fakeSleep{}
	if cfg.Base == nil {
		cfg.Base = newBase(t)
	}
	if cfg.Budget == nil && cfg.BudgetFor == nil {
		cfg.NoBudget = true
	}
	if b := cfg.Breaker; b.ConsecutiveFailures == 0 && b.OpenTimeout == 0 && b.ReadyToTrip == nil {
		cfg.Breaker.Disabled = true
	}
	if cfg.Sleep == nil {
		cfg.Sleep = fs.sleep
	}
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr, fs
}

// do sends req through tr with a Report attached, reads and closes the
// response body.
func do(t *testing.T, tr http.RoundTripper, req *http.Request) (status int, body string, rep Report, err error) {
	t.Helper()
	req = req.WithContext(WithReport(req.Context(), &rep))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		if resp != nil {
			t.Fatal("RoundTrip returned a response and an error")
		}
		return 0, "", rep, err
	}
	b, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		t.Fatalf("reading the body: %v", rerr)
	}
	return resp.StatusCode, string(b), rep, nil
}

func get(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// trackedBody is a request body that records whether it was closed.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }
