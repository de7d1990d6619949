package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/shed"
)

func TestParsePolicyGCLTuning(t *testing.T) {
	for _, tc := range []struct {
		spec, name, err string
	}{
		{spec: "gcl-gradient2:max=2000,initial=500", name: "gcl-gradient2:initial=500,max=2000"},
		{spec: "gcl-gradient2:min=5,initial=10,max=20,rtt=window", name: "gcl-gradient2:initial=10,max=20,min=5,rtt=window"},
		{spec: "gcl-vegas:initial=500,max=5000", name: "gcl-vegas:initial=500,max=5000"},
		{spec: "gcl-aimd:initial=100,max=5000", name: "gcl-aimd:initial=100,max=5000"},
		{spec: "gcl-aimd:initial=5000", name: "gcl-aimd:initial=5000"}, // no max: uncapped
		{spec: "gcl-gradient2:initial=0", err: "parameter initial"},
		{spec: "gcl-gradient2:max=-1", err: "parameter max"},
		{spec: "gcl-gradient2:min=x", err: "parameter min"},
		{spec: "gcl-gradient2:initial=300,max=250", err: "parameter initial"},
		{spec: "gcl-gradient2:min=50,max=40", err: "parameter max"},
		{spec: "gcl-gradient2:min=50,initial=40", err: "parameter initial"},
		{spec: "gcl-vegas:max=100000000", err: "parameter max"},
		{spec: "gcl-aimd:initial=100000000", err: "parameter initial"},
		{spec: "gcl-vegas:min=5", err: `unknown parameter "min"`},
		{spec: "gcl-aimd:min=5", err: `unknown parameter "min"`},
	} {
		p, err := ParsePolicy(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one mentioning %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if p.Name() != tc.name {
			t.Errorf("%s: name %q, want %q", tc.spec, p.Name(), tc.name)
		}
	}
}

// drive runs one replica of policy spec for d of virtual time, always at its
// limit, with work that takes 10 ms, and returns the limit at the start,
// and the lowest and highest limits seen after it.
func drive(t *testing.T, spec string, d time.Duration) (start, lo, hi int) {
	t.Helper()
	p, err := ParsePolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := p.NewLimiter(PolicyEnv{Config: shed.Config{Clock: func() time.Time { return epoch }}})
	if err != nil {
		t.Fatal(err)
	}
	start, lo, hi = l.Limit(), l.Limit(), l.Limit()
	var running []shed.Permit
	for ms := time.Duration(0); ms < d; ms += 10 * time.Millisecond {
		now := epoch.Add(ms)
		for _, r := range running {
			r.ReleaseAt(now, shed.Success)
		}
		running = running[:0]
		for {
			r, err := l.TryAcquireAt(now, shed.Request{})
			if err != nil {
				break
			}
			running = append(running, r)
		}
		lo, hi = min(lo, l.Limit()), max(hi, l.Limit())
	}
	return start, lo, hi
}

// initial and max change the limit: the policies start warm and grow past
// the library's default maxima (Gradient2 200, Vegas 1000), up to max.
func TestPolicyGCLTuningChangesLimit(t *testing.T) {
	for _, tc := range []struct {
		spec           string
		start, atLeast int // hi >= atLeast
		atMost         int // hi <= atMost
	}{
		{"gcl-gradient2", 20, 21, 200},
		{"gcl-gradient2:initial=500,max=2000", 500, 505, 2000},
		{"gcl-gradient2:initial=300,max=300", 300, 300, 300},
		{"gcl-vegas:initial=1000,max=1200", 1000, 1200, 1200},
		{"gcl-aimd:initial=500,max=510", 500, 510, 510},
	} {
		start, lo, hi := drive(t, tc.spec, 20*time.Second)
		t.Logf("%s: start %d, then %d..%d", tc.spec, start, lo, hi)
		if start != tc.start || hi < tc.atLeast || hi > tc.atMost {
			t.Errorf("%s: start %d, highest %d; want start %d, highest in [%d, %d]", tc.spec, start, hi, tc.start, tc.atLeast, tc.atMost)
		}
	}
}
