package main

import (
	"bytes"
	"strings"
	"testing"
)

// Invalid flags and configurations exit with 2 before any traffic.
func TestRunUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nosuchflag"}, "flag provided but not defined"},
		{[]string{"-duration", "1s", "-client=false"}, "Duration: must be at least 6s"},
		{[]string{"-server=false", "-client-duration", "1s"}, "Duration: must be at least 3s"},
		{[]string{"-capacity", "-5", "-client=false"}, "Capacity"},
		{[]string{"-server=false", "-client=false", "-hostile-duration", "1s"}, "Duration: must be at least 6s"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 {
			t.Errorf("run(%q) = %d, want 2 (stdout %q, stderr %q)", tc.args, code, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("run(%q) stderr = %q, want it to mention %q", tc.args, errb.String(), tc.want)
		}
	}
}
