package limits_test

import (
	"fmt"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// feedWindow plays one second of virtual time: 100 samples of the given
// latency, with the work in flight filling the limit up to demand.
func feedWindow(src shed.LimitSource, now *time.Time, lat time.Duration, demand int) {
	for range 100 {
		*now = now.Add(10 * time.Millisecond)
		src.Observe(shed.Sample{Now: *now, Latency: lat, Timed: true, InFlight: min(src.Limit(), demand)})
	}
}

func ExampleNewGradient() {
	g, err := limits.NewGradient(limits.GradientConfig{})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	g.Observe(shed.Sample{Now: now}) // opens the first window

	// Slow start: the limit doubles while 300 requests want to run and
	// the latency stays at 10 ms; it stops growing once it is twice what
	// is used.
	for range 5 {
		feedWindow(g, &now, 10*time.Millisecond, 300)
		fmt.Print(g.Limit(), " ")
	}
	fmt.Println(g.State().Reason)
	// The dependency slows down to 25 ms: the limit shrinks in proportion
	// to the excess latency, a quarter at most per window.
	for range 3 {
		feedWindow(g, &now, 25*time.Millisecond, 300)
		fmt.Print(g.Limit(), " ")
	}
	fmt.Println(g.State().Reason)
	// It recovers. The first window reads as a cut that removed queue
	// (more throughput with less in flight), so the limit is cut once
	// more; that cut costs throughput, so the limit returns to the knee.
	// Then the work in flight fills it with no queue: it grows by half,
	// and by sqrt(limit) per window while it is in use.
	for range 4 {
		feedWindow(g, &now, 10*time.Millisecond, 300)
		fmt.Print(g.Limit(), " ")
	}
	fmt.Println(g.State().Reason)
	// Output:
	// 40 80 160 320 600 slow-start
	// 450 337 253 cut-latency
	// 227 253 379 398 grow
}

func ExampleNewAIMD() {
	a, err := limits.NewAIMD(limits.AIMDConfig{InitialLimit: 100, LatencyThreshold: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	a.Observe(shed.Sample{Now: now})
	feedWindow(a, &now, 10*time.Millisecond, 1000) // the limit binds, fast: slow start doubles it
	fmt.Println(a.Limit())
	feedWindow(a, &now, 80*time.Millisecond, 1000) // too slow: x0.9, slow start ends
	feedWindow(a, &now, 80*time.Millisecond, 1000) // still too slow: x0.9
	fmt.Println(a.Limit())
	feedWindow(a, &now, 10*time.Millisecond, 1000) // fast again: back to the first cut
	fmt.Println(a.Limit())
	feedWindow(a, &now, 10*time.Millisecond, 1000) // then +1 per window
	fmt.Println(a.Limit())
	// Output:
	// 200
	// 162
	// 180
	// 181
}

func ExampleNewFixed() {
	f, err := limits.NewFixed(100)
	if err != nil {
		panic(err)
	}
	l, err := shed.New(shed.Config{Source: f})
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Limit())
	_ = f.Set(20) // an operator lowers the limit; admitted work is not revoked
	fmt.Println(l.Limit())
	// Output:
	// 100
	// 20
}

func ExampleNewWindow() {
	w, err := limits.NewWindow(limits.WindowConfig{MinDuration: time.Second, MinSamples: 3, Quantile: 0.5})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(0, 0)
	w.Record(shed.Sample{Now: t0, Timed: true, Latency: 40 * time.Millisecond, InFlight: 3})
	w.Record(shed.Sample{Now: t0.Add(300 * time.Millisecond), Dropped: true, InFlight: 9})
	w.Record(shed.Sample{Now: t0.Add(600 * time.Millisecond), Timed: true, Latency: 20 * time.Millisecond, InFlight: 4})
	s, closed := w.Record(shed.Sample{Now: t0.Add(time.Second), Timed: true, Latency: 30 * time.Millisecond, InFlight: 2})
	fmt.Println(closed, s.Samples, s.Drops, s.MaxInFlight, s.Min, s.Mean, s.End.Sub(s.Start))
	fmt.Printf("median %.1fms\n", float64(s.Latency)/1e6)
	// Output:
	// true 3 1 9 20ms 30ms 1s
	// median 29.9ms
}

// A Gradient drives a shed.Limiter: every release feeds it a sample. The
// explicit-time API times every permit, so this runs in virtual time.
func ExampleGradient_limiter() {
	g, err := limits.NewGradient(limits.GradientConfig{})
	if err != nil {
		panic(err)
	}
	l, err := shed.New(shed.Config{Source: g})
	if err != nil {
		panic(err)
	}
	// Every second: 100 rounds in which 50 requests want to run for
	// 10 ms each. The limit doubles every window while it is in use, and
	// stops at twice the 50 in flight. (The first window
	// opens at the first release, so it closes a round late.)
	now := time.Unix(0, 0)
	for range 5 {
		for range 100 {
			var held []shed.Permit
			for range 50 {
				p, err := l.TryAcquireAt(now, shed.Request{})
				if err != nil {
					break // over the limit: rejected
				}
				held = append(held, p)
			}
			now = now.Add(10 * time.Millisecond)
			for i := range held {
				held[i].ReleaseAt(now, shed.Success)
			}
		}
		fmt.Println(l.Limit())
	}
	// Output:
	// 20
	// 40
	// 80
	// 100
	// 100
}

// A trace of every window tells which rule moved the limit, and why: here
// the windows that cut it, from the same run as ExampleNewGradient's.
func ExampleWindowTrace() {
	g, err := limits.NewGradient(limits.GradientConfig{
		Trace: func(t limits.WindowTrace) {
			if t.Reason.IsCut() {
				fmt.Printf("%s: %.0f -> %.0f, median %v against a baseline of %v (threshold x%.1f)\n",
					t.Reason, t.Limit, t.Next, t.Window.Median.Round(time.Millisecond), t.Baseline.Round(time.Millisecond), t.Threshold)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	g.Observe(shed.Sample{Now: now})
	for _, lat := range []time.Duration{10, 10, 10, 10, 10, 25, 25, 25, 10, 10} {
		feedWindow(g, &now, lat*time.Millisecond, 300)
	}
	// Output:
	// cut-latency: 600 -> 450, median 25ms against a baseline of 10ms (threshold x1.2)
	// cut-latency: 450 -> 338, median 25ms against a baseline of 10ms (threshold x1.2)
	// cut-latency: 338 -> 253, median 25ms against a baseline of 10ms (threshold x1.2)
	// cut-queue: 253 -> 228, median 10ms against a baseline of 10ms (threshold x1.2)
}
