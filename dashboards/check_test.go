//go:build dashboards && linux

package dashboards

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The demo's schedule, from the start of its run. The alerts wait 1m
// before firing and read 1m windows, so the slowdown lasts long enough for
// them to fire with margin on a busy machine, and the check then waits for
// the windows to forget it. An outage in the last seconds of the slowdown
// trips the retrying client's circuit breaker, which slowness never does.
// The attempt timeout is below the slowed upstream's latency, so that
// attempts time out, retries are wanted and the budget has work to do.
const (
	slowStart  = 10 * time.Second
	slowFor    = 90 * time.Second
	outageFor  = 12 * time.Second
	demoFor    = 230 * time.Second // an upper bound: the check stops the demo once the alerts resolve
	resolveBy  = 110 * time.Second // after the slowdown
	scrapeSecs = 1
	stepSecs   = 2 // of the range queries behind the panels
	demoJob    = "shedkit-demo"
)

// incidentAlerts are the alerts that must fire during the incident (from
// the phase that causes them to the end of the slowdown) and resolve after
// it while the demo still runs. The retry alerts are reported, not
// asserted: the demo's adaptive limit keeps the logical request rate so
// low that the retry budget's per-second floor pays for most retries, so
// budget denials come in a burst as the slowdown starts, and amplification
// over a 1m window passes 1.5 only once the healthy traffic has left the
// window, about a minute in: whether either fires is a matter of seconds.
var incidentAlerts = []incidentAlert{
	{"ShedkitProtectedClassShedding", false},
	{"ShedkitLimitCollapsed", false},
	{"ShedkitCircuitBreakerOpened", true},
}

type incidentAlert struct {
	name   string
	outage bool // caused by the outage rather than the slowdown
}

// vocabulary is what each label of shedkit's metrics may hold in the demo.
func vocabulary(instance string) map[string][]string {
	return map[string][]string{
		"job":                         {demoJob},
		"instance":                    {instance},
		"shedkit_limiter":             {"gateway"},
		"shedkit_class":               {"interactive", "batch"},
		"shedkit_decision":            {"admitted", "queued", "rejected", "cancelled"},
		"shedkit_reason":              {"limit_exceeded", "queue_full", "queue_timeout", "deadline_too_short", "cost_too_large", "draining", "rate_limited", "tenant_share", "key_concurrency"},
		"shedkit_outcome":             {"success", "dropped", "ignored", "leaked"},
		"shedkit_retry_client":        {"gateway-upstream"},
		"shedkit_retry_budget":        {"gateway-upstream"},
		"shedkit_retry_resend":        {"true", "false"},
		"shedkit_retry_reason":        {"budget", "breaker", "throttle", "no_retry_header", "deadline", "retry_after", "max_attempts", "inbound_retry", "body_not_replayable"},
		"shedkit_retry_breaker_state": {"closed", "half-open", "open"},
	}
}

// notInDemo are the metrics of the modules the demo does not run, with
// why. A panel that reads only these cannot return series here; its
// names are still checked against what the code exports (cmd/demo's
// TestDashboardsQueryExportedMetrics) and its shape by
// TestDashboardStructure.
var notInDemo = map[string]string{
	"shedkit_store_lease_decisions_total": "middleware/shedredis needs a Redis, which the demo does not run",
}

// demoLacks returns why the demo cannot feed expr, or "" when it can:
// every metric expr reads must be in notInDemo.
func demoLacks(expr string) string {
	why := ""
	for _, m := range metrics(expr) {
		if notInDemo[m] == "" {
			return ""
		}
		why = notInDemo[m]
	}
	return why
}

// timeline holds the wall-clock times of the demo's phases.
type timeline struct {
	start, slowStart, outageStart, slowEnd time.Time
}

func (tl timeline) rel(t time.Time) string {
	return fmt.Sprintf("t=%3.0fs", t.Sub(tl.start).Seconds())
}

func TestDashboardsAgainstPrometheus(t *testing.T) {
	began := time.Now()
	dash := loadDashboard(t)
	promBin := lookPath(t, "PROMETHEUS", "prometheus")
	root := repoRoot()
	tmp := t.TempDir()
	ps := newProcs(t, tmp)
	ctx, cancel := context.WithTimeout(context.Background(), demoFor+3*time.Minute)
	defer cancel()

	demoBin := buildDemo(ctx, t, root, tmp)
	promAddr, demoAddr := freeAddr(t), freeAddr(t)
	startPrometheus(t, ps, promBin, tmp, promAddr, demoAddr, filepath.Join(root, "dashboards", "rules.yaml"))
	api := newPromAPI(promAddr)
	waitFor(ctx, t, 60*time.Second, "Prometheus to be ready", func() bool { return api.ready(ctx) })

	demo, tl := startDemo(ctx, t, ps, demoBin, tmp, demoAddr)
	waitFor(ctx, t, 30*time.Second, "Prometheus to scrape the demo", func() bool {
		s, err := api.query(ctx, `shedkit_admission_limit{job="`+demoJob+`"}`, time.Now())
		return err == nil && len(s) > 0
	})
	fmt.Printf("demo run started; slowdown %s..%s, outage from %s; Prometheus on %s scrapes %s every %ds\n",
		tl.rel(tl.slowStart), tl.rel(tl.slowEnd), tl.rel(tl.outageStart), promAddr, demoAddr, scrapeSecs)

	resolved := watchAlerts(ctx, t, api, demo, tl)
	checkAlertHistory(ctx, t, api, tl)
	checkStillScraped(ctx, t, api, resolved)

	vars := dash.variableValues(stepSecs, scrapeSecs)
	results := checkPanels(ctx, t, api, dash, vars, tl.start, resolved, demoAddr)
	checkAnnotationsAndVariables(ctx, t, api, dash, vars, tl.start, resolved)
	checkRules(ctx, t, api, tl.start, resolved)
	renderPanels(t, root, results, tl, resolved)
	demo.stop()
	fmt.Printf("dashboards-check: %d panel queries, %d incident alerts, in %s\n",
		len(results), len(incidentAlerts), time.Since(began).Round(time.Second))
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// lookPath finds a binary: $ENV when set, else on PATH.
func lookPath(t *testing.T, env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (set %s, or run `make dashboards-check`, which installs it): %v", name, env, err)
	}
	return p
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond every 200 ms until it holds, or fails the test.
func waitFor(ctx context.Context, t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func buildDemo(ctx context.Context, t *testing.T, root, dir string) string {
	bin := filepath.Join(dir, "demo")
	// The demo is in module cmd: build it from there, so that this works
	// with or without the repository's go.work.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./demo")
	cmd.Dir = filepath.Join(root, "cmd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	return bin
}

// startPrometheus runs Prometheus on addr with a fresh data directory,
// scraping the demo every second and evaluating the rules every second.
func startPrometheus(t *testing.T, ps *procs, bin, dir, addr, target, rules string) {
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]ds
  scrape_timeout: %[1]ds
  evaluation_interval: %[1]ds
rule_files: [%[2]q]
scrape_configs:
  - job_name: %[3]s
    static_configs:
      - targets: [%[4]q]
`, scrapeSecs, rules, demoJob, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ps.start("prometheus", filepath.Join(dir, "prometheus.log"), syscall.SIGTERM, nil, bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
}

// startDemo runs the protected demo and returns when its run starts, with
// the times of its phases.
func startDemo(ctx context.Context, t *testing.T, ps *procs, bin, dir, metricsAddr string) (*proc, timeline) {
	started := make(chan time.Time, 1)
	onLine := func(line string) {
		if strings.Contains(line, "== protected run ==") {
			started <- time.Now()
		}
	}
	demo := ps.start("demo", filepath.Join(dir, "demo.log"), syscall.SIGINT, onLine, bin,
		"-mode", "protected", "-duration", demoFor.String(),
		"-slow-start", slowStart.String(), "-slow-for", slowFor.String(),
		"-outage-start", (slowStart + slowFor - outageFor).String(), "-outage-for", outageFor.String(),
		"-attempt-timeout", "300ms", "-out", "", "-metrics-addr", metricsAddr)
	select {
	case t0 := <-started:
		return demo, timeline{start: t0, slowStart: t0.Add(slowStart),
			outageStart: t0.Add(slowStart + slowFor - outageFor), slowEnd: t0.Add(slowStart + slowFor)}
	case <-demo.done:
		t.Fatalf("the demo exited before its run started: %v", demo.err)
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not start its run within 60 s")
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	panic("unreachable")
}

// watchAlerts polls the alerts every 2 s, prints their state changes, and
// returns once the slowdown is over and every incident alert is inactive:
// the moment they resolved. It fails the test if that does not happen
// within resolveBy, or if the demo exits first.
func watchAlerts(ctx context.Context, t *testing.T, api *promAPI, demo *proc, tl timeline) time.Time {
	states := map[string]string{}
	deadline := tl.slowEnd.Add(resolveBy)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		now := time.Now()
		as, err := api.alerts(ctx)
		if err != nil {
			t.Fatalf("alerts: %v", err)
		}
		cur := alertStates(as)
		for _, name := range union(states, cur) {
			if states[name] != cur[name] {
				fmt.Printf("  %s %-9s alert %-30s %s -> %s\n", tl.rel(now), phase(tl, now), name, or(states[name], "inactive"), or(cur[name], "inactive"))
			}
		}
		states = cur
		if now.After(tl.slowEnd) && !slices.ContainsFunc(incidentAlerts, func(a incidentAlert) bool { return cur[a.name] != "" }) {
			fmt.Printf("  %s every incident alert is inactive, %.0fs after the slowdown\n", tl.rel(now), now.Sub(tl.slowEnd).Seconds())
			return now
		}
		if now.After(deadline) {
			t.Fatalf("incident alerts still active %v after the slowdown: %v", resolveBy, cur)
		}
		select {
		case <-tick.C:
		case <-demo.done:
			t.Fatalf("the demo exited before the alerts resolved: %v", demo.err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// alertStates maps alert names to their most advanced state over their
// label sets: firing, pending, or absent (inactive).
func alertStates(as []alert) map[string]string {
	out := map[string]string{}
	for _, a := range as {
		name := a.Labels["alertname"]
		if out[name] != "firing" {
			out[name] = a.State
		}
	}
	return out
}

func union(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func phase(tl timeline, t time.Time) string {
	switch {
	case t.Before(tl.slowStart):
		return "healthy"
	case t.Before(tl.outageStart):
		return "slow"
	case t.Before(tl.slowEnd):
		return "slow+down"
	default:
		return "recovered"
	}
}

// checkAlertHistory asserts, from the ALERTS series Prometheus keeps,
// that no shedkit alert was even pending before the slowdown and that each
// incident alert fired during its phase of the incident.
func checkAlertHistory(ctx context.Context, t *testing.T, api *promAPI, tl timeline) {
	before, err := api.queryRange(ctx, `ALERTS{alertname=~"Shedkit.+"}`, tl.start, tl.slowStart.Add(-time.Second), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range before {
		t.Errorf("alert active while the upstream was healthy: %s", s.labels())
	}
	for _, a := range incidentAlerts {
		from := tl.slowStart
		if a.outage {
			from = tl.outageStart
		}
		fired, err := api.queryRange(ctx, `ALERTS{alertstate="firing", alertname="`+a.name+`"}`, from, tl.slowEnd, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := time.Time{}
		for _, s := range fired {
			if ts, _ := s.points(); len(ts) > 0 && (first.IsZero() || ts[0].Before(first)) {
				first = ts[0]
			}
		}
		if first.IsZero() {
			t.Errorf("alert %s did not fire between %s and the end of the slowdown (%s)", a.name, tl.rel(from), tl.rel(tl.slowEnd))
			continue
		}
		fmt.Printf("  alert %-30s fired at %s (%s), inactive again by the end of the watch\n", a.name, tl.rel(first), phase(tl, first))
	}
}

// checkStillScraped asserts that the demo was still up and scraped when
// the alerts resolved: they resolved because it recovered, not because
// its series went away.
func checkStillScraped(ctx context.Context, t *testing.T, api *promAPI, at time.Time) {
	up, err := api.query(ctx, `up{job="`+demoJob+`"} == 1 and on() count(shedkit_admission_limit{job="`+demoJob+`"}) > 0`, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(up) == 0 {
		t.Errorf("the demo was not scraped with its shedkit series when the alerts resolved")
	}
}

// panelResult is what one panel query returned over the run.
type panelResult struct {
	query
	series []series
}

// checkPanels runs every panel query over the run, as Grafana would with
// every variable at "All", and asserts that each returns series that carry
// the labels its legend names, with values shedkit documents.
func checkPanels(ctx context.Context, t *testing.T, api *promAPI, d *dashboard, vars map[string]string, start, end time.Time, instance string) []panelResult {
	vocab := vocabulary(instance)
	fmt.Printf("panels (every query over the run, step %ds, $__rate_interval %s):\n", stepSecs, vars["__rate_interval"])
	var out []panelResult
	for _, q := range d.queries() {
		expr, unknown := expand(q.expr, vars)
		if len(unknown) > 0 {
			t.Errorf("%s: unknown variables %v", q, unknown)
			continue
		}
		ss, err := api.queryRange(ctx, expr, start, end, stepSecs*time.Second)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		fmt.Printf("  %-36s %s %3d series  %s\n", q.panel, q.refID, len(ss), labelSummary(ss, legendLabels(q.legend)))
		if why := demoLacks(q.expr); len(ss) == 0 && why != "" {
			fmt.Printf("  %-36s %s no series expected: %s\n", q.panel, q.refID, why)
		} else if len(ss) == 0 {
			t.Errorf("%s returned no series: %s", q, expr)
		}
		for _, s := range ss {
			checkSeriesLabels(t, q, s, vocab)
		}
		out = append(out, panelResult{query: q, series: ss})
	}
	return out
}

func checkSeriesLabels(t *testing.T, q query, s series, vocab map[string][]string) {
	for _, l := range legendLabels(q.legend) {
		if s.Metric[l] == "" {
			t.Errorf("%s: series %s lacks the label %s its legend names", q, s.labels(), l)
		}
	}
	for l, v := range s.Metric {
		if allowed, ok := vocab[l]; ok && !slices.Contains(allowed, v) {
			t.Errorf("%s: series %s: %s=%q is not one of %v", q, s.labels(), l, v, allowed)
		}
	}
}

// labelSummary lists the values of the legend's labels across series.
func labelSummary(ss []series, labels []string) string {
	var parts []string
	for _, l := range labels {
		var vals []string
		for _, s := range ss {
			if v := s.Metric[l]; !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
		sort.Strings(vals)
		parts = append(parts, l+"="+strings.Join(vals, "|"))
	}
	return strings.Join(parts, " ")
}

var labelValuesQuery = regexp.MustCompile(`^label_values\((?:(.*),\s*)?(\w+)\)$`)

// checkAnnotationsAndVariables runs the annotation queries (the incident's
// alerts must show) and the variable queries (each must offer values).
func checkAnnotationsAndVariables(ctx context.Context, t *testing.T, api *promAPI, d *dashboard, vars map[string]string, start, end time.Time) {
	for _, a := range d.Annotations.List {
		if a.Expr == "" {
			continue
		}
		expr, _ := expand(a.Expr, vars)
		ss, err := api.queryRange(ctx, expr, start, end, stepSecs*time.Second)
		if err != nil || len(ss) == 0 {
			t.Errorf("annotation %q: %d series, %v", a.Name, len(ss), err)
		}
		fmt.Printf("  annotation %-25s %3d series  %s\n", a.Name, len(ss), labelSummary(ss, []string{"alertname"}))
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesQuery.FindStringSubmatch(v.queryString())
		if m == nil {
			t.Errorf("variable %s: cannot read %q", v.Name, v.queryString())
			continue
		}
		match, _ := expand(m[1], vars)
		values, err := api.labelValues(ctx, m[2], match, start, end)
		if err != nil || len(values) == 0 {
			t.Errorf("variable %s: %q gave %v, %v", v.Name, v.queryString(), values, err)
		}
		fmt.Printf("  variable $%-24s values %v\n", v.Name, values)
	}
}

// checkRules asserts that Prometheus evaluated every rule without error
// and that every recording rule produced series during the run.
func checkRules(ctx context.Context, t *testing.T, api *promAPI, start, end time.Time) {
	rules, err := api.rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var alerting int
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" {
			t.Errorf("rule %s: health %q, last error %q", r.Name, r.Health, r.LastError)
		}
		if r.Type != "recording" {
			alerting++
			continue
		}
		ss, err := api.queryRange(ctx, r.Name, start, end, stepSecs*time.Second)
		if err != nil || len(ss) == 0 {
			t.Errorf("recording rule %s: %d series, %v", r.Name, len(ss), err)
		}
		fmt.Printf("  recording rule %-52s %3d series\n", r.Name, len(ss))
	}
	fmt.Printf("  %d alerting rules loaded, all healthy\n", alerting)
}
