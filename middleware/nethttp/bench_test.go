package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/felixge/httpsnoop"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// discardWriter is the cheapest ResponseWriter: it keeps one header map
// and drops the body, so that the benchmarks measure the handlers.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Flush()                      {}

var body = []byte("ok")

// app is the bare handler the middleware wraps.
var app = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	w.Write(body)
})

func benchLimiter(b *testing.B, limit int) *shed.Limiter {
	l, err := shed.New(shed.Config{Limit: limit})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// handlers returns the variants measured against the bare handler.
func handlers(b *testing.B) []struct {
	name string
	h    http.Handler
	want int
} {
	mw := func(cfg nethttp.Config) http.Handler {
		m, err := nethttp.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return m(app)
	}
	full := benchLimiter(b, 1)
	full.TryAcquire(shed.Request{}) // held for the whole benchmark: every request is rejected
	return []struct {
		name string
		h    http.Handler
		want int
	}{
		{"bare", app, 200},
		{"admitted", mw(nethttp.Config{Limiter: benchLimiter(b, shed.MaxLimit)}), 200},
		{"admitted+ratelimit", mw(nethttp.Config{
			Limiter:    benchLimiter(b, shed.MaxLimit),
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e12, Burst: 1 << 30}},
		}), 200},
		{"rejected503", mw(nethttp.Config{Limiter: full}), 503},
		{"ratelimited429", mw(nethttp.Config{
			Limiter:    benchLimiter(b, shed.MaxLimit),
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 0.01, Burst: 1}}, // Retry-After 100 s
		}), 429},
	}
}

// BenchmarkOverhead serves in process, one request at a time: compare
// each variant with "bare" from the same run.
func BenchmarkOverhead(b *testing.B) {
	for _, v := range handlers(b) {
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				v.h.ServeHTTP(w, r)
			}
			if w.code != v.want {
				b.Fatalf("status %d, want %d", w.code, v.want)
			}
		})
	}
}

// BenchmarkOverheadParallel is BenchmarkOverhead from GOMAXPROCS
// goroutines sharing the middleware (and its limiter and key store).
func BenchmarkOverheadParallel(b *testing.B) {
	for _, v := range handlers(b) {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					v.h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// BenchmarkSnoopWrap is the part of the overhead that wrapping the
// ResponseWriter with httpsnoop and a status hook costs.
func BenchmarkSnoopWrap(b *testing.B) {
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		status := new(int)
		ww := httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(code int) {
					*status = code
					next(code)
				}
			},
		})
		ww.WriteHeader(200)
	}
}
