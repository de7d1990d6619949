package grpc_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	shedgrpc "github.com/shedkit/shedkit/middleware/grpc"
	"github.com/shedkit/shedkit/middleware/internal/rectest"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// BenchmarkRecorderOverhead calls the unary interceptor with
// ServerConfig.Recorder and the same interceptor without it, alternately
// in rounds of 256 calls, so that a shared machine's noise hits both
// alike; it reports the recorder's time per call as a ratio to the
// interceptor's without ("x-base"), its time per call ("ns/with") and the
// allocations it adds per call ("allocs-over-base"). An op is a call of
// each. "all" records every call (two clock readings and a record handed
// to the writer; "+key" with a key from KeyMetadata to hash); "sampled"
// keeps the default cap of 1,000 records per second, so nearly every
// call is only counted. The writer's buffer is emptied outside the
// timings.
func BenchmarkRecorderOverhead(b *testing.B) {
	full := newLimiter(b, shed.Config{Limit: 1})
	full.TryAcquire(shed.Request{}) // every call is rejected
	for _, v := range []struct {
		name    string
		lim     *shed.Limiter
		maxRate float64
		key     bool
	}{
		{"admitted/all", newLimiter(b, shed.Config{Limit: shed.MaxLimit}), -1, false},
		{"admitted/sampled", newLimiter(b, shed.Config{Limit: shed.MaxLimit}), 0, false},
		{"admitted+key/all", newLimiter(b, shed.Config{Limit: shed.MaxLimit}), -1, true},
		{"admitted+key/sampled", newLimiter(b, shed.Config{Limit: shed.MaxLimit}), 0, true},
		{"rejected/all", full, -1, false},
	} {
		b.Run(v.name, func(b *testing.B) {
			rec, err := record.New(record.Config{Writer: io.Discard, MaxRecordsPerSecond: v.maxRate, Buffer: 1 << 16, TickEvery: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer rec.Stop()
			cfg := shedgrpc.ServerConfig{Limiter: v.lim}
			if v.key {
				cfg.KeyMetadata = "x-tenant"
			}
			base := newServer(b, cfg).UnaryInterceptor()
			cfg.Recorder = rec
			with := newServer(b, cfg).UnaryInterceptor()
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), nopStream{})
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-tenant", "tenant-00042"))
			b.ReportAllocs()
			rectest.BenchPair(b,
				func() { _, _ = base(ctx, benchReq, benchInfo, benchHandler) },
				func() { _, _ = with(ctx, benchReq, benchInfo, benchHandler) },
				func() { rec.Flush() })
		})
	}
}
