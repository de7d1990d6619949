package dashboards

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// panelExpr returns the query of the panel titled title, its variables
// replaced as Grafana would with every variable at All, a 15 s scrape
// interval and a 15 s step: $__rate_interval is then 1m.
func panelExpr(t *testing.T, d *dashboard, title string) string {
	t.Helper()
	for _, q := range d.queries() {
		if q.panel == title {
			expr, unknown := expand(q.expr, d.variableValues(15, 15))
			if len(unknown) > 0 {
				t.Fatalf("%s: unknown variables %v", q, unknown)
			}
			return expr
		}
	}
	t.Fatalf("no panel %q", title)
	return ""
}

// TestBreakerPanelSeesFirstOpening evaluates the "Circuit breaker
// transitions" panel's query with promtool's rule unit tests (no
// Prometheus server) on a breaker that opens for the first time: its
// counter series appears at 1, with no earlier sample for increase() to
// subtract, and the panel must still show that opening. Skipped without
// promtool, as TestRulesWithPromtool.
func TestBreakerPanelSeesFirstOpening(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make dashboards-check installs it)")
	}
	expr, err := json.Marshal(panelExpr(t, loadDashboard(t), "Circuit breaker transitions"))
	if err != nil {
		t.Fatal(err)
	}
	// Instance a's breaker opens for the first time at 2m; instance b's
	// opened long before the window, so it adds nothing. Samples every
	// 15 s, as the 1m $__rate_interval assumes.
	tests := `evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'shedkit_retry_breaker_transitions_total{job="api", instance="a:9464", shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
        values: '_x8 1x20'
      - series: 'shedkit_retry_breaker_transitions_total{job="api", instance="b:9464", shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
        values: '3x28'
    promql_expr_test:
      - expr: ` + string(expr) + `
        eval_time: 2m30s
        exp_samples:
          - labels: '{shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
            value: 1
      - expr: ` + string(expr) + `
        eval_time: 4m30s
        exp_samples:
          - labels: '{shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
            value: 0
`
	path := filepath.Join(t.TempDir(), "panel_test.yaml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the panel's query on a breaker's first opening (%s):\n%v\n%s", expr, err, out)
	}
}
