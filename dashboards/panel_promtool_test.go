package dashboards

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// promtoolPanel evaluates the query of the panel titled title with
// promtool's rule unit tests (no Prometheus server): tests is the body of
// a rule test file whose expressions say $EXPR for the panel's query.
// Skipped without promtool, as TestRulesWithPromtool.
func promtoolPanel(t *testing.T, title, tests string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (make dashboards-check installs it)")
	}
	expr, err := json.Marshal(panelExpr(t, loadDashboard(t), title))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "panel_test.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(tests, "$EXPR", string(expr))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the %q panel's query (%s):\n%v\n%s", title, expr, err, out)
	}
}

// TestBreakerPanelSeesFirstOpening evaluates the "Circuit breaker
// transitions" panel's query on a breaker that opens for the first time:
// its counter series appears at 1, with no earlier sample for increase()
// to subtract, and the panel must still show that opening.
func TestBreakerPanelSeesFirstOpening(t *testing.T) {
	// Instance a's breaker opens for the first time at 2m; instance b's
	// opened long before the window, so it adds nothing. Samples every
	// 15 s, as the 1m $__rate_interval assumes.
	promtoolPanel(t, "Circuit breaker transitions", `evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'shedkit_retry_breaker_transitions_total{job="api", instance="a:9464", shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
        values: '_x8 1x20'
      - series: 'shedkit_retry_breaker_transitions_total{job="api", instance="b:9464", shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
        values: '3x28'
    promql_expr_test:
      - expr: $EXPR
        eval_time: 2m30s
        exp_samples:
          - labels: '{shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
            value: 1
      - expr: $EXPR
        eval_time: 4m30s
        exp_samples:
          - labels: '{shedkit_retry_client="up", shedkit_retry_breaker_state="open"}'
            value: 0
`)
}

// TestRejectionsPanelCountsRareRejections: the "Rejections by class and
// reason" panel shows how many requests were rejected in each interval,
// so that a rare rejection (one request of a protected class timing out
// in its queue) is a visible 1, not a rate of 0.017/s drawn on the scale
// of a class shed by the hundred. Its first rejection of a reason creates
// the counter series at 1, with no earlier sample for rate() or
// increase() to subtract: the panel must count it too, as the breaker
// panel does.
func TestRejectionsPanelCountsRareRejections(t *testing.T) {
	// interactive's first queue timeout at 2m; batch rejected 1 request
	// every 15 s (4 a minute) for ever; admissions never count.
	promtoolPanel(t, "Rejections by class and reason", `evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'shedkit_admission_decisions_total{job="api", instance="a:9464", shedkit_limiter="gw", shedkit_class="interactive", shedkit_decision="rejected", shedkit_reason="queue_timeout"}'
        values: '_x8 1x20'
      - series: 'shedkit_admission_decisions_total{job="api", instance="a:9464", shedkit_limiter="gw", shedkit_class="batch", shedkit_decision="rejected", shedkit_reason="limit_exceeded"}'
        values: '0+1x28'
      - series: 'shedkit_admission_decisions_total{job="api", instance="a:9464", shedkit_limiter="gw", shedkit_class="interactive", shedkit_decision="admitted"}'
        values: '0+100x28'
    promql_expr_test:
      - expr: $EXPR
        eval_time: 2m30s
        exp_samples:
          - labels: '{shedkit_limiter="gw", shedkit_class="interactive", shedkit_reason="queue_timeout"}'
            value: 1
          - labels: '{shedkit_limiter="gw", shedkit_class="batch", shedkit_reason="limit_exceeded"}'
            value: 4
      - expr: $EXPR
        eval_time: 4m30s
        exp_samples:
          - labels: '{shedkit_limiter="gw", shedkit_class="interactive", shedkit_reason="queue_timeout"}'
            value: 0
          - labels: '{shedkit_limiter="gw", shedkit_class="batch", shedkit_reason="limit_exceeded"}'
            value: 4
`)
}

// TestRareEventPanelsCountEachEvent: the other panels of rare events, a
// retry not made and a tenant refused its lease, count them per interval
// as the rejections panel does, the first one of a series included.
func TestRareEventPanelsCountEachEvent(t *testing.T) {
	for _, tc := range []struct{ title, series, labels string }{
		{"Retries not made, by reason",
			`shedkit_retry_denied_total{job="api", instance="a:9464", shedkit_retry_client="up", shedkit_retry_reason="budget"}`,
			`{shedkit_retry_client="up", shedkit_retry_reason="budget"}`},
		{"Tenant lease rejections",
			`shedkit_store_lease_decisions_total{job="api", instance="a:9464", shedkit_store_name="leases", shedkit_decision="rejected", shedkit_store_fallback="false"}`,
			`{shedkit_store_name="leases", shedkit_store_fallback="false"}`},
	} {
		t.Run(tc.title, func(t *testing.T) {
			// The first event at 2m, none after.
			promtoolPanel(t, tc.title, `evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: '`+tc.series+`'
        values: '_x8 1x20'
    promql_expr_test:
      - expr: $EXPR
        eval_time: 2m30s
        exp_samples:
          - labels: '`+tc.labels+`'
            value: 1
      - expr: $EXPR
        eval_time: 4m30s
        exp_samples:
          - labels: '`+tc.labels+`'
            value: 0
`)
		})
	}
}
