package echo_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	echov4 "github.com/labstack/echo/v4"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
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

func benchLimiter(b *testing.B, limit int) *shed.Limiter {
	l, err := shed.New(shed.Config{Limit: limit})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// servers returns an Echo instance per variant; "bare" has no middleware.
func servers(b *testing.B) []struct {
	name string
	e    *echov4.Echo
	want int
} {
	build := func(cfg *shedecho.Config) *echov4.Echo {
		e := newEcho()
		if cfg != nil {
			mw, err := shedecho.New(*cfg)
			if err != nil {
				b.Fatal(err)
			}
			e.Use(mw)
		}
		e.GET("/", func(c echov4.Context) error { return c.String(http.StatusOK, "ok") })
		return e
	}
	full := benchLimiter(b, 1)
	full.TryAcquire(shed.Request{}) // held for the whole benchmark: every request is rejected
	return []struct {
		name string
		e    *echov4.Echo
		want int
	}{
		{"bare", build(nil), 200},
		{"admitted", build(&shedecho.Config{Limiter: benchLimiter(b, shed.MaxLimit)}), 200},
		{"admitted+ratelimit", build(&shedecho.Config{
			Limiter:    benchLimiter(b, shed.MaxLimit),
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e12, Burst: 1 << 30}},
		}), 200},
		{"rejected503", build(&shedecho.Config{Limiter: full}), 503},
		{"ratelimited429", build(&shedecho.Config{
			Limiter:    benchLimiter(b, shed.MaxLimit),
			RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 0.01, Burst: 1}}, // Retry-After 100 s
		}), 429},
	}
}

// BenchmarkOverhead serves in process, one request at a time: compare
// each variant with "bare" from the same run.
func BenchmarkOverhead(b *testing.B) {
	for _, v := range servers(b) {
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				v.e.ServeHTTP(w, r)
			}
			if w.code != v.want {
				b.Fatalf("status %d, want %d", w.code, v.want)
			}
		})
	}
}

// BenchmarkOverheadParallel is BenchmarkOverhead from GOMAXPROCS
// goroutines sharing the Echo instance and its middleware.
func BenchmarkOverheadParallel(b *testing.B) {
	for _, v := range servers(b) {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					v.e.ServeHTTP(w, r)
				}
			})
		})
	}
}
