package echo_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
		{"admitted", build(&shedecho.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}}), 200},
		{"admitted+ratelimit", build(&shedecho.Config{
			Options: shedhttp.Options{
				Limiter:    benchLimiter(b, shed.MaxLimit),
				RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e12, Burst: 1 << 30}},
			},
		}), 200},
		{"rejected503", build(&shedecho.Config{Options: shedhttp.Options{Limiter: full}}), 503},
		{"rejected503+handler", build(&shedecho.Config{
			Options: shedhttp.Options{Limiter: full},
			RejectHandler: func(c echov4.Context, rej shedhttp.Rejection) error {
				return c.NoContent(rej.Status)
			},
		}), 503},
		{"ratelimited429", build(&shedecho.Config{
			Options: shedhttp.Options{
				Limiter:    benchLimiter(b, shed.MaxLimit),
				RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 0.01, Burst: 1}},
			},
			// Retry-After 100 s
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

// h1Writer has the method set of net/http's HTTP/1 ResponseWriter (it can
// be hijacked, read from, given deadlines...): what Echo's Response wraps
// on every HTTP/1.x request, unlike discardWriter.
type h1Writer struct{ discardWriter }

func (w *h1Writer) Flush()                   {}
func (w *h1Writer) FlushError() error        { return nil }
func (w *h1Writer) CloseNotify() <-chan bool { return nil }
func (w *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (w *h1Writer) ReadFrom(src io.Reader) (int64, error) { return io.Copy(io.Discard, src) }
func (w *h1Writer) WriteString(s string) (int, error)     { return len(s), nil }
func (w *h1Writer) SetReadDeadline(time.Time) error       { return nil }
func (w *h1Writer) SetWriteDeadline(time.Time) error      { return nil }
func (w *h1Writer) EnableFullDuplex() error               { return nil }

// rewindBody is a request body that the benchmark rewinds per request.
// Like net/http's, it has only Read and Close (no WriteTo for io.Copy).
type rewindBody struct{ r strings.Reader }

func (b *rewindBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (*rewindBody) Close() error                 { return nil }
func (b *rewindBody) Reset(s string)             { b.r.Reset(s) }

// BenchmarkOverheadHTTP1 is BenchmarkOverhead with an HTTP/1 writer, for a
// GET and for a POST whose handler reads a small JSON body: the requests a
// real HTTP/1.1 server sees.
func BenchmarkOverheadHTTP1(b *testing.B) {
	payload := `{"id":12345,"items":["a","b","c"],"note":"a small JSON request body"}`
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
		e.POST("/", func(c echov4.Context) error {
			io.Copy(io.Discard, c.Request().Body)
			return c.String(http.StatusOK, "ok")
		})
		return e
	}
	bare, admitted := build(nil), build(&shedecho.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}})
	for _, v := range []struct {
		name string
		e    *echov4.Echo
		post bool
	}{
		{"bare/get", bare, false},
		{"admitted/get", admitted, false},
		{"bare/post", bare, true},
		{"admitted/post", admitted, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			rb := &rewindBody{}
			if v.post {
				r = httptest.NewRequest(http.MethodPost, "/", rb)
				r.ContentLength = int64(len(payload))
			}
			w := &h1Writer{discardWriter{h: http.Header{}}}
			b.ReportAllocs()
			for b.Loop() {
				rb.Reset(payload)
				v.e.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}

// h2Writer has the method set of net/http's HTTP/2 ResponseWriter (it can
// push, and cannot be hijacked nor read from).
type h2Writer struct{ discardWriter }

func (w *h2Writer) Flush()                               {}
func (w *h2Writer) FlushError() error                    { return nil }
func (w *h2Writer) CloseNotify() <-chan bool             { return nil }
func (w *h2Writer) Push(string, *http.PushOptions) error { return http.ErrNotSupported }
func (w *h2Writer) WriteString(s string) (int, error)    { return len(s), nil }
func (w *h2Writer) SetReadDeadline(time.Time) error      { return nil }
func (w *h2Writer) SetWriteDeadline(time.Time) error     { return nil }
func (w *h2Writer) EnableFullDuplex() error              { return nil }

// BenchmarkOverheadHTTP2 is BenchmarkOverhead with an HTTP/2 writer, which
// the middleware wraps to see the status a Flush sends.
func BenchmarkOverheadHTTP2(b *testing.B) {
	for _, v := range servers(b)[:2] { // bare, admitted
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			w := &h2Writer{discardWriter{h: http.Header{}}}
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
