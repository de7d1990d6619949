package sim

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
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

// TestFitRefusesRenumberedClasses: records name their class by index, so
// a recording continued by a service redeployed with its classes in
// another order (interactive 200/s and batch 20/s, swapped half-way) is
// refused, naming both lists, rather than fitted with the classes mixed.
func TestFitRefusesRenumberedClasses(t *testing.T) {
	dir := t.TempDir()
	rng := newStream(5, "test")
	at := epoch
	run := func(classes []string, until time.Time) {
		rec, err := record.New(record.Config{Dir: dir, MaxRecordsPerSecond: -1, Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		for at.Before(until) {
			at = at.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / 220))
			c := shed.Class(0)
			if rng.Float64() < 20.0/220 { // batch
				c = 1
			}
			name := []string{"interactive", "batch"}[c]
			idx := shed.Class(slices.Index(classes, name))
			rec.Arrive(idx)
			rec.Done(idx)
			rec.Add(record.Record{Kind: record.KindRequest, Time: at, Class: idx, Decision: record.Admitted, Cost: 1,
				Actual: 1, Timed: true, Latency: time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)), Status: 200})
		}
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	run([]string{"interactive", "batch"}, epoch.Add(30*time.Second))
	run([]string{"batch", "interactive"}, epoch.Add(60*time.Second))
	rd, err := record.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_, err = FitRecording(rd, FitOptions{})
	if err == nil || !strings.Contains(err.Error(), `["batch" "interactive"]`) {
		t.Fatalf("FitRecording = %v, want a refusal naming both class lists", err)
	}
}
