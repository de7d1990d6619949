package sim

import (
	"regexp"
	"strings"
	"testing"
)

// TestSnippetReplicasOfAFittedScenario: a scenario that leaves
// service.replicas unset (every scenario shedsim fit writes) runs one
// replica, and the snippet tune prints passes shedredis a fleet of one:
// NewConcurrency refuses Replicas 0.
func TestSnippetReplicasOfAFittedScenario(t *testing.T) {
	sc := tenantsTune() // Service.Replicas unset: 1 replica
	cands, err := TuneSpace(sc, 40, 1, TuneSpaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`Replicas: (\d+)`)
	for _, c := range cands {
		if c.Classes[0].KeyConcurrency == nil {
			continue
		}
		src, err := c.GoSnippet(sc)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("no Replicas in snippet:\n%s", src)
		}
		if m[1] == "0" {
			i := strings.Index(src, "// Replicas (")
			t.Fatalf("candidate %s: snippet passes shedredis.Config{Replicas: 0}, which NewConcurrency rejects:\n%s\n...%s", c.String(), src[i:i+80], src[strings.Index(src, "shedredis.NewConcurrency"):strings.Index(src, "shedredis.NewConcurrency")+100])
		}
		return
	}
	t.Skip("no candidate with a key concurrency")
}
