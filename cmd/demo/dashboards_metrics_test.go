package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/middleware/shedredis"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/shedotel"
)

// TestDashboardsQueryExportedMetrics runs shedkit's instruments through the
// OpenTelemetry Prometheus exporter the demo uses and checks every metric
// and label the dashboard (dashboards/shedkit.json) and the rules
// (dashboards/rules.yaml) query against what it exposes: a panel or an
// alert on a name the exporter never writes is silently empty. The
// dashboards module keeps a list of its own; this test checks the names
// against the code itself.
func TestDashboardsQueryExportedMetrics(t *testing.T) {
	families := exportedFamilies(t)
	dir := filepath.Join("..", "..", "dashboards")
	exprs := dashboardExprs(t, filepath.Join(dir, "shedkit.json"))
	rules, records := ruleExprs(t, filepath.Join(dir, "rules.yaml"))
	exprs = append(exprs, rules...)
	if len(exprs) < 20 {
		t.Fatalf("found only %d expressions: the parsing went wrong", len(exprs))
	}
	for _, e := range exprs {
		checkExpr(t, e, families, records)
	}
	// The drivers must reach every instrument, or a missing name above
	// would be the test's fault.
	n := 0
	for name := range families {
		if strings.HasPrefix(name, "shedkit_") {
			n++
		}
	}
	if want := 20 + 3*2; n != want {
		t.Errorf("the exporter wrote %d shedkit series names, want %d (20 instruments, three of them histograms of three series)", n, want)
	}
}

// family is what the exporter writes of one metric: its labels.
type family map[string]bool

// exportedFamilies drives every shedkit instrument at least once and
// returns the series names the exporter writes (a histogram's _bucket,
// _sum and _count), each with its label names.
func exportedFamilies(t *testing.T) map[string]family {
	reg := prometheus.NewRegistry()
	exp, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	driveAdmission(t, mp)
	driveRetries(t, mp)
	driveStore(t, mp)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		labels := family{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		name := mf.GetName()
		if mf.GetType().String() == "HISTOGRAM" {
			out[name+"_sum"], out[name+"_count"] = labels, labels
			bucket := family{"le": true}
			for l := range labels {
				bucket[l] = true
			}
			out[name+"_bucket"] = bucket
			continue
		}
		out[name] = labels
	}
	return out
}

// driveAdmission makes a limiter with a cost budget, an adaptive limit's
// decisions and tenants produce every admission instrument.
func driveAdmission(t *testing.T, mp *sdkmetric.MeterProvider) {
	m, err := shedotel.New(shedotel.Config{MeterProvider: mp, Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := shed.New(shed.Config{Limit: 1, MaxCost: 100, Observer: m, Classes: []shed.ClassConfig{
		{Name: "interactive", QueueDepth: 1, MaxWait: time.Second}, {Name: "batch"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := m.Register(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	g, err := limits.NewGradient(limits.GradientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lreg, err := m.RegisterLimit(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lreg.Unregister() })
	t0 := time.Unix(1_800_000_000, 0)
	g.Observe(shed.Sample{Now: t0})
	for i := range 40 {
		g.Observe(shed.Sample{Now: t0.Add(time.Duration(i+1) * 25 * time.Millisecond), Timed: true, Latency: 10 * time.Millisecond, InFlight: 1})
	}

	a, err := l.TryAcquireAt(t0, shed.Request{Class: 0, Cost: 5, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAt(t0, shed.Request{Class: 1}); err == nil {
		t.Fatal("admitted over the limit")
	}
	w := shed.NewWaiter(func(*shed.Waiter) {})
	if _, queued, _ := l.EnqueueAt(t0, shed.Request{Class: 0}, w); !queued {
		t.Fatal("not queued")
	}
	a.ReleaseAt(t0.Add(50*time.Millisecond), shed.Success)
	p, err := w.Result()
	if err != nil {
		t.Fatal(err)
	}
	p.ReleaseAt(t0.Add(60*time.Millisecond), shed.Dropped)
}

// driveRetries sends requests through a retrying transport to a stub
// upstream that always answers 502, so that attempts are resent, retries
// are denied and the circuit breaker opens.
func driveRetries(t *testing.T, mp *sdkmetric.MeterProvider) {
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{Name: "up"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Name: "up", Budget: b, MaxAttempts: 2, MeterProvider: mp,
		Breaker: retrybudget.BreakerConfig{ConsecutiveFailures: 1},
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusBadGateway, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
		}),
		Sleep: func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
		if resp, err := rt.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
}

// driveStore runs middleware/shedredis's Concurrency against an address
// where no Redis listens (the demo runs none): every call fails, so its
// errors, fallbacks and call durations are recorded, and a limit of 1
// admits one lease and rejects the next, on the local share.
func driveStore(t *testing.T, mp *sdkmetric.MeterProvider) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	c, err := shedredis.NewConcurrency(shedredis.Config{Client: client, Replicas: 1, Timeout: 50 * time.Millisecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Acquire(context.Background(), "tenant", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := c.Acquire(context.Background(), "tenant", 1); !errors.Is(err, shedredis.ErrConcurrencyLimit) {
		t.Fatalf("a second lease over a limit of 1: %v, want ErrConcurrencyLimit", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// dashboardExprs returns every query of the dashboard: panel targets,
// rows' panels included, annotations and variables.
func dashboardExprs(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels      []dashPanel
		Annotations struct{ List []struct{ Expr string } }
		Templating  struct {
			List []struct {
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		out = append(out, a.Expr)
	}
	for _, v := range d.Templating.List {
		var s string
		if json.Unmarshal(v.Query, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

type dashPanel struct {
	Targets []struct{ Expr string }
	Panels  []dashPanel
}

// ruleExprs returns the expressions of rules.yaml and the names of its
// recording rules. It reads the two forms the file uses, `expr: |` with
// an indented block and `expr: one line`, so that no YAML package is
// needed.
func ruleExprs(t *testing.T, path string) (exprs []string, records []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if r, ok := strings.CutPrefix(line, "- record:"); ok {
			records = append(records, strings.TrimSpace(r))
		}
		e, ok := strings.CutPrefix(line, "expr:")
		if !ok {
			continue
		}
		if e = strings.TrimSpace(e); e != "|" {
			exprs = append(exprs, e)
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " ")) + 1
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
			i++
			block = append(block, lines[i])
		}
		exprs = append(exprs, strings.Join(block, "\n"))
	}
	return exprs, records
}

var (
	// selectorRe is a metric name, with its label matchers when it has
	// any; a name with a colon is a recording rule's.
	selectorRe = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupingRe = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)
	stringRe   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// labelValuesRe is a Grafana variable query: label_values(selector, label).
	labelValuesRe = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
)

// labelsEverywhere are the labels Prometheus adds to every series (or, for
// le, that the _bucket series carry).
var labelsEverywhere = []string{"job", "instance", "le", "__name__", "alertname", "alertstate"}

// checkExpr checks that the shedkit_ metrics and recording rules e reads
// exist, that its label matchers name labels those metrics carry, and that
// its grouping labels are carried by at least one of them.
func checkExpr(t *testing.T, e string, families map[string]family, records []string) {
	t.Helper()
	if m := labelValuesRe.FindStringSubmatch(e); m != nil {
		e = m[1] + " by (" + m[2] + ")" // the label must be on the selector's series
	}
	bare := groupingRe.ReplaceAllString(stringRe.ReplaceAllString(e, `""`), "")
	var read []family
	for _, m := range selectorRe.FindAllStringSubmatch(bare, -1) {
		name := m[1]
		switch {
		case strings.Contains(name, ":"):
			if !slices.Contains(records, name) {
				t.Errorf("%q reads the recording rule %s, which rules.yaml does not define", e, name)
			}
			continue
		case !strings.HasPrefix(name, "shedkit_"):
			continue
		}
		f, ok := families[name]
		if !ok {
			t.Errorf("%q reads %s, which the exporter does not write", e, name)
			continue
		}
		read = append(read, f)
		for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if !f[lm[1]] && !slices.Contains(labelsEverywhere, lm[1]) {
				t.Errorf("%q matches label %s on %s, which has none", e, lm[1], name)
			}
		}
	}
	for _, g := range groupingRe.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.FieldsFunc(g[2], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
			if slices.Contains(labelsEverywhere, l) || len(read) == 0 {
				continue
			}
			if !slices.ContainsFunc(read, func(f family) bool { return f[l] }) {
				t.Errorf("%q groups by %s, which none of its shedkit metrics carries", e, l)
			}
		}
	}
}
