package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// BenchmarkRecorderOverhead is the middleware with Config.Recorder beside
// the same middleware without it, alternately in one run (see
// rectest.BenchPair: "x-base" is the ratio, which the machine's noise
// moves far less than separate runs' times). "all" records every request
// (two clock readings and a record handed to the writer; "+key" with a
// tenant key from KeyHeader to hash); "sampled" keeps the default cap of
// 1,000 records per second, so nearly every request is only counted
// (ticks every millisecond, so that the sampling adapts at once rather
// than after a second). The writer's buffer is emptied outside the
// timings, so that records are handed over rather than dropped; the
// writer's own cost (record.BenchmarkWrite) is off the request path.
func BenchmarkRecorderOverhead(b *testing.B) {
	full := benchLimiter(b, 1)
	full.TryAcquire(shed.Request{}) // every request is rejected
	for _, v := range []struct {
		name    string
		lim     *shed.Limiter
		maxRate float64
		key     bool
		want    int
		// classify: with a Classify that keeps the key, whose effect on
		// the key the recorder follows (core.Engine.Reclassified).
		classify bool
	}{
		{"admitted/all", benchLimiter(b, shed.MaxLimit), -1, false, 200, false},
		{"admitted/sampled", benchLimiter(b, shed.MaxLimit), 0, false, 200, false},
		{"admitted+key/all", benchLimiter(b, shed.MaxLimit), -1, true, 200, false},
		{"admitted+key/sampled", benchLimiter(b, shed.MaxLimit), 0, true, 200, false},
		{"admitted+key+classify/sampled", benchLimiter(b, shed.MaxLimit), 0, true, 200, true},
		{"rejected503/all", full, -1, false, 503, false},
		{"rejected503+key/all", full, -1, true, 503, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			rec, err := record.New(record.Config{Writer: io.Discard, MaxRecordsPerSecond: v.maxRate, Buffer: 1 << 16, TickEvery: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer rec.Stop()
			cfg := nethttp.Config{Options: shedhttp.Options{Limiter: v.lim}}
			if v.key {
				cfg.KeyHeader = "X-Tenant"
			}
			if v.classify {
				cfg.Classify = func(_ *http.Request, c shedhttp.Classification) shedhttp.Classification {
					c.Cost = 2
					return c
				}
			}
			base := benchMiddleware(b, cfg)
			cfg.Recorder = rec
			with := benchMiddleware(b, cfg)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Tenant", "tenant-00042")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			rectest.BenchPair(b, func() { base.ServeHTTP(w, r) }, func() { with.ServeHTTP(w, r) }, func() { rec.Flush() })
			if w.code != v.want {
				b.Fatalf("status %d, want %d", w.code, v.want)
			}
		})
	}
}

// benchMiddleware is app behind the middleware of cfg.
func benchMiddleware(b *testing.B, cfg nethttp.Config) http.Handler {
	mw, err := nethttp.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return mw(app)
}
