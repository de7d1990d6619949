package failsafesim_test

import (
	"fmt"
	"time"

	"github.com/shedkit/shedkit/bench/failsafesim"
	"github.com/shedkit/shedkit/shed"
)

// Wiring failsafe-go's adaptive limiter under a shed.Limiter in virtual
// time: the Source supplies the limit and learns from samples; its
// Observer mirrors admissions into failsafe-go's semaphore.
func ExampleNew() {
	src, err := failsafesim.New(failsafesim.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := shed.New(shed.Config{Source: src, Observer: src.Observer(nil), Clock: func() time.Time { return t0 }})
	if err != nil {
		fmt.Println(err)
		return
	}
	// 100 virtual seconds of work that takes 10 ms, always at the limit:
	// failsafe-go raises the limit by one per one-second window (by two
	// from 100 on).
	var running []shed.Permit
	for ms := 0; ms < 100_000; ms += 10 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		for i := range running {
			running[i].ReleaseAt(now, shed.Success)
		}
		running = running[:0]
		for {
			p, err := l.TryAcquireAt(now, shed.Request{})
			if err != nil {
				break
			}
			running = append(running, p)
		}
	}
	fmt.Println("limit after 100 virtual seconds:", l.Limit())
	fmt.Printf("%+v\n", src.Stats())
	// Output:
	// limit after 100 virtual seconds: 138
	// {Refused:0 Orphans:0 Held:138}
}
