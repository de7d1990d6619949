package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The parts of a Grafana dashboard the checks read.
type dashboard struct {
	UID         string `json:"uid"`
	Title       string `json:"title"`
	Panels      []panel
	Annotations struct {
		List []annotation `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	GridPos     gridPos        `json:"gridPos"`
	Datasource  *datasourceRef `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // the panels of a collapsed row
}

type gridPos struct{ X, Y, W, H int }

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	RefID        string         `json:"refId"`
	Datasource   *datasourceRef `json:"datasource"`
}

type annotation struct {
	Name       string         `json:"name"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or an object with a query field
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// queryString returns a query variable's query, in either of the forms
// Grafana writes.
func (v variable) queryString() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct{ Query string }
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t testing.TB) *dashboard {
	t.Helper()
	b, err := os.ReadFile("shedkit.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("shedkit.json: %v", err)
	}
	return &d
}

// query is one target of one panel, or one annotation or variable query.
type query struct {
	row    string // title of the row the panel is in
	panel  string // panel title
	refID  string
	expr   string
	legend string
}

func (q query) String() string { return q.panel + "/" + q.refID }

// queries returns every panel target in dashboard order, rows included
// (collapsed rows keep their panels inside).
func (d *dashboard) queries() []query {
	var out []query
	row := ""
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				row = p.Title
			}
			for _, tg := range p.Targets {
				out = append(out, query{row: row, panel: p.Title, refID: tg.RefID, expr: tg.Expr, legend: tg.LegendFormat})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var (
	varRef    = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)`)
	legendRef = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
	byClause  = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	metricRef = regexp.MustCompile(`\b(shedkit_\w+|ALERTS)\b`)
	matchers  = regexp.MustCompile(`\{[^}]*\}`)
)

// metrics returns the metric names an expression reads: the shedkit_ and
// ALERTS names left once label matchers and by clauses, which hold label
// names, are taken out.
func metrics(expr string) []string {
	bare := byClause.ReplaceAllString(matchers.ReplaceAllString(expr, ""), "")
	return metricRef.FindAllString(bare, -1)
}

// expand replaces Grafana variables as Grafana would before sending a
// query: $name, ${name} and [[name]]. It returns the names it did not know.
func expand(expr string, vars map[string]string) (string, []string) {
	var unknown []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if v, ok := vars[name]; ok {
			return v
		}
		unknown = append(unknown, name)
		return m
	})
	return out, unknown
}

// legendLabels returns the labels a legend format names: every series the
// query returns must carry them.
func legendLabels(legend string) []string {
	var out []string
	for _, m := range legendRef.FindAllStringSubmatch(legend, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// variableValues maps the dashboard's variables to the values the checks
// substitute: "All" (the allValue) for query variables, the built-in
// intervals from the step of a range query and the scrape interval.
func (d *dashboard) variableValues(stepSeconds, scrapeSeconds int) map[string]string {
	// Grafana's $__rate_interval: max($__interval + scrape interval,
	// 4 x scrape interval), so that a rate window holds enough samples.
	rate := max(stepSeconds+scrapeSeconds, 4*scrapeSeconds)
	vars := map[string]string{
		"__interval":      fmt.Sprintf("%ds", stepSeconds),
		"__rate_interval": fmt.Sprintf("%ds", rate),
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && v.IncludeAll {
			vars[v.Name] = v.AllValue
		}
	}
	return vars
}

// The metric names shedkit's instruments get from the OpenTelemetry
// Prometheus exporter (unit suffixes included), and ALERTS.
var knownMetrics = []string{
	"shedkit_admission_limit", "shedkit_admission_cost_budget",
	"shedkit_admission_inflight", "shedkit_admission_inflight_cost", "shedkit_admission_queue_depth",
	"shedkit_admission_decisions_total", "shedkit_admission_releases_total",
	"shedkit_admission_queue_wait_seconds_bucket", "shedkit_admission_queue_wait_seconds_sum", "shedkit_admission_queue_wait_seconds_count",
	"shedkit_admission_latency_seconds_bucket", "shedkit_admission_latency_seconds_sum", "shedkit_admission_latency_seconds_count",
	"shedkit_retry_requests_total", "shedkit_retry_attempts_total", "shedkit_retry_denied_total",
	"shedkit_retry_budget_balance", "shedkit_retry_breaker_transitions_total",
	// middleware/shedredis
	"shedkit_store_errors_total", "shedkit_store_fallbacks_total", "shedkit_store_lease_decisions_total",
	"shedkit_store_duration_seconds_bucket", "shedkit_store_duration_seconds_sum", "shedkit_store_duration_seconds_count",
	"ALERTS",
}

// TestDashboardStructure checks what can be checked without Prometheus:
// the shape Grafana needs, units, the data source and instance variables,
// metric names, and legends that only name labels the query keeps.
func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	checkVariables(t, d)
	checkLayout(t, d.Panels)
	vars := d.variableValues(15, 15)
	qs := d.queries()
	if len(qs) == 0 {
		t.Fatal("no panel queries")
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			checkDatasource(t, "annotation "+a.Name, a.Datasource)
			qs = append(qs, query{panel: "annotation " + a.Name, refID: "-", expr: a.Expr})
		}
	}
	for _, q := range qs {
		checkQuery(t, q, vars)
	}
}

func checkVariables(t *testing.T, d *dashboard) {
	names := map[string]variable{}
	for _, v := range d.Templating.List {
		names[v.Name] = v
	}
	if ds, ok := names["datasource"]; !ok || ds.Type != "datasource" || ds.queryString() != "prometheus" {
		t.Errorf("want a datasource variable of type prometheus, got %+v", ds)
	}
	for _, n := range []string{"job", "instance"} {
		v, ok := names[n]
		if !ok || v.Type != "query" || !v.IncludeAll || v.AllValue == "" {
			t.Errorf("want a query variable %q with All and an allValue, got %+v", n, v)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && !strings.HasPrefix(v.queryString(), "label_values(") {
			t.Errorf("variable %s: query %q is not label_values(...)", v.Name, v.queryString())
		}
	}
}

func checkDatasource(t *testing.T, what string, ds *datasourceRef) {
	if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: datasource %+v, want the ${datasource} variable", what, ds)
	}
}

// checkLayout checks panel ids, units, data sources and that the panels
// tile the 24-column grid without overlapping.
func checkLayout(t *testing.T, ps []panel) {
	ids := map[int]bool{}
	var placed []panel
	rows, inRow := 0, 0
	for _, p := range ps {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W < 1 || g.X < 0 || g.X+g.W > 24 || g.H < 1 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for _, o := range placed {
			og := o.GridPos
			if g.X < og.X+og.W && og.X < g.X+g.W && g.Y < og.Y+og.H && og.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", p.Title, o.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			if rows > 0 && inRow == 0 {
				t.Errorf("an empty row before %q", p.Title)
			}
			rows, inRow = rows+1, len(p.Panels)
			continue
		}
		inRow++
		checkDatasource(t, "panel "+p.Title, p.Datasource)
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		if p.Description == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.RefID == "" {
				t.Errorf("panel %q: refId %q empty or used twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			checkDatasource(t, fmt.Sprintf("panel %s/%s", p.Title, tg.RefID), tg.Datasource)
		}
	}
	if rows < 2 || inRow == 0 {
		t.Errorf("want one row per concern, each with panels: %d rows, %d panels in the last", rows, inRow)
	}
}

func checkQuery(t *testing.T, q query, vars map[string]string) {
	if q.expr == "" {
		t.Errorf("%s: empty query", q)
		return
	}
	if _, unknown := expand(q.expr, vars); len(unknown) > 0 {
		t.Errorf("%s: unknown variables %v", q, unknown)
	}
	if !strings.Contains(q.expr, `job=~"$job"`) {
		t.Errorf("%s: does not filter by $job", q)
	}
	if !strings.HasPrefix(q.panel, "annotation ") && !strings.Contains(q.expr, `instance=~"$instance"`) {
		t.Errorf("%s: does not filter by $instance", q)
	}
	for _, m := range metrics(q.expr) {
		if !slices.Contains(knownMetrics, m) {
			t.Errorf("%s: metric %s is not one shedkit exports", q, m)
		}
	}
	// A legend label must survive every aggregation of the query.
	for _, l := range legendLabels(q.legend) {
		for _, by := range byClause.FindAllStringSubmatch(q.expr, -1) {
			if !slices.Contains(strings.Fields(strings.ReplaceAll(by[1], ",", " ")), l) {
				t.Errorf("%s: legend names %s, which by (%s) drops", q, l, by[1])
			}
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"job": ".+", "__rate_interval": "4s"}
	got, unknown := expand(`rate(x{job=~"$job", a="${job}", b="[[job]]"}[$__rate_interval]) $nope`, vars)
	want := `rate(x{job=~".+", a=".+", b=".+"}[4s]) $nope`
	if got != want || !slices.Equal(unknown, []string{"nope"}) {
		t.Errorf("expand = %q, %v; want %q, [nope]", got, unknown, want)
	}
}
