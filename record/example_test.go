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
// Stop below.
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
	// tick    at 0s: limit 1, arrivals [1], shed [0], done [0]
	// tick    at 20ms: limit 1, arrivals [2], shed [1], done [1]
}
