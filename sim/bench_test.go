package sim

import (
	"strings"
	"testing"
	"time"
)

// benchScenario is steady load on one replica: 10,000 requests/s for 20
// simulated seconds (200,000 logical requests per run).
func benchScenario() *Scenario {
	return &Scenario{
		Name:     "bench",
		Duration: 20 * time.Second,
		Classes:  []Class{{Name: "default", Rate: 10000, Timeout: time.Second}},
		Upstream: Upstream{Capacity: 1000, ServiceTime: LogNorm(50e6, 0.5)},
	}
}

// BenchmarkSimulatedRequests measures simulation speed in logical requests
// per second of wall time, for each kind of policy (the limiter and limit
// source run for real, so their cost is included).
func BenchmarkSimulatedRequests(b *testing.B) {
	for _, name := range []string{"none", "static", "shedkit-gradient", "gcl-gradient2", "shedkit-gradient/ps"} {
		b.Run(name, func(b *testing.B) {
			sc := benchScenario()
			if n, ok := strings.CutSuffix(name, "/ps"); ok {
				// The same with a processor-sharing upstream.
				name = n
				sc.Upstream.Discipline = PS
			}
			p, err := ParsePolicy(name)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var n int64
			start := time.Now()
			for b.Loop() {
				r, err := Run(sc, p, Options{Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				n += r.Summary.Logical + int64(r.Scenario.Warmup.Seconds()*10000)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "requests/s")
		})
	}
}
