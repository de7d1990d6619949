package dashboards

import (
	"os/exec"
	"testing"
)

// TestRulesWithPromtool runs promtool's own checks of the rules and their
// unit tests (rules_test.yaml) whenever promtool is installed, so that a
// plain `go test ./...` catches a broken rule or alert, not only
// `make dashboards-check`. Without promtool it is skipped.
func TestRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make dashboards-check installs it)")
	}
	for _, args := range [][]string{
		{"check", "rules", "rules.yaml"},
		{"test", "rules", "rules_test.yaml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
