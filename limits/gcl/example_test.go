package gcl_test

import (
	"fmt"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/shedkit/shedkit/limits/gcl"
	"github.com/shedkit/shedkit/shed"
)

// Any core.Limit can drive a shed.Limiter; here an operator-settable one.
func ExampleFromCore() {
	settable := limit.NewSettableLimit("api", 50, nil)
	src, err := gcl.FromCore(settable, gcl.Config{})
	if err != nil {
		panic(err)
	}
	l, err := shed.New(shed.Config{Source: src})
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Limit())
	settable.SetLimit(80)
	fmt.Println(l.Limit())
	// Output:
	// 50
	// 80
}

// The library's Gradient2 with its default tuning, fed five 1 s windows of
// samples in virtual time with its limit in use: it grows by 0.8 per
// window, from 20 to 24.
func ExampleNewGradient2() {
	src, err := gcl.NewGradient2(gcl.Config{})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	src.Observe(shed.Sample{Now: now})
	for range 500 {
		now = now.Add(10 * time.Millisecond)
		src.Observe(shed.Sample{Now: now, Timed: true, Latency: 10 * time.Millisecond, InFlight: src.Limit()})
	}
	fmt.Println(src.Limit())
	// Output:
	// 24
}

func ExampleNewVegas() {
	src, err := gcl.NewVegas(gcl.Config{})
	if err != nil {
		panic(err)
	}
	fmt.Println(src.Limit())
	// Output:
	// 20
}

func ExampleNewAIMD() {
	src, err := gcl.NewAIMD(gcl.Config{})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	src.Observe(shed.Sample{Now: now})
	for i := range 100 {
		now = now.Add(10 * time.Millisecond)
		// One timeout in the window: the library's AIMD backs off 10 -> 9.
		src.Observe(shed.Sample{Now: now, Timed: true, Latency: 5 * time.Millisecond, InFlight: 10, Dropped: i == 50})
	}
	fmt.Println(src.Limit())
	// Output:
	// 9
}

// Gradient2 started warm, with room above its default maximum of 200: a
// replica that needs thousands in flight starts at 500 and can grow to
// 5,000.
func ExampleNewGradient2Tuned() {
	src, err := gcl.NewGradient2Tuned(gcl.Config{}, gcl.Tuning{InitialLimit: 500, MaxLimit: 5000})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	src.Observe(shed.Sample{Now: now})
	for range 500 {
		now = now.Add(10 * time.Millisecond)
		src.Observe(shed.Sample{Now: now, Timed: true, Latency: 10 * time.Millisecond, InFlight: src.Limit()})
	}
	fmt.Println(src.Limit())
	// Output:
	// 504
}
