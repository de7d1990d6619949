package sim

import (
	"context"
	"reflect"
	"testing"

	"github.com/shedkit/shedkit/limits"
)

// TestTracePolicyChangesNothing: tracing a replica's limit leaves the run
// as it was, and sees every window of that replica only.
func TestTracePolicyChangesNothing(t *testing.T) {
	sc, err := Builtin("slowdown")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePolicy("shedkit-aimd")
	if err != nil {
		t.Fatal(err)
	}
	var windows int
	traced := TracePolicy(p, 0, func(limits.WindowTrace) { windows++ })
	res, err := RunBatch(context.Background(), []Job{{Scenario: sc, Policy: p, Seed: 3}, {Scenario: sc, Policy: traced, Seed: 3}}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res[0].Summary, res[1].Summary) {
		t.Fatalf("summaries differ:\n%+v\n%+v", res[0].Summary, res[1].Summary)
	}
	// One replica, windows of at least a second: about one per second.
	if secs := int(sc.Duration.Seconds()); windows < secs/3 || windows > secs+1 {
		t.Fatalf("%d windows traced in %d s", windows, secs)
	}
}
