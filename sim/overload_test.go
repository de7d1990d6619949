package sim

import "testing"

// AIMD replicas that share a dependency overloaded twice over for four
// minutes must hold its knee between them. Growing by one per window until
// the latency doubled, they built a queue together; each replica's cuts
// then freed capacity that the others filled, the episode took that queue
// for the dependency's latency, and the baseline ratcheted up. Holding the
// limit once the latency passes the square root of the tolerance keeps the
// queue from forming. (Gradient still ratchets here: see make sim-cases.)
func TestAIMDReplicasHoldASharedOverloadedDependency(t *testing.T) {
	sc, err := ParseScenario("shared-overload.yaml", []byte(`name: shared-overload
duration: 300s
trigger: {at: 60s, for: 240s}
classes:
  - name: default
    rate: 1000
    timeout: 1s
    schedule:
      - {at: 60s, factor: 2, for: 240s}
service:
  replicas: 5
  static_limit: 14
upstream:
  capacity: 70
  shared: true
  service_time: {dist: lognormal, median: 50ms, sigma: 0.5}
  degradation: 0.5
`))
	if err != nil {
		t.Fatal(err)
	}
	during := func(policy string) float64 { return summaryOf(t, sc, policy).TriggerGoodputRatio }
	// The static limit is each replica's share of the servers.
	if aimd, oracle := during("shedkit-aimd"), during("static"); aimd < 0.85*oracle {
		t.Errorf("AIMD served %.1f%% of the ideal during the overload, a static limit at each replica's share %.1f%%: want at least 85%% of it",
			100*aimd, 100*oracle)
	}
}
