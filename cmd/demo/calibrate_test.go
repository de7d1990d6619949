package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
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
