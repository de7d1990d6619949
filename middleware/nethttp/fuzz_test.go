package nethttp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// serveRequestSeeds are the seed requests of FuzzServeRequest.
var serveRequestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /api/x HTTP/1.1\r\nHost: a\r\nX-Class: interactive\r\nX-Tenant: t1\r\n\r\n",
	"POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Cost: 3\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nshort",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Cost: 99999999999999999999\r\nX-Timeout-Ms: -5\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Cost: 101\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Class: interactive\r\nX-Class: batch\r\nX-Tenant: a\r\nX-Tenant: b\r\n\r\n",
	"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"HEAD / HTTP/1.1\r\nHost: a\r\nX-Timeout-Ms: 1\r\n\r\n",
}

// FuzzServeRequest feeds raw HTTP/1.1 requests, as a client sends them,
// through the middleware (in process) with a trusted class header, a
// trusted tenant header for the rate limit, a body limit, and a classifier
// that reads the cost and a timeout from headers as applications do.
// Whatever the request, the answer is the handler's 200 or a sanitized
// problem (413, 429, 503), and afterwards nothing is in flight and every
// admission was released.
func FuzzServeRequest(f *testing.F) {
	for _, s := range serveRequestSeeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(4))
	}
	f.Fuzz(func(t *testing.T, raw []byte, held uint8) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http would answer 400 before any handler runs
		}
		r.RemoteAddr = "192.0.2.1:1234"
		l := newFuzzLimiter(t)
		mw := newFuzzMiddleware(t, l)
		permits := holdPermits(l, int(held%5))
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			io.WriteString(w, "ok")
		}))
		for i := range 2 { // twice: the second may be rate limited
			w := httptest.NewRecorder()
			req := r.Clone(r.Context())
			if i == 1 {
				req.Body = http.NoBody
			}
			h.ServeHTTP(w, req)
			checkFuzzAnswer(t, req, w)
		}
		for i := range permits {
			permits[i].Release(shed.Ignored)
		}
		checkAllReleased(t, l)
	})
}

// newFuzzLimiter is a small limiter with a cost cap, a protected class
// with a short queue, and a default batch class.
func newFuzzLimiter(t *testing.T) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{
		Limit:   4,
		MaxCost: 100,
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 1, MaxWait: time.Millisecond},
			{Name: "batch"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newFuzzMiddleware trusts the X-Class and X-Tenant headers, rate limits
// batch on a fixed clock, limits bodies to 64 bytes, and takes the cost
// and a timeout from the X-Cost and X-Timeout-Ms headers.
func newFuzzMiddleware(t *testing.T, l *shed.Limiter) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{
			Limiter:      l,
			Routes:       map[string]string{"/api/": "interactive"},
			ClassHeader:  "X-Class",
			KeyHeader:    "X-Tenant",
			RateLimits:   map[string]shedhttp.RateLimit{"batch": {Rate: 1, Burst: 1}},
			MaxBodyBytes: 64,
			SkipPaths:    []string{"/healthz"},
			Clock:        mwClock(),
		},
		Classify: func(r *http.Request, def shedhttp.Classification) shedhttp.Classification {
			if n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64); err == nil && n >= 0 {
				def.Cost = n
			}
			if ms, err := strconv.Atoi(r.Header.Get("X-Timeout-Ms")); err == nil {
				def.Deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
			}
			return def
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// holdPermits takes up to n batch permits so that the fuzzed request may
// find the limiter partly or wholly busy.
func holdPermits(l *shed.Limiter, n int) []shed.Permit {
	var permits []shed.Permit
	for range n {
		if p, err := l.TryAcquire(shed.Request{Class: 1}); err == nil {
			permits = append(permits, p)
		}
	}
	return permits
}

// checkFuzzAnswer checks that w holds the handler's 200 or its own 413,
// or a sanitized problem: 413, or 429 or 503 with Retry-After.
func checkFuzzAnswer(t *testing.T, req *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	switch w.Code {
	case 200:
	case 413, 429, 503:
		problem := w.Header().Get("Content-Type") == shedhttp.ProblemContentType
		if !problem {
			if w.Code == 413 {
				return // the handler's own 413: the body went past the limit
			}
			t.Fatalf("%d with content type %q", w.Code, w.Header().Get("Content-Type"))
		}
		if req.Method != http.MethodHead {
			var p map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || len(p) != 4 || p["status"] != float64(w.Code) {
				t.Fatalf("%d: body %q (%v)", w.Code, w.Body, err)
			}
		}
		if (w.Code == 429 || w.Code == 503) && w.Header().Get("Retry-After") == "" {
			t.Fatalf("%d without Retry-After", w.Code)
		}
	default:
		t.Fatalf("status %d, body %q", w.Code, w.Body)
	}
}

// checkAllReleased checks that nothing is left in flight or queued and
// that every admission of every class was released.
func checkAllReleased(t *testing.T, l *shed.Limiter) {
	t.Helper()
	snap := l.Snapshot()
	if snap.InFlight != 0 || snap.InFlightCost != 0 || snap.Queued != 0 {
		t.Fatalf("left behind: in flight %d, cost %d, queued %d", snap.InFlight, snap.InFlightCost, snap.Queued)
	}
	for _, c := range snap.Classes {
		if c.Admitted != c.Released[0]+c.Released[1]+c.Released[2] {
			t.Fatalf("class %s: admitted %d, released %v", c.Name, c.Admitted, c.Released)
		}
	}
}

// mwClock is a fixed clock for rate limiting.
func mwClock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { return t }
}
