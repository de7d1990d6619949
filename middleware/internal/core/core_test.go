package core_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

func limiter(t testing.TB) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{
		Limit: 4,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 2, MaxWait: time.Second},
			{Name: "batch"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The no-retry header must be the one retrybudget's Transport honours.
func TestProtocolMatchesRetryBudget(t *testing.T) {
	if core.NoRetryHeader != retrybudget.NoRetryHeader || core.NoRetryValue != retrybudget.NoRetryValue {
		t.Errorf("core has %s: %s, retrybudget %s: %s", core.NoRetryHeader, core.NoRetryValue, retrybudget.NoRetryHeader, retrybudget.NoRetryValue)
	}
	if core.AttemptHeader != retrybudget.AttemptHeader {
		t.Errorf("core reads the attempt from %s, retrybudget sends %s", core.AttemptHeader, retrybudget.AttemptHeader)
	}
	if core.NoRetryHeader != http.CanonicalHeaderKey(core.NoRetryHeader) {
		t.Errorf("%q is not canonical: it is assigned to http.Header directly", core.NoRetryHeader)
	}
}

// requestsOnly is a KeyStore that counts requests only.
type requestsOnly struct{}

func (requestsOnly) AllowAt(time.Time, shed.Class, string, shedhttp.RateLimit) (bool, time.Duration) {
	return true, 0
}

func TestConfigErrors(t *testing.T) {
	l := limiter(t)
	for _, tc := range []struct {
		name  string
		cfg   core.Config
		field string
	}{
		{"no limiter", core.Config{}, "Limiter"},
		{"unknown default class", core.Config{Limiter: l, DefaultClass: "vip"}, "DefaultClass"},
		{"unknown route class", core.Config{Limiter: l, Routes: map[string]string{"/a": "vip"}}, `Routes["/a"]`},
		{"empty route", core.Config{Limiter: l, Routes: map[string]string{"": "batch"}}, `Routes[""]`},
		{"bad class header", core.Config{Limiter: l, ClassHeader: "X Priority"}, "ClassHeader"},
		{"bad key header", core.Config{Limiter: l, KeyHeader: "X-Tenant:"}, "KeyHeader"},
		{"unknown rate class", core.Config{Limiter: l, RateLimits: map[string]shedhttp.RateLimit{"vip": {Rate: 1, Burst: 1}}}, `RateLimits["vip"]`},
		{"zero rate", core.Config{Limiter: l, RateLimits: map[string]shedhttp.RateLimit{"batch": {Burst: 1}}}, `RateLimits["batch"]: rate`},
		{"zero burst", core.Config{Limiter: l, RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1}}}, `RateLimits["batch"]: burst`},
		{"negative body", core.Config{Limiter: l, MaxBodyBytes: -1}, "MaxBodyBytes"},
		{"cost on a store that cannot charge it", core.Config{Limiter: l, RateLimitCost: true, KeyStore: requestsOnly{},
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 1}}}, "RateLimitCost"},
		{"empty skip path", core.Config{Limiter: l, SkipPaths: []string{"/ok", ""}}, "SkipPaths[1]"},
		{"empty skip method", core.Config{Limiter: l, SkipMethods: []string{""}}, "SkipMethods[0]"},
		// Request paths always start with "/": an entry without one would
		// never match, and the endpoint the user meant to skip is shed.
		{"skip path without slash", core.Config{Limiter: l, SkipPaths: []string{"/metrics", "/ok", "healthz"}}, "SkipPaths[2]"},
		{"skip path as a URL", core.Config{Limiter: l, SkipPaths: []string{"http://localhost/healthz"}}, "SkipPaths[0]"},
		{"skip path with a leading space", core.Config{Limiter: l, SkipPaths: []string{" /healthz"}}, "SkipPaths[0]"},
		{"route without slash", core.Config{Limiter: l, Routes: map[string]string{"/ok": "batch", "api/": "interactive"}}, `Routes["api/"]`},
		// net/http refuses a request whose method is not a token.
		{"skip method with a space", core.Config{Limiter: l, SkipMethods: []string{"GET", "OPTIONS "}}, "SkipMethods[1]"},
		{"skip method list", core.Config{Limiter: l, SkipMethods: []string{"GET,HEAD"}}, "SkipMethods[0]"},
		{"negative IPv6 prefix", core.Config{Limiter: l, IPv6KeyPrefix: -1}, "IPv6KeyPrefix"},
		{"IPv6 prefix too long", core.Config{Limiter: l, IPv6KeyPrefix: 129}, "IPv6KeyPrefix"},
		{"bad deadline header", core.Config{Limiter: l, DeadlineHeader: "grpc timeout"}, "DeadlineHeader"},
		{"negative max deadline", core.Config{Limiter: l, DeadlineHeader: "grpc-timeout", MaxDeadline: -1}, "MaxDeadline"},
		{"max deadline without header", core.Config{Limiter: l, MaxDeadline: time.Second}, "MaxDeadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := core.New(tc.cfg)
			if !errors.Is(err, shedhttp.ErrInvalidConfig) {
				t.Fatalf("error %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), ": "+tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	for _, cfg := range []core.Config{
		{Limiter: l, RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 1}}},
		// Duplicates are harmless; "/" is a path like any other.
		{Limiter: l, SkipPaths: []string{"/", "/healthz", "/healthz", "/a%2Fb"}, SkipMethods: []string{"OPTIONS", "OPTIONS", "M-SEARCH"}},
		{Limiter: l, Routes: map[string]string{"/": "batch", "/users/:id": "interactive"}},
	} {
		if _, err := core.New(cfg); err != nil {
			t.Errorf("valid config %+v: %v", cfg, err)
		}
	}
}

func TestClassify(t *testing.T) {
	l := limiter(t)
	e, err := core.New(core.Config{
		Limiter:     l,
		Routes:      map[string]string{"/api/": "interactive", "/api/bulk": "batch", "/users/:id": "interactive"},
		ClassHeader: "x-class",
		KeyHeader:   "x-tenant",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, route string
		header      http.Header
		class       shed.Class
		key         string
	}{
		{path: "/", class: 1},
		{path: "/api/x", class: 0},
		{path: "/api/bulk/x", class: 1},
		{path: "/api", class: 1},
		{path: "/%61pi/x", class: 1},             // the raw path has no /api/ prefix
		{path: "/api%2Fx", class: 1},             // an encoded slash is not a separator
		{path: "/api/group%2Fproject", class: 0}, // after the prefix it is
		{path: "/users/7", route: "/users/:id", class: 0},
		{path: "/users/7", route: "/other", class: 1},
		{path: "/", header: http.Header{"X-Class": {"interactive"}}, class: 0},
		{path: "/api/x", header: http.Header{"X-Class": {"batch"}}, class: 1},
		{path: "/", header: http.Header{"X-Class": {"nope"}}, class: 1},
		{path: "/", header: http.Header{"X-Class": {"interactive", "interactive"}}, class: 1},
		{path: "/", header: http.Header{"X-Tenant": {"acme"}}, class: 1, key: "acme"},
		{path: "/", header: http.Header{"X-Tenant": {"a", "b"}}, class: 1},
		{path: "/", header: http.Header{"X-Tenant": {""}}, class: 1},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.Header = tc.header
		if r.Header == nil {
			r.Header = http.Header{}
		}
		cl := e.Classify(r, tc.route)
		if cl.Class != tc.class || cl.Key != tc.key {
			t.Errorf("%s (route %q, %v): class %d key %q, want %d %q", tc.path, tc.route, tc.header, cl.Class, cl.Key, tc.class, tc.key)
		}
	}
}

// TestSkipRawPath: a skipped path matches only as the client sent it.
func TestSkipRawPath(t *testing.T) {
	e, err := core.New(core.Config{Limiter: limiter(t), SkipPaths: []string{"/healthz", "/a/b"}})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"/healthz": true, "/a/b": true,
		"/%68ealthz": false, "/health%7a": false, "/a%2Fb": false, "/a%2fb": false, "/healthz/": false, "/a/%62": false,
	} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if got := e.Skip(r); got != want {
			t.Errorf("Skip(%s) = %v, want %v (Path %q, RawPath %q)", path, got, want, r.URL.Path, r.URL.RawPath)
		}
		if got := core.RequestPath(r); got != path {
			t.Errorf("RequestPath(%s) = %q", path, got)
		}
	}
}

func TestAddrKey(t *testing.T) {
	for _, tc := range []struct {
		host string
		bits int
		want string
	}{
		{"192.0.2.1", 64, "192.0.2.1"},
		{"192.0.2.1", 128, "192.0.2.1"},
		{"::ffff:192.0.2.1", 64, "192.0.2.1"},
		{"::ffff:c000:201", 64, "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:DB8:1:2::ffff", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 56, "2001:db8:1::/56"},
		{"2001:db8:1:2ff:3:4:5:6", 56, "2001:db8:1:200::/56"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6/128"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"fe80::1%eth0", 128, "fe80::1/128"},
		{"::1", 64, "::/64"},
		// Stateless translation (64:ff9b::/96): each IPv4 client by itself.
		{"64:ff9b::c000:201", 64, "192.0.2.1"},
		{"64:ff9b::c633:6407", 64, "198.51.100.7"},
		{"64:ff9b:0:0:1::1", 64, "64:ff9b::/64"}, // outside the /96
		{"::", 64, "::/64"},
		// Not an IP address: the key is the host, unchanged.
		{"", 64, ""},
		{"@", 64, "@"},
		{"not-an-ip", 64, "not-an-ip"},
		{"[2001:db8::1]", 64, "[2001:db8::1]"},
		{"2001:db8::1:80:", 64, "2001:db8::1:80:"},
		{"192.0.2.1:80", 64, "192.0.2.1:80"},
		{"::ffff:192.0.2.300", 64, "::ffff:192.0.2.300"},
		{"fe80::1%", 64, "fe80::1%"},
	} {
		if got := core.AddrKey(tc.host, tc.bits); got != tc.want {
			t.Errorf("AddrKey(%q, %d) = %q, want %q", tc.host, tc.bits, got, tc.want)
		}
	}
	e, err := core.New(core.Config{Limiter: limiter(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.AddrKey("2001:db8:1:2::7"); got != "2001:db8:1:2::/64" {
		t.Errorf("default prefix: %q, want the /64", got)
	}
	if n := testing.AllocsPerRun(100, func() { e.AddrKey(core.RemoteHost("192.0.2.1:4711")) }); n != 0 {
		t.Errorf("an IPv4 key allocates %v times", n)
	}
}

// TestReleaseClientBound: time the handler spent blocked reading the
// request body is the client's. A request that missed its deadline only
// because of it, or that spent most of its time in it, is released
// Ignored; one whose own work missed the deadline or took the time keeps
// its outcome. The margins (tens of milliseconds against microseconds)
// make the cases independent of the machine's speed.
func TestReleaseClientBound(t *testing.T) {
	const d = 50 * time.Millisecond
	slowBody := func(ctx context.Context, untilDeadline bool) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			if untilDeadline {
				<-ctx.Done() // the client sends nothing until the deadline passed
			} else {
				time.Sleep(d)
			}
			pw.Write([]byte("late"))
			pw.Close()
		}()
		return pr
	}
	for _, tc := range []struct {
		name     string
		deadline bool
		slow     bool          // the body arrives slowly
		work     time.Duration // the handler's own work after reading the body
		status   int
		want     shed.Outcome
	}{
		{"deadline missed waiting for the client", true, true, 0, 200, shed.Ignored},
		{"deadline missed working", true, false, 2 * d, 200, shed.Dropped},
		{"success spent waiting for the client", false, true, 0, 200, shed.Ignored},
		{"success spent working", false, false, d, 200, shed.Success},
		{"503 spent waiting for the client", false, true, 0, 503, shed.Ignored},
		{"503 spent working", false, false, d, 503, shed.Dropped},
		{"404 stays ignored", false, true, 0, 404, shed.Ignored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter(t)
			e, err := core.New(core.Config{Limiter: l})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.deadline {
				ctx, cancel = context.WithTimeout(ctx, d)
			}
			defer cancel()
			var body io.Reader = strings.NewReader("fast")
			if tc.slow {
				body = slowBody(ctx, tc.deadline)
			}
			r := httptest.NewRequest(http.MethodPost, "/", body).WithContext(ctx)
			st, rej := e.Admit(r, shedhttp.Classification{Class: 1})
			if st == nil {
				t.Fatalf("not admitted: %+v", rej)
			}
			if _, err := io.ReadAll(st.WatchBody(r.Body)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.work)
			if tc.deadline {
				<-ctx.Done()
			}
			e.Release(st, r, tc.status)
			if got := l.Snapshot().Classes[1].Released; got[tc.want] != 1 {
				t.Errorf("released %v, want one %v", got, tc.want)
			}
		})
	}
}

// TestReleaseWhileBodyRead: the deadline passes while a goroutine of the
// handler is still blocked reading the body and the handler gives up:
// the read in progress counts as waiting for the client.
func TestReleaseWhileBodyRead(t *testing.T) {
	l := limiter(t)
	e, err := core.New(core.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	pr, pw := io.Pipe()
	r := httptest.NewRequest(http.MethodPost, "/", pr).WithContext(ctx)
	st, rej := e.Admit(r, shedhttp.Classification{Class: 1})
	if st == nil {
		t.Fatalf("not admitted: %+v", rej)
	}
	body := st.WatchBody(r.Body)
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(body)
		read <- err
	}()
	<-ctx.Done()
	e.Release(st, r, http.StatusServiceUnavailable)
	pw.CloseWithError(errors.New("client gone"))
	<-read
	if got := l.Snapshot().Classes[1].Released; got[shed.Ignored] != 1 {
		t.Errorf("released %v, want one ignored", got)
	}
}

func TestRemoteHost(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:1234":    "192.0.2.1",
		"[2001:db8::1]:443": "2001:db8::1",
		"192.0.2.1":         "192.0.2.1",
		"":                  "",
		"@":                 "@",
	} {
		if got := core.RemoteHost(in); got != want {
			t.Errorf("RemoteHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRemoteHost: any RemoteAddr gives a part of itself, without panic.
func FuzzRemoteHost(f *testing.F) {
	for _, s := range []string{"192.0.2.1:1234", "[::1]:80", "[::1", "::1", "a:b:c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if h := core.RemoteHost(addr); !strings.Contains(addr, h) {
			t.Errorf("RemoteHost(%q) = %q, not part of the address", addr, h)
		}
	})
}

// FuzzClassifyUntrusted: without a trusted header, no header value a client
// sends changes the class or the key.
func FuzzClassifyUntrusted(f *testing.F) {
	f.Add("X-Priority", "interactive", "/batch")
	f.Add("X-Class", "interactive", "/api/")
	f.Add("X-Forwarded-For", "10.0.0.1", "/")
	l := limiter(f)
	e, err := core.New(core.Config{Limiter: l, Routes: map[string]string{"/api/": "interactive"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, value, path string) {
		r := &http.Request{Method: "GET", URL: httptest.NewRequest("GET", "/", nil).URL, Header: http.Header{}}
		r.URL.Path = path
		want := e.Classify(r, "")
		r.Header[http.CanonicalHeaderKey(name)] = []string{value}
		if got := e.Classify(r, ""); got != want {
			t.Errorf("header %s: %q changed the classification from %+v to %+v", name, value, want, got)
		}
	})
}

type otherKey struct{}

// TestAdmitReasons: every Acquire error becomes the right response.
func TestAdmitReasons(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1, MaxCost: 10, Classes: []shed.ClassConfig{{Name: "q", QueueDepth: 1, MaxWait: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	req := func(ctx context.Context) *http.Request {
		return httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	}
	bg := context.Background()

	_, rej := e.Admit(req(bg), shedhttp.Classification{Class: 3})
	if rej.Status != 500 || !errors.Is(rej.Err, shed.ErrInvalidRequest) || rej.RetryAfter != 0 {
		t.Errorf("unknown class: %+v", rej)
	}
	_, rej = e.Admit(req(bg), shedhttp.Classification{Cost: 11})
	if rej.Status != 413 || rej.Reason != shed.ReasonCostTooLarge || rej.RetryAfter != 0 {
		t.Errorf("cost too large: %+v", rej)
	}
	st, rej := e.Admit(req(bg), shedhttp.Classification{})
	if st == nil {
		t.Fatalf("not admitted: %+v", rej)
	}
	if core.PermitFrom(st) != &st.Permit || core.FromContext(context.WithValue(st, otherKey{}, 1)) != st {
		t.Error("the state is not found through its context")
	}

	// The queue's wait is longer than the request's deadline.
	_, rej = e.Admit(req(bg), shedhttp.Classification{Deadline: time.Now().Add(-time.Second)})
	if rej.Status != 503 || rej.Reason != shed.ReasonDeadline || rej.RetryAfter < time.Second || rej.RetryAfter%time.Second != 0 {
		t.Errorf("deadline: %+v", rej)
	}
	// A context that ended (the client left, or the server cancelled it
	// while the client waits) still gets a 503: never nothing, which
	// net/http would send as an empty 200.
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if st, rej := e.Admit(req(ctx), shedhttp.Classification{}); st != nil || rej.Status != 503 || rej.RetryAfter != time.Second || !errors.Is(rej.Err, context.Canceled) {
		t.Errorf("cancelled: %v %+v", st, rej)
	}
	// A context deadline that passes while queued.
	ctx, cancel = context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	_, rej = e.Admit(req(ctx), shedhttp.Classification{})
	if rej.Status != 503 || rej.RetryAfter < time.Second {
		t.Errorf("deadline while queued: %+v", rej)
	}
	e.Release(st, req(bg), 0)
	if l.InFlight() != 0 {
		t.Errorf("in flight %d", l.InFlight())
	}
	if err := core.Reconcile(bg, 1); !errors.Is(err, shedhttp.ErrNoPermit) {
		t.Errorf("Reconcile without a permit: %v", err)
	}
	if err := core.Reconcile(st, 1); !errors.Is(err, shed.ErrReleased) {
		t.Errorf("Reconcile after release: %v", err)
	}
}

// TestReleaseContext: the request context's state overrides the status.
func TestReleaseContext(t *testing.T) {
	l := limiter(t)
	e, err := core.New(core.Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, tc := range []struct {
		name   string
		ctx    func() context.Context
		status int
		want   shed.Outcome
	}{
		{"ok", context.Background, 200, shed.Success},
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, 200, shed.Ignored},
		{"deadline", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
			cancel()
			return ctx
		}, 200, shed.Dropped},
	} {
		before := l.Snapshot().Classes[1].Released
		p, err := l.TryAcquire(shed.Request{Class: 1})
		if err != nil {
			t.Fatal(err)
		}
		st := &core.State{Context: tc.ctx(), Permit: p}
		e.Release(st, r, tc.status)
		after := l.Snapshot().Classes[1].Released
		if after[tc.want] != before[tc.want]+1 {
			t.Errorf("%s: released %v -> %v, want one more %v", tc.name, before, after, tc.want)
		}
	}
}

// TestAdmitDeadline: a classification deadline earlier than the request
// context's bounds the handler's context; a later one changes nothing (the
// server's deadline is never extended). The context's own deadline is
// released only after the permit's outcome was read from it: a request
// that finished in time is a Success, not a cancellation.
func TestAdmitDeadline(t *testing.T) {
	l := limiter(t)
	e, err := core.New(core.Config{Limiter: l, DeadlineHeader: "Connect-Timeout-Ms", MaxDeadline: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Connect-Timeout-Ms", "60000")
	before := time.Now()
	cl := e.Classify(r, "")
	if cl.Deadline.Before(before.Add(2*time.Second)) || cl.Deadline.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("deadline %v: want MaxDeadline (2 s) from now", cl.Deadline.Sub(before))
	}
	st, rej := e.Admit(r, cl)
	if st == nil {
		t.Fatalf("rejected: %+v", rej)
	}
	if dl, ok := st.Deadline(); !ok || !dl.Equal(cl.Deadline) {
		t.Fatalf("handler context deadline %v, %v; want %v", dl, ok, cl.Deadline)
	}
	e.Release(st, r, 200)
	if st.Err() == nil {
		t.Error("the context's deadline timer was not released")
	}
	if got := l.Snapshot().Classes[1].Released[shed.Success]; got != 1 {
		t.Errorf("%d successes, want 1: the outcome must be read before the context is released", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	own, _ := ctx.Deadline()
	st, _ = e.Admit(r.WithContext(ctx), shedhttp.Classification{Class: 1, Deadline: own.Add(time.Hour)})
	if dl, _ := st.Deadline(); !dl.Equal(own) || st.Context != ctx {
		t.Errorf("a later classification deadline moved the context's: %v, want %v", dl, own)
	}
	e.Release(st, r, 200)
}
