package nethttp_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
		{"admitted", mw(nethttp.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}}), 200},
		{"admitted+ratelimit", mw(nethttp.Config{
			Options: shedhttp.Options{
				Limiter:    benchLimiter(b, shed.MaxLimit),
				RateLimits: map[string]shedhttp.RateLimit{"default": {Rate: 1e12, Burst: 1 << 30}},
			},
		}), 200},
		{"rejected503", mw(nethttp.Config{Options: shedhttp.Options{Limiter: full}}), 503},
		{"ratelimited429", mw(nethttp.Config{
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

// h1Writer has the method set of net/http's HTTP/1 ResponseWriter (it can
// be hijacked, read from, given deadlines...): what the middleware wraps
// on every HTTP/1.x request, unlike discardWriter.
type h1Writer struct{ discardWriter }

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

// h2Writer has the method set of net/http's HTTP/2 ResponseWriter (it can
// push, and cannot be hijacked or read from).
type h2Writer struct{ discardWriter }

func (w *h2Writer) FlushError() error                    { return nil }
func (w *h2Writer) CloseNotify() <-chan bool             { return nil }
func (w *h2Writer) Push(string, *http.PushOptions) error { return http.ErrNotSupported }
func (w *h2Writer) WriteString(s string) (int, error)    { return len(s), nil }
func (w *h2Writer) SetReadDeadline(time.Time) error      { return nil }
func (w *h2Writer) SetWriteDeadline(time.Time) error     { return nil }
func (w *h2Writer) EnableFullDuplex() error              { return nil }

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
	readBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		h    http.Handler
		post bool
	}{
		{"bare/get", app, false},
		{"admitted/get", mw(app), false},
		{"bare/post", readBody, true},
		{"admitted/post", mw(readBody), true},
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
				v.h.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}

// BenchmarkOverheadHTTP2 is BenchmarkOverhead with an HTTP/2 writer.
func BenchmarkOverheadHTTP2(b *testing.B) {
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		h    http.Handler
	}{{"bare", app}, {"admitted", mw(app)}} {
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			w := &h2Writer{discardWriter{h: http.Header{}}}
			b.ReportAllocs()
			for b.Loop() {
				v.h.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}

// BenchmarkOverheadDeadline is BenchmarkOverheadHTTP1's GET carrying a
// deadline header (Connect-Timeout-Ms: 5000): ignored when the middleware
// does not trust it, and propagated (parsed, given to the limiter, put on
// the handler's context) when it does.
func BenchmarkOverheadDeadline(b *testing.B) {
	ignored, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit)}})
	if err != nil {
		b.Fatal(err)
	}
	trusted, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: benchLimiter(b, shed.MaxLimit), DeadlineHeader: shedhttp.ConnectTimeoutHeader}})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		h    http.Handler
	}{{"bare", app}, {"ignored", ignored(app)}, {"propagated", trusted(app)}} {
		b.Run(v.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("Connect-Timeout-Ms", "5000")
			w := &h1Writer{discardWriter{h: http.Header{}}}
			b.ReportAllocs()
			for b.Loop() {
				v.h.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
	}
}
