//go:build dashboards && linux

package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// promAPI is a minimal client of Prometheus' HTTP API (v1), with the
// standard library only.
type promAPI struct {
	base   string // http://127.0.0.1:port
	client http.Client
}

func newPromAPI(addr string) *promAPI {
	return &promAPI{base: "http://" + addr, client: http.Client{Timeout: 15 * time.Second}}
}

// series is one series of a query result: its labels and its samples.
type series struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"` // range queries: [unix seconds, "value"]
	Value  [2]any            `json:"value"`  // instant queries
}

// labels formats the series' labels, sorted, for messages.
func (s series) labels() string {
	keys := make([]string, 0, len(s.Metric))
	for k := range s.Metric {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(s.Metric[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// points returns the samples of a range query result as times and values.
func (s series) points() ([]time.Time, []float64) {
	ts := make([]time.Time, 0, len(s.Values))
	vs := make([]float64, 0, len(s.Values))
	for _, v := range s.Values {
		sec, _ := v[0].(float64)
		str, _ := v[1].(string)
		f, err := strconv.ParseFloat(str, 64)
		if err != nil {
			continue
		}
		ts = append(ts, time.Unix(0, int64(sec*1e9)))
		vs = append(vs, f)
	}
	return ts, vs
}

// get calls an API endpoint and decodes the data field of its answer.
func (p *promAPI) get(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("GET %s %v: %s", path, params, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

func (p *promAPI) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct{ Result []series }
	err := p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}, &data)
	return data.Result, err
}

func (p *promAPI) query(ctx context.Context, expr string, at time.Time) ([]series, error) {
	var data struct{ Result []series }
	err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}}, &data)
	return data.Result, err
}

func (p *promAPI) labelValues(ctx context.Context, label, match string, start, end time.Time) ([]string, error) {
	params := url.Values{"start": {unix(start)}, "end": {unix(end)}}
	if match != "" {
		params.Set("match[]", match)
	}
	var values []string
	err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", params, &values)
	return values, err
}

// alert is an entry of /api/v1/alerts: one label set of one alert rule.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending, firing
}

func (p *promAPI) alerts(ctx context.Context) ([]alert, error) {
	var data struct{ Alerts []alert }
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// rule is an entry of /api/v1/rules.
type rule struct {
	Name      string `json:"name"`
	Type      string `json:"type"` // recording, alerting
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promAPI) rules(ctx context.Context) ([]rule, error) {
	var data struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	err := p.get(ctx, "/api/v1/rules", nil, &data)
	var out []rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, err
}

// ready reports whether Prometheus answers /-/ready with 200.
func (p *promAPI) ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/-/ready", nil)
	if err != nil {
		return false
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
