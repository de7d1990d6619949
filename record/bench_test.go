package record_test

import (
	"io"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// BenchmarkObserve measures the request path's share of recording, beside
// a bare Observer call, in one run: "all" records every event (the cost of
// a sampled request), "sampled" runs at a million events per second under
// the default cap (the cost of the others), "untimed" records every event
// without a time of its own (the wall-clock API's, but for a sample),
// dated the recorder's time. The buffer is emptied outside
// the timer, so that every sampled record is really handed over rather
// than dropped. BenchmarkWrite is the writer goroutine's share.
func BenchmarkObserve(b *testing.B) {
	bare := shed.ObserverFunc(func(shed.Event) {})
	for _, c := range []struct {
		name string
		max  float64
	}{{"bare", 0}, {"all", -1}, {"sampled", 0}, {"untimed", -1}} {
		b.Run(c.name, func(b *testing.B) {
			var o shed.Observer = bare
			var rec *record.Recorder
			if c.name != "bare" {
				rec = newRec(b, record.Config{Writer: io.Discard, MaxRecordsPerSecond: c.max, Buffer: 1 << 16})
				defer rec.Stop()
				o = rec
			}
			ev := shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Timed: true, Latency: time.Millisecond, Cost: 1, InFlight: 3}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if rec != nil && i&(1<<15-1) == 0 && rec.Pending() > 0 {
					b.StopTimer()
					rec.Flush()
					b.StartTimer()
				}
				if c.name != "untimed" || i == 0 {
					ev.Time = t0.Add(time.Duration(i) * time.Microsecond)
				} else {
					ev.Time = time.Time{}
				}
				o.Observe(ev)
			}
		})
	}
}

// BenchmarkAcquireRelease is a limiter's admission and release (explicit
// time: every permit timed, as in the simulator) without an observer, with
// a bare one and with the recorder recording everything.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, name := range []string{"no-observer", "bare-observer", "recorder-all"} {
		b.Run(name, func(b *testing.B) {
			cfg := shed.Config{Limit: 1000, Clock: func() time.Time { return t0 }}
			var rec *record.Recorder
			switch name {
			case "bare-observer":
				cfg.Observer = shed.ObserverFunc(func(shed.Event) {})
			case "recorder-all":
				rec = newRec(b, record.Config{Writer: io.Discard, MaxRecordsPerSecond: -1, Buffer: 1 << 16})
				defer rec.Stop()
				cfg.Observer = rec
			}
			lim, err := shed.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if rec != nil && i&(1<<14-1) == 0 {
					b.StopTimer()
					rec.Flush()
					b.StartTimer()
				}
				now := t0.Add(time.Duration(i) * time.Microsecond)
				p, err := lim.TryAcquireAt(now, shed.Request{})
				if err != nil {
					b.Fatal(err)
				}
				p.ReleaseAt(now.Add(500*time.Nanosecond), shed.Success)
			}
		})
	}
}

// BenchmarkWrite is the writer's cost per record: encoding and buffered
// writing, on the writer goroutine, off the request path.
func BenchmarkWrite(b *testing.B) {
	rec := newRec(b, record.Config{Writer: io.Discard, MaxRecordsPerSecond: -1, Buffer: 1 << 12})
	defer rec.Stop()
	r := record.Record{Kind: record.KindRequest, Time: t0, Cost: 1500, Actual: 900, Timed: true, Latency: 48 * time.Millisecond, Status: 200, InFlight: 37}
	b.ReportAllocs()
	for i := range b.N {
		r.Time = t0.Add(time.Duration(i) * time.Microsecond)
		rec.Add(r)
		if rec.Pending() == rec.Capacity() {
			rec.Flush()
		}
	}
	rec.Flush()
}

// BenchmarkKeyHash compares the salted hash (KeyHasher, Config.KeySalt)
// with the unsalted KeyHash in one run, for an IPv4 address and a UUID:
// the middleware pays it once per sampled request.
func BenchmarkKeyHash(b *testing.B) {
	k, err := record.NewKeyHasher([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	for _, key := range []struct{ name, key string }{
		{"ipv4", "203.0.113.7"},
		{"uuid", "6f1c8a52-3e0b-4d7e-9a61-0c2f5b8d9e47"},
	} {
		b.Run("unsalted/"+key.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for b.Loop() {
				sink += record.KeyHash(key.key)
			}
			_ = sink
		})
		b.Run("salted/"+key.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for b.Loop() {
				sink += k.Hash(key.key)
			}
			_ = sink
		})
	}
}
