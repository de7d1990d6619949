package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// BenchmarkRecorderOverhead is the middleware with Config.Recorder beside
// the bare handler and the middleware without it, in one run. "all"
// records every request (the cost of a sampled request: two clock
// readings and a record handed to the writer; "+key" with a tenant key
// from KeyHeader, which a sampled request hashes); "sampled" keeps the
// default cap of 1,000 records per second, so nearly every request is
// only counted (ticks every millisecond, so that the sampling adapts at
// once rather than after a second). The writer's buffer is emptied outside the timer, so that
// records are handed over rather than dropped; the writer's own cost
// (record.BenchmarkWrite) is off the request path.
func BenchmarkRecorderOverhead(b *testing.B) {
	full := benchLimiter(b, 1)
	full.TryAcquire(shed.Request{}) // every request is rejected
	for _, v := range []struct {
		name    string
		lim     *shed.Limiter
		rec     bool
		maxRate float64
		want    int
		key     bool
	}{
		{"bare", nil, false, 0, 200, false},
		{"admitted", benchLimiter(b, shed.MaxLimit), false, 0, 200, false},
		{"admitted+recorder-all", benchLimiter(b, shed.MaxLimit), true, -1, 200, false},
		{"admitted+recorder-all+key", benchLimiter(b, shed.MaxLimit), true, -1, 200, true},
		{"admitted+recorder-sampled", benchLimiter(b, shed.MaxLimit), true, 0, 200, false},
		{"admitted+recorder-sampled+key", benchLimiter(b, shed.MaxLimit), true, 0, 200, true},
		{"rejected503", full, false, 0, 503, false},
		{"rejected503+recorder-all", full, true, -1, 503, false},
		{"rejected503+recorder-all+key", full, true, -1, 503, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			h := http.Handler(app)
			var rec *record.Recorder
			if v.lim != nil {
				cfg := nethttp.Config{Options: shedhttp.Options{Limiter: v.lim}}
				if v.key {
					cfg.KeyHeader = "X-Tenant"
				}
				if v.rec {
					var err error
					rec, err = record.New(record.Config{Writer: io.Discard, MaxRecordsPerSecond: v.maxRate, Buffer: 1 << 16, TickEvery: time.Millisecond})
					if err != nil {
						b.Fatal(err)
					}
					defer rec.Stop()
					cfg.Recorder = rec
				}
				mw, err := nethttp.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				h = mw(app)
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Tenant", "tenant-00042")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if rec != nil && i&(1<<15-1) == 0 {
					b.StopTimer()
					rec.Flush()
					b.StartTimer()
				}
				h.ServeHTTP(w, r)
			}
			if w.code != v.want {
				b.Fatalf("status %d, want %d", w.code, v.want)
			}
		})
	}
}
