package record_test

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A limiter driven in explicit time (as the simulator drives it) records
// its decisions through the Recorder, its Observer; a Reader reads them
// back. In a service, Config.Dir and Start/Stop replace the buffer and
// Stop below. The first tick starts the counts: the ticks' differences
// count every request.
func Example() {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	if err != nil {
		panic(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := shed.New(shed.Config{Limit: 1, Observer: rec, Clock: func() time.Time { return start },
		Classes: []shed.ClassConfig{{Name: "interactive"}}})
	if err != nil {
		panic(err)
	}
	rec.Watch(lim)

	p, _ := lim.TryAcquireAt(start, shed.Request{Cost: 3})
	lim.TryAcquireAt(start.Add(time.Millisecond), shed.Request{}) // over the limit
	p.ReleaseAt(start.Add(20*time.Millisecond), shed.Success)
	if err := rec.Stop(); err != nil {
		panic(err)
	}

	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		switch r.Kind {
		case record.KindTick:
			fmt.Printf("%-7s at %v: limit %d, arrivals %v, shed %v, done %v\n", r.Kind, r.Time.Sub(start), r.Tick.Limit, r.Tick.Arrivals, r.Tick.Shed, r.Tick.Done)
		case record.KindReleased:
			fmt.Printf("%-7s at %v: %s %s after %v\n", r.Kind, r.Time.Sub(start), r.ClassName, r.Outcome, r.Latency)
		default:
			fmt.Printf("%-7s at %v: %s cost %d %s\n", r.Kind, r.Time.Sub(start), r.ClassName, r.Cost, r.Reason)
		}
	}
	// Output:
	// admit   at 0s: interactive cost 3 none
	// reject  at 1ms: interactive cost 1 limit_exceeded
	// release at 20ms: interactive success after 20ms
	// tick    at 0s: limit 1, arrivals [0], shed [0], done [0]
	// tick    at 20ms: limit 1, arrivals [2], shed [1], done [1]
}

// A recording shipped off the host salts its tenant keys: with
// Config.KeySalt, Recorder.KeyHash (which the net/http middleware uses)
// hashes them with HMAC-SHA256, so that a key cannot be found again by
// hashing candidates without the salt. The same key hashes the same under
// the same salt, so a fit still counts tenants. In a service, the salt
// is 32 random bytes kept in a secret store, not a constant.
func Example_keySalt() {
	salt := []byte("example salt, 16 bytes or more")
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"api"}, KeySalt: salt})
	if err != nil {
		panic(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, tenant := range []string{"203.0.113.7", "198.51.100.2", "203.0.113.7"} {
		rec.Add(record.Record{Kind: record.KindRequest, Time: start.Add(time.Duration(i) * time.Millisecond),
			Status: 200, Timed: true, Key: rec.KeyHash(tenant)})
	}
	if err := rec.Stop(); err != nil {
		panic(err)
	}

	// Whoever holds the salt can hash a suspect key the same way.
	h, err := record.NewKeyHasher(salt)
	if err != nil {
		panic(err)
	}
	suspect := h.Hash("203.0.113.7")
	tenants := map[uint64]int{}
	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if r.Kind == record.KindRequest {
			tenants[r.Key]++
		}
	}
	fmt.Println("tenants:", len(tenants))
	fmt.Println("requests of 203.0.113.7:", tenants[suspect])
	fmt.Println("found by the unsalted hash:", tenants[record.KeyHash("203.0.113.7")] > 0)
	_, err = record.NewKeyHasher([]byte("too short"))
	fmt.Println(err)
	// Output:
	// tenants: 2
	// requests of 203.0.113.7: 2
	// found by the unsalted hash: false
	// record: invalid config: salt: at least 16 bytes, got 9
}
