package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// Output formats are deterministic: fixed column order, floats with 6
// significant digits, NaN and infinities as empty CSV cells and JSON
// nulls (with "recovered": false next to an infinite recovery).

func fmtFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return b
	}
	return strconv.AppendFloat(b, v, 'g', 6, 64)
}

// jsonIntField appends ,"name":v.
func jsonIntField(b []byte, name string, v int64) []byte {
	b = append(b, ",\""...)
	b = append(b, name...)
	b = append(b, "\":"...)
	return strconv.AppendInt(b, v, 10)
}

// jsonFloatField appends ,"name":v as jsonFloat writes v.
func jsonFloatField(b []byte, name string, v float64) []byte {
	b = append(b, ",\""...)
	b = append(b, name...)
	b = append(b, "\":"...)
	return jsonFloat(b, v)
}

func jsonFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', 6, 64)
}

// simReason reports whether the series have a column for rejections by r:
// not for rate limiting nor tenant caps (the middleware's 429s: the
// rate_limited column), nor the tenant share (the simulator does not
// model it).
func simReason(r shed.Reason) bool {
	return r != shed.ReasonRateLimited && r != shed.ReasonTenantShare && r != shed.ReasonKeyConcurrency
}

// SeriesColumns returns the column names of the series of sc, in the
// order of WriteSeriesCSV (after the policy column). rate_limited (429s
// of the classes' rate limits and key concurrency limits) and then the adaptive limits' windows by
// the reason of their decision (limit_cut_queue, limit_grow, ...: see
// limits.Reason) come last, after the per-class columns, so that they
// moved no column of the outputs written before they existed.
func SeriesColumns(sc *Scenario) []string {
	cols := []string{"time", "offered", "attempts", "admitted"}
	for r := shed.Reason(1); r < shed.NumReasons; r++ {
		if !simReason(r) {
			continue
		}
		cols = append(cols, "rejected_"+r.String())
	}
	cols = append(cols, "completed", "goodput", "ideal", "timeouts", "failed", "retries", "jobs", "wasted",
		"in_flight", "upstream_in_flight", "limit", "admitted_p99", "limit_cuts", "limit_relearns")
	for _, c := range sc.Classes {
		for _, m := range []string{"offered", "goodput", "timeouts", "failed", "p50", "p99"} {
			cols = append(cols, c.Name+"_"+m)
		}
	}
	cols = append(cols, "rate_limited")
	for r := limits.Reason(1); r < limits.NumReasons; r++ {
		cols = append(cols, "limit_"+strings.ReplaceAll(r.String(), "-", "_"))
	}
	return cols
}

// appendRow appends row's cells in SeriesColumns order, with cell
// formatting f for floats and a separator.
func appendRow(b []byte, row *Row, sep byte, f func([]byte, float64) []byte) []byte {
	i := func(v int64) { b = append(b, sep); b = strconv.AppendInt(b, v, 10) }
	x := func(v float64) { b = append(b, sep); b = f(b, v) }
	b = f(b, row.Time)
	i(row.Offered)
	i(row.Attempts)
	i(row.Admitted)
	for r := shed.Reason(1); r < shed.NumReasons; r++ {
		if simReason(r) {
			i(row.Rejected[r])
		}
	}
	i(row.Completed)
	i(row.Goodput)
	x(row.Ideal)
	i(row.Timeouts)
	i(row.Failed)
	i(row.Retries)
	i(row.Jobs)
	i(row.Wasted)
	x(row.InFlight)
	x(row.UpstreamInFlight)
	x(row.Limit)
	x(row.AdmittedP99)
	i(row.LimitCuts)
	i(row.LimitRelearns)
	for _, c := range row.Classes {
		i(c.Offered)
		i(c.Goodput)
		i(c.Timeouts)
		i(c.Failed)
		x(c.P50)
		x(c.P99)
	}
	i(row.RateLimited)
	for _, n := range row.LimitDecisions[1:] {
		i(n)
	}
	return b
}

// WriteSeriesCSV writes the series of results (runs of one scenario) as
// one CSV table with a leading policy column.
func WriteSeriesCSV(w io.Writer, results []*Result) error {
	if len(results) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("policy," + strings.Join(SeriesColumns(results[0].Scenario), ",") + "\n")
	var b []byte
	for _, r := range results {
		for k := range r.Series {
			b = append(b[:0], csvField(r.Policy)...)
			b = append(b, ',')
			b = appendRow(b, &r.Series[k], ',', fmtFloat)
			b = append(b, '\n')
			bw.Write(b)
		}
	}
	return bw.Flush()
}

func csvField(s string) string {
	if strings.ContainsAny(s, ",\"\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// WriteSeriesJSON writes the series of results as
// {"scenario": ..., "seed": ..., "columns": [...], "policies": [{"policy": ..., "rows": [[...], ...]}]}.
func WriteSeriesJSON(w io.Writer, results []*Result) error {
	if len(results) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	sc := results[0].Scenario
	fmt.Fprintf(bw, "{\"scenario\":%s,\"seed\":%d,\"interval_s\":%s,\"columns\":[", strconv.Quote(sc.Name), results[0].Seed, strconv.FormatFloat(sc.Interval.Seconds(), 'g', -1, 64))
	for i, c := range SeriesColumns(sc) {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString(strconv.Quote(c))
	}
	bw.WriteString("],\"policies\":[")
	var b []byte
	for i, r := range results {
		if i > 0 {
			bw.WriteByte(',')
		}
		fmt.Fprintf(bw, "\n{\"policy\":%s,\"rows\":[", strconv.Quote(r.Policy))
		for k := range r.Series {
			b = b[:0]
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n["...)
			b = appendRow(b, &r.Series[k], ',', jsonFloat)
			b = append(b, ']')
			bw.Write(b)
		}
		bw.WriteString("]}")
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// summaryField is one figure of a Summary in the order of the CSV and
// JSON outputs.
type summaryField struct {
	name string
	f    float64
	i    int64
	isF  bool
}

func (s *Summary) fields() []summaryField {
	F := func(n string, v float64) summaryField { return summaryField{name: n, f: v, isF: true} }
	I := func(n string, v int64) summaryField { return summaryField{name: n, i: v} }
	out := []summaryField{
		I("logical", s.Logical), I("goodput", s.Goodput), I("timeouts", s.Timeouts), I("failed", s.Failed),
		I("attempts", s.Attempts), I("admitted", s.Admitted), I("rejected", s.Rejected),
		I("client_retries", s.ClientRetries), I("gateway_retries", s.GatewayRetries), I("service_retries", s.ServiceRetries),
		I("jobs", s.Jobs),
		F("ideal", s.Ideal), F("goodput_ratio", s.GoodputRatio), F("trigger_goodput_ratio", s.TriggerGoodputRatio),
		F("throughput", s.Throughput), F("healthy_throughput", s.HealthyThroughput), F("recovery_s", s.Recovery),
		F("p50_s", s.P50), F("p99_s", s.P99), F("admitted_p50_s", s.AdmittedP50), F("admitted_p99_s", s.AdmittedP99),
		F("healthy_p99_s", s.HealthyP99), F("trigger_p99_s", s.TriggerP99),
		F("amplification", s.Amplification), F("upstream_amplification", s.UpstreamAmplification),
		F("wasted", s.Wasted), F("rejected_share", s.RejectedShare), F("mean_limit", s.MeanLimit), F("mean_in_flight", s.MeanInFlight),
		F("upstream_mean_jobs", s.UpstreamMeanJobs), F("upstream_throughput", s.UpstreamThroughput), F("upstream_sojourn_s", s.UpstreamSojourn),
	}
	return out
}

// WriteSummaryCSV writes one line per summary. When all summaries have
// the same classes, per-class columns follow the common ones
// (NAME_offered, NAME_goodput, NAME_goodput_share,
// NAME_trigger_goodput_share, NAME_p50_s, NAME_p99_s);
// otherwise they are left out. rate_limited comes last, so that it
// moved no column of the files written before it existed.
func WriteSummaryCSV(w io.Writer, sums []*Summary) error {
	if len(sums) == 0 {
		return nil
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("scenario,policy,seed")
	for _, f := range sums[0].fields() {
		bw.WriteString("," + f.name)
	}
	classes := sums[0].Classes
	for _, s := range sums[1:] {
		if !sameClasses(s.Classes, classes) {
			classes = nil
			break
		}
	}
	for _, c := range classes {
		for _, m := range []string{"offered", "goodput", "goodput_share", "trigger_goodput_share", "p50_s", "p99_s"} {
			bw.WriteString("," + c.Name + "_" + m)
		}
	}
	bw.WriteString(",rate_limited\n")
	var b []byte
	for _, s := range sums {
		b = append(b[:0], csvField(s.Scenario)...)
		b = append(b, ',')
		b = append(b, csvField(s.Policy)...)
		b = append(b, ',')
		b = strconv.AppendUint(b, s.Seed, 10)
		for _, f := range s.fields() {
			b = append(b, ',')
			if f.isF {
				b = fmtFloat(b, f.f)
			} else {
				b = strconv.AppendInt(b, f.i, 10)
			}
		}
		for i := range classes {
			c := &s.Classes[i]
			b = append(b, ',')
			b = strconv.AppendInt(b, c.Offered, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, c.Goodput, 10)
			for _, v := range []float64{c.GoodputShare, c.TriggerGoodputShare, c.P50, c.P99} {
				b = append(b, ',')
				b = fmtFloat(b, v)
			}
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, s.RateLimited, 10)
		b = append(b, '\n')
		bw.Write(b)
	}
	return bw.Flush()
}

func sameClasses(a, b []ClassSummary) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

// AppendSummaryJSON appends s as one JSON object; rate_limited is its
// last key.
func AppendSummaryJSON(b []byte, s *Summary) []byte {
	b = append(b, "{\"scenario\":"...)
	b = strconv.AppendQuote(b, s.Scenario)
	b = append(b, ",\"policy\":"...)
	b = strconv.AppendQuote(b, s.Policy)
	b = append(b, ",\"seed\":"...)
	b = strconv.AppendUint(b, s.Seed, 10)
	for _, f := range s.fields() {
		if f.isF {
			b = jsonFloatField(b, f.name, f.f)
		} else {
			b = jsonIntField(b, f.name, f.i)
		}
	}
	if !math.IsNaN(s.Recovery) {
		b = append(b, ",\"recovered\":"...)
		b = strconv.AppendBool(b, !math.IsInf(s.Recovery, 0))
	}
	b = append(b, ",\"classes\":["...)
	for i := range s.Classes {
		c := &s.Classes[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "{\"name\":"...)
		b = strconv.AppendQuote(b, c.Name)
		b = jsonIntField(b, "offered", c.Offered)
		b = jsonIntField(b, "goodput", c.Goodput)
		b = jsonIntField(b, "timeouts", c.Timeouts)
		b = jsonIntField(b, "failed", c.Failed)
		b = jsonFloatField(b, "goodput_share", c.GoodputShare)
		b = jsonFloatField(b, "trigger_goodput_share", c.TriggerGoodputShare)
		b = jsonFloatField(b, "p50_s", c.P50)
		b = jsonFloatField(b, "p99_s", c.P99)
		if c.Keys > 1 {
			b = jsonIntField(b, "keys", int64(c.Keys))
			b = jsonIntField(b, "hot_key_offered", c.HotKeyOffered)
			b = jsonIntField(b, "hot_key_goodput", c.HotKeyGoodput)
			b = jsonFloatField(b, "hot_key_goodput_share", c.HotKeyGoodputShare)
			b = jsonFloatField(b, "other_keys_goodput_share", c.OtherKeysGoodputShare)
			b = jsonFloatField(b, "trigger_other_keys_goodput_share", c.TriggerOtherKeysGoodputShare)
		}
		b = append(b, '}')
	}
	b = append(b, "],\"rate_limited\":"...)
	b = strconv.AppendInt(b, s.RateLimited, 10)
	return append(b, '}')
}

// WriteSummaryJSON writes the summaries as a JSON array, one per line.
func WriteSummaryJSON(w io.Writer, sums []*Summary) error {
	b := []byte{'['}
	for i, s := range sums {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '\n')
		b = AppendSummaryJSON(b, s)
	}
	b = append(b, "\n]\n"...)
	_, err := w.Write(b)
	return err
}

// WriteTable writes the comparison table of summaries, grouped by
// scenario in the order given. Goodput is against the ideal; "trigger"
// columns cover the trigger window; per-class goodput is against the
// class's offered requests. A "429" column (attempts refused by rate
// limits and key concurrency limits, a share of attempts like "rejected") follows "rejected" only
// when some summary has any, so that tables without rate limits read as
// they always did.
//
// A class spread over keys also shows the goodput of its heaviest key
// (key 0) and of the others: what a per-tenant rate limit or
// concurrency limit is for.
func WriteTable(w io.Writer, sums []*Summary) error {
	header := []string{"scenario", "policy", "goodput", "trigger", "recovery", "p50", "p99", "adm p99", "trig p99", "amp", "wasted", "rejected", "limit", "classes (goodput/offered)"}
	limited := slices.ContainsFunc(sums, func(s *Summary) bool { return s.RateLimited > 0 })
	if limited {
		header = slices.Insert(header, 12, "429")
	}
	var rows [][]string
	for _, s := range sums {
		var cls []string
		if len(s.Classes) > 1 || slices.ContainsFunc(s.Classes, func(c ClassSummary) bool { return c.Keys > 1 }) {
			for _, c := range s.Classes {
				cls = append(cls, classCell(&c))
			}
		}
		rows = append(rows, []string{
			s.Scenario, s.Policy, pct(s.GoodputRatio), pct(s.TriggerGoodputRatio), secs(s.Recovery),
			dur(s.P50), dur(s.P99), dur(s.AdmittedP99), dur(s.TriggerP99),
			num(s.Amplification, 2), pct(s.Wasted), pct(s.RejectedShare), num(s.MeanLimit, 0), strings.Join(cls, " "),
		})
		if limited {
			rows[len(rows)-1] = slices.Insert(rows[len(rows)-1], 12, pct(ratio(float64(s.RateLimited), float64(s.Attempts))))
		}
	}
	return writeAligned(w, header, rows, 2, 0)
}

// writeAligned writes rows under header as aligned columns: the first
// left columns left-aligned, the others right-aligned, the last one as
// is; a blank line separates groups of rows whose column group differs
// (none when group is negative).
func writeAligned(w io.Writer, header []string, rows [][]string, left, group int) error {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	bw := bufio.NewWriter(w)
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			switch {
			case i == len(cells)-1:
				b.WriteString(c)
			case i < left:
				b.WriteString(c + strings.Repeat(" ", width[i]-len(c)))
			default:
				b.WriteString(strings.Repeat(" ", width[i]-len(c)) + c)
			}
		}
		bw.WriteString(strings.TrimRight(b.String(), " "))
		bw.WriteByte('\n')
	}
	line(header)
	prev := ""
	for i, r := range rows {
		if group >= 0 {
			if i > 0 && r[group] != prev {
				bw.WriteByte('\n')
			}
			prev = r[group]
		}
		line(r)
	}
	return bw.Flush()
}

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
}

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func secs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "never"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "s"
}

// dur formats seconds compactly: 12ms, 1.25s.
func dur(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case v < 1e-3:
		return strconv.FormatFloat(v*1e6, 'f', 0, 64) + "us"
	case v < 1:
		return strconv.FormatFloat(v*1e3, 'f', 0, 64) + "ms"
	case v < 100:
		return strconv.FormatFloat(v, 'f', 2, 64) + "s"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "s"
}

// classCell is a class's cell of WriteTable's classes column.
func classCell(c *ClassSummary) string {
	cell := c.Name + " " + pct(c.GoodputShare)
	if c.Keys > 1 {
		cell += " (key 0 " + pct(c.HotKeyGoodputShare) + ", others " + pct(c.OtherKeysGoodputShare) + ")"
	}
	return cell
}
