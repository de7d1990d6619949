package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/sim"
)

// The default configuration is the tuner's plain baseline: the
// shedkit-gradient policy with its defaults, the demo's classes and budget.
func TestHandCandidateDefault(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	hand := handCandidate(o)
	wantHand := sim.TuneCandidate{Policy: "shedkit-gradient", Budget: &sim.Budget{Ratio: 0.2, MinPerSecond: 10},
		Classes: []sim.TuneClass{{Protected: 0.8, Queue: 200, MaxWait: 250 * time.Millisecond}, {}}}
	if !reflect.DeepEqual(hand, wantHand) {
		t.Errorf("hand candidate %+v, want %+v", hand, wantHand)
	}
}

func TestCandidateAdmission(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	base := o.adm
	ms := time.Millisecond
	cases := []struct {
		name string
		c    sim.TuneCandidate
		want admission
		err  string
	}{
		{"gradient defaults, budget kept", sim.TuneCandidate{Policy: "shedkit-gradient", Classes: []sim.TuneClass{{}, {}}},
			admission{algo: "gradient", budgetRatio: 0.2, budgetFloor: 10}, ""},
		{"gradient parameters", sim.TuneCandidate{Policy: "shedkit-gradient:backoff=0.8,tolerance=1.5",
			Classes: []sim.TuneClass{{Protected: 0.5, Queue: 32, MaxWait: 50 * ms}, {Protected: 0.25, Queue: 8, MaxWait: 600 * ms}},
			Budget:  &sim.Budget{Ratio: 0.05, MinPerSecond: 1}},
			admission{algo: "gradient", tolerance: 1.5, backoff: 0.8,
				classes:     [numClasses]classAdmission{{0.5, 32, 50 * ms}, {0.25, 8, 600 * ms}},
				budgetRatio: 0.05, budgetFloor: 1}, ""},
		{"aimd, a wait without a queue is dropped", sim.TuneCandidate{Policy: "shedkit-aimd:tolerance=3",
			Classes: []sim.TuneClass{{Protected: 0.75, MaxWait: 200 * ms}, {}}, Budget: &sim.Budget{Ratio: 0.1, MinPerSecond: 5}},
			admission{algo: "aimd", tolerance: 3, classes: [numClasses]classAdmission{{protected: 0.75}}, budgetRatio: 0.1, budgetFloor: 5}, ""},
		{"the demo's own initial limit and ceiling", sim.TuneCandidate{Policy: "shedkit-gradient:ceiling=300ms,initial=10", Classes: []sim.TuneClass{{}, {}}},
			admission{algo: "gradient", budgetRatio: 0.2, budgetFloor: 10}, ""},
		{"a policy the demo cannot run", sim.TuneCandidate{Policy: "gcl-vegas", Classes: []sim.TuneClass{{}, {}}}, admission{}, "cannot run"},
		{"a parameter without a flag", sim.TuneCandidate{Policy: "shedkit-gradient:smoothing=0.3", Classes: []sim.TuneClass{{}, {}}}, admission{}, "smoothing"},
		{"a bad value", sim.TuneCandidate{Policy: "shedkit-aimd:backoff=x", Classes: []sim.TuneClass{{}, {}}}, admission{}, "backoff"},
		{"one class", sim.TuneCandidate{Policy: "shedkit-gradient", Classes: []sim.TuneClass{{}}}, admission{}, "classes"},
		{"a rate limit", sim.TuneCandidate{Policy: "shedkit-gradient", Classes: []sim.TuneClass{{}, {RateLimit: &sim.RateLimit{RPS: 50, Burst: 5}}}}, admission{}, "rate limit"},
	}
	for _, c := range cases {
		got, err := candidateAdmission(base, c.c)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.err)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
			continue
		case got != c.want:
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		// The printed flags select the same configuration.
		o2, err := parseFlags(strings.Fields(got.flags()), io.Discard)
		if err != nil {
			t.Errorf("%s: flags %q: %v", c.name, got.flags(), err)
		} else if o2.adm != got {
			t.Errorf("%s: flags %q give %+v", c.name, got.flags(), o2.adm)
		}
	}
}

// The hand-picked configuration survives the trip to a candidate and
// back, whatever the flags.
func TestHandCandidateRoundTrip(t *testing.T) {
	for _, args := range [][]string{nil,
		{"-limit-algo", "aimd", "-limit-backoff", "0.8", "-batch-protected", "0.1", "-batch-queue", "8", "-batch-queue-wait", "150ms", "-budget-ratio", "0.1", "-budget-floor", "5"},
		{"-initial-limit", "10", "-latency-ceiling", "300ms", "-limit-tolerance", "2", "-interactive-queue", "0"},
	} {
		o, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatal(args, err)
		}
		got, err := candidateAdmission(admission{}, handCandidate(o))
		want := o.adm
		if want.classes[interactive].queue == 0 {
			want.classes[interactive].wait = 0 // no queue, no wait
		}
		if err != nil || got != want {
			t.Errorf("%v: %+v, %v; want %+v", args, got, err, want)
		}
		if _, err := sim.ParsePolicy(handCandidate(o).Policy); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// A short tune-demo: record, tune with three candidates, re-run, compare.
func TestTuneShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the protected gateway twice")
	}
	out := t.TempDir()
	o, err := parseFlags([]string{"-mode", "protected", "-duration", "5s", "-slow-start", "1s", "-slow-for", "2s",
		"-interactive-rate", "40", "-batch-rate", "40", "-out", out, "-metrics-addr", "", "-quiet",
		"-record", t.TempDir(), "-tune", "-tune-budget", "3", "-tune-seeds", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	var stdout bytes.Buffer
	if err := run(context.Background(), o, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== tune:", "winner", "hand-picked", "demo flags of the winner: -limit-algo",
		"interactive goodput during the slowdown", "attempts per request", "tuned is "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "tuned_admission.go.txt")); err != nil || !bytes.Contains(b, []byte("func newAdmission")) {
		t.Errorf("Go source of the winner: %v\n%s", err, b)
	}
}

// The verdict names the better configuration, and calls two runs of the
// same configuration noise rather than one better than itself.
func TestTuneVerdict(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hand, tuned float64
		same        bool
		want        string
	}{
		{"better", 0.70, 0.74, false, "tuned is better than hand-picked on interactive goodput during the slowdown: +4.0 points"},
		{"worse", 0.735, 0.699, false, "tuned is worse than hand-picked on interactive goodput during the slowdown: -3.6 points"},
		{"within half a point", 0.70, 0.703, false, "tuned is the same as hand-picked"},
		{"same configuration", 0.735, 0.699, true, "tuned is the hand-picked configuration: the two runs differ by -3.6 points (73.5% -> 69.9%), this machine's run-to-run noise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdict(tc.hand, tc.tuned, tc.same); !strings.HasPrefix(got, tc.want) {
				t.Errorf("verdict(%v, %v, %v) = %q, want it to start with %q", tc.hand, tc.tuned, tc.same, got, tc.want)
			}
		})
	}
}
