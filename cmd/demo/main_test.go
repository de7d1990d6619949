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

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"-mode", "protected", "-duration", "5s", "-slow-start", "1s", "-slow-for", "2s"}, ""},
		{[]string{"-mode", "sideways"}, "-mode"},
		{[]string{"-slow-factor", "0.5"}, "-slow-factor"},
		{[]string{"-duration", "5s"}, "does not fit"},
		{[]string{"-duration", "30s", "-outage-start", "25s", "-outage-for", "10s"}, "outage"},
		{[]string{"-outage-for", "-1s"}, "-outage-for"},
		{[]string{"-capacity", "0"}, "-capacity"},
		{[]string{"-interactive-deadline", "0s"}, "deadlines"},
		{[]string{"-no-deadline-propagation"}, ""},
		{[]string{"stray"}, "unexpected arguments"},
		{[]string{"-limit-algo", "vegas"}, "-limit-algo"},
		{[]string{"-limit-algo", "aimd", "-latency-ceiling", "300ms"}, "-latency-ceiling"},
		{[]string{"-limit-backoff", "1"}, "-limit-backoff"},
		{[]string{"-batch-protected", "0.5"}, "add up"},
		{[]string{"-batch-queue", "8"}, "wait > 0"},
		{[]string{"-budget-floor", "0"}, "-budget-floor"},
		{[]string{"-tune"}, "-tune needs -record"},
		{[]string{"-mode", "protected", "-record", "x", "-tune", "-tune-budget", "0"}, "-tune-budget"},
	}
	for _, c := range cases {
		_, err := parseFlags(c.args, io.Discard)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want one mentioning %q", c.args, err, c.err)
		}
	}
}

func TestHelpExplainsTheFlags(t *testing.T) {
	var b bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &b); err == nil {
		t.Fatal("-h did not stop")
	}
	for _, want := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "-slow-factor", "-mode", "127.0.0.1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("-h output does not mention %s", want)
		}
	}
}

// A short run of both modes on loopback: it must finish by itself, print
// the side-by-side table and write the report. Figures are not asserted:
// they depend on the machine.
func TestShortRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out := t.TempDir()
	o, err := parseFlags([]string{"-duration", "3s", "-slow-start", "1s", "-slow-for", "1s",
		"-interactive-rate", "40", "-batch-rate", "40", "-out", out, "-metrics-addr", "127.0.0.1:0", "-quiet"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	var stdout bytes.Buffer
	if err := run(context.Background(), o, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| unprotected", "| protected", "interactive goodput", "upstream attempts per logical request",
		"answers after the client gave up", "upstream time spent on abandoned work"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"report.md", "goodput.png", "latency.png", "inflight.png", "amplification.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
}
