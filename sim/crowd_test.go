package sim

import (
	"fmt"
	"strings"
	"testing"
)

// TestBurstsAtTheDeadlineAreNotShed: bursts that fill the limit in front
// of a dependency with room for all of them (10,000 servers), where a
// heavy tail misses the 1 s deadline on its own (6-10% of the work). A
// burst's successes close in its own window and its timeouts a deadline
// later, in the next one: neither limit may read them as work crowding at
// the top of the limit (limits' cut-crowd), and both serve 98% of what no
// limit at all serves, the bar of the healthy family. Before cut-crowd
// counted only work admitted within the window, Gradient served 80.9%
// and AIMD 97.1% here.
func TestBurstsAtTheDeadlineAreNotShed(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: burst-lag\nduration: 90s\nwarmup: 10s\nclasses:\n" +
		"  - name: default\n    rate: 200\n    timeout: 1s\n    schedule:\n")
	for at := 15; at < 88; at += 2 {
		fmt.Fprintf(&b, "      - {at: %ds, factor: 3, for: 500ms}\n", at)
	}
	b.WriteString("upstream:\n  capacity: 10000\n" +
		"  service_time: {dist: lognormal, median: 100ms, sigma: 1.5}\n  degradation: 0\n")
	sc, err := ParseScenario("burst-lag.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	goodput := func(policy string) float64 { return float64(summaryOf(t, sc, policy).Goodput) }
	none := goodput("none")
	for _, policy := range []string{"shedkit-gradient", "shedkit-aimd"} {
		if g := goodput(policy); g < 0.98*none {
			t.Errorf("%s served %.0f, no limit %.0f: it shed %.1f%% of what needed no shedding", policy, g, none, 100*(1-g/none))
		}
	}
}

// summaryOf runs sc under policy on seed 1 and returns its summary.
func summaryOf(t *testing.T, sc *Scenario, policy string) Summary {
	t.Helper()
	p, err := ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(sc, p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r.Summary
}
