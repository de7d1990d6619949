package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shedkit/shedkit/sim"
)

// A short protected run, recorded and calibrated: the comparison is
// printed and its files written. Figures are not asserted: they depend on
// the machine.
func TestCalibrateShortRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out, recDir := t.TempDir(), filepath.Join(t.TempDir(), "rec")
	o, err := parseFlags([]string{"-mode", "protected", "-duration", "4s", "-slow-start", "2s", "-slow-for", "1s",
		"-interactive-rate", "60", "-batch-rate", "60", "-out", out, "-metrics-addr", "127.0.0.1:0", "-quiet",
		"-record", recDir, "-calibrate"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	var stdout bytes.Buffer
	if err := run(context.Background(), o, &stdout); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	t.Log(stdout.String())
	for _, want := range []string{"== calibration", "goodput interactive", "goodput batch", "mean limit", "healthy 1s-2s", "slowdown 2s-3s"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, f := range []string{"calibration.csv", "calibration.png", "calibration.yaml"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("calibration file %s: %v", f, err)
		}
	}
	// A second run into the same recording directory is refused.
	if err := run(context.Background(), o, io.Discard); err == nil || !strings.Contains(err.Error(), "already holds a recording") {
		t.Errorf("a second recording into %s: %v", recDir, err)
	}
}

func TestCalibrateFlags(t *testing.T) {
	for _, args := range [][]string{{"-calibrate"}, {"-calibrate", "-record", "x", "-mode", "unprotected"}} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "-calibrate needs") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// The scenario of a calibration is the demo's configuration: it is valid,
// and carries the gateway's classes, retries and the upstream's model.
func TestDemoScenario(t *testing.T) {
	o, err := parseFlags([]string{"-slow-factor", "4", "-capacity", "30", "-attempt-timeout", "600ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fit := &sim.Fit{Scenario: &sim.Scenario{Classes: []sim.Class{{Name: "batch", Rate: 50}, {Name: "interactive", Rate: 100,
		Schedule: []sim.RateChange{{At: 10 * time.Second, Rate: 80}, {At: 40 * time.Second, Rate: 10}}}}},
		ServiceTime: sim.DistFit{Dist: sim.LogNorm(4e7, 0.25)}}
	sc := demoScenario(o, fit)
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	in, b := sc.Classes[interactive], sc.Classes[batch]
	if in.Name != "interactive" || in.Rate != 100 || len(in.Schedule) != 1 || in.Protected != 0.8 || in.Queue != 200 || in.MaxWait != o.adm.classes[interactive].wait || in.Timeout != time.Second {
		t.Errorf("interactive: %+v", in)
	}
	if b.Name != "batch" || b.Rate != 50 || b.Protected != 0 || b.Timeout != 3*time.Second {
		t.Errorf("batch: %+v", b)
	}
	if s := sc.Service; s.Timeout != 600*time.Millisecond || s.Retry.MaxAttempts != 3 || s.Retry.Budget == nil {
		t.Errorf("service: %+v", s)
	}
	u := sc.Upstream
	if u.Discipline != sim.PS || u.Capacity != 30 || u.MaxInFlight != 750 || len(u.Events) != 1 || u.Events[0].Slowdown != 4 || u.Events[0].At != 8*time.Second {
		t.Errorf("upstream: %+v", u)
	}
}

// The fitted service time holds the gateway's and the loopback's time on
// top of the upstream's work: the slowdown multiplies the work alone, as
// the demo's upstream does, so the slowed median is the fitted one plus
// (factor - 1) times -latency, not factor times the fitted one.
func TestDemoScenarioSlowdownSparesOverhead(t *testing.T) {
	o, err := parseFlags([]string{"-latency", "40ms", "-slow-factor", "10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		median float64 // ns
		want   float64 // slowed median, ns
	}{
		{"1ms of overhead", 41e6, 41e6 + 9*40e6},
		{"no overhead", 40e6, 400e6},
		{"fit faster than -latency", 39e6, 390e6}, // nothing to spare: the factor as is
	} {
		fit := &sim.Fit{Scenario: &sim.Scenario{}, ServiceTime: sim.DistFit{Dist: sim.LogNorm(c.median, 0.25)}}
		ev := demoScenario(o, fit).Upstream.Events
		if len(ev) != 1 {
			t.Fatalf("%s: events %+v", c.name, ev)
		}
		if got := c.median * ev[0].Slowdown; math.Abs(got-c.want) > 1 {
			t.Errorf("%s: slowed median %.0f ns, want %.0f (slowdown %g)", c.name, got, c.want, ev[0].Slowdown)
		}
	}
}

// The prediction replays the run's offered load second by second: a run
// whose slowdown got half the usual interactive requests is simulated
// with that many, not at the fitted mean rate; a class the run did not
// offer keeps the fit.
func TestCalibrationReplaysOfferedLoad(t *testing.T) {
	o, err := parseFlags([]string{"-duration", "10s", "-slow-start", "4s", "-slow-for", "4s", "-batch-rate", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fit := &sim.Fit{Scenario: &sim.Scenario{Classes: []sim.Class{{Name: "interactive", Rate: 120}, {Name: "batch", Rate: 100}}},
		ServiceTime: sim.DistFit{Dist: sim.LogNorm(4e7, 0.25)}}
	measured := make([]second, 11)
	for i := range measured {
		measured[i].offered[interactive] = 120
		if i >= 4 && i < 8 {
			measured[i].offered[interactive] = 60
		}
	}
	sc := replayOffered(demoScenario(o, fit), measured)
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	if b := sc.Classes[batch]; b.Rate != 100 || len(b.Schedule) != 0 {
		t.Errorf("batch, never offered in the run, left its fit: rate %v, schedule %v", b.Rate, b.Schedule)
	}
	preds, err := predict(sc, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range preds {
		slow := 0
		for i := 4; i < 8; i++ {
			slow += p[i].offered[interactive]
		}
		// 240 offered: the fitted rate would give 480. 60 is about four
		// standard deviations of a Poisson count of 240.
		if slow < 180 || slow > 300 {
			t.Errorf("interactive requests offered in seconds 4-8: %d, want about 240", slow)
		}
	}
}

// comparePhases cuts both series at the same seconds, and the table shows
// the gap in points and percent.
func TestComparePhases(t *testing.T) {
	s := schedule{SlowStart: 2 * time.Second, SlowFor: 2 * time.Second, Duration: 5 * time.Second}
	sec := func(good, offered, limit int) second {
		return second{good: [numClasses]int{good, good}, offered: [numClasses]int{offered, offered}, limit: limit}
	}
	measured := []second{sec(0, 10, 20), sec(10, 10, 40), sec(5, 10, 10), sec(5, 10, 10), sec(10, 10, 40)}
	predicted := []second{sec(0, 10, 20), sec(9, 10, 40), sec(4, 10, 12), sec(4, 10, 12), sec(10, 10, 40)}
	c := comparePhases(s, measured, [][]second{predicted, predicted})
	want := []string{"healthy 1s-2s", "slowdown 2s-4s", "after 4s-5s"}
	if strings.Join(c.phases, ",") != strings.Join(want, ",") {
		t.Fatalf("phases %v, want %v", c.phases, want)
	}
	out := c.String()
	for _, w := range []string{"100.0%   90.0%", "-10.0pt", "50.0%   40.0%", "10.0    12.0", "+20%"} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
}
