package cli

import (
	"cmp"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

const diffUsage = `shedsim diff compares two runs of a scenario family on the same seed (the
family-*.csv that -family writes), policy by policy: the score the family
judges by, the goodput over the whole run and the recovery after an
incident, before and after, and the instances that moved: the losses
first, then the gains, largest first. A change that wins during the
incident can lose after it; judge all three.

Usage:
  shedsim diff [flags] BEFORE.csv AFTER.csv

Flags:
`

// diffRow is one policy's figures on one instance of a family CSV; NaN
// where the CSV has none ("-"), +Inf for a recovery that never came.
type diffRow struct {
	relative, goodput, recovery float64
}

// familyRows maps policy, then instance, to its figures.
type familyRows map[string]map[int]diffRow

func runDiff(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("shedsim diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "", "compare only this policy (default: every policy in both files)")
	moved := fs.Float64("moved", 3, "list the instances whose score or run goodput moved by more than this many points")
	fs.Usage = func() { fmt.Fprint(stderr, diffUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	var runs [2]familyRows
	var ids [2]string
	for i, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "shedsim diff: %v\n", err)
			return 1
		}
		runs[i], ids[i], err = readFamilyCSV(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "shedsim diff: %s: %v\n", path, err)
			return 1
		}
	}
	if ids[0] != ids[1] {
		// Instance n of another family or seed is another service.
		fmt.Fprintf(stderr, "shedsim diff: before is %s, after is %s: compare runs of one family on one seed\n", ids[0], ids[1])
		return 1
	}
	fmt.Fprintf(stdout, "family %s\n", ids[0])
	writeDiff(stdout, runs[0], runs[1], *policy, *moved/100)
	return 0
}

// readFamilyCSV reads the columns diff needs from a family CSV, and the
// family and seed its rows share ("incident, seed 1").
func readFamilyCSV(r io.Reader) (familyRows, string, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, "", fmt.Errorf("reading the header: %w", err)
	}
	col := map[string]int{}
	for _, name := range []string{"family", "seed", "instance", "policy", "relative", "goodput", "recovery_s"} {
		i := slices.Index(header, name)
		if i < 0 {
			return nil, "", fmt.Errorf("no %q column: not a family CSV", name)
		}
		col[name] = i
	}
	rows, id := familyRows{}, ""
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, id, nil
		}
		if err != nil {
			return nil, "", err
		}
		inst, err := strconv.Atoi(rec[col["instance"]])
		if err != nil {
			return nil, "", fmt.Errorf("line %d: instance %q is not a number", line, rec[col["instance"]])
		}
		switch rowID := rec[col["family"]] + ", seed " + rec[col["seed"]]; {
		case id == "":
			id = rowID
		case rowID != id:
			return nil, "", fmt.Errorf("line %d: %s after %s: one family and seed per file", line, rowID, id)
		}
		p := rec[col["policy"]]
		if rows[p] == nil {
			rows[p] = map[int]diffRow{}
		}
		rows[p][inst] = diffRow{
			relative: csvNum(rec[col["relative"]]),
			goodput:  csvNum(rec[col["goodput"]]),
			recovery: csvRecovery(rec[col["recovery_s"]], rec[col["family"]]),
		}
	}
}

// csvNum reads a figure; "-" or anything else that is not a finite
// number is none.
func csvNum(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) {
		return math.NaN()
	}
	return v
}

// csvRecovery reads a recovery: in the incident family, "-" is a
// recovery that never came (the CSV writes none the same way).
func csvRecovery(s, family string) float64 {
	if v := csvNum(s); !math.IsNaN(v) {
		return v
	}
	if s == "-" && family == "incident" {
		return math.Inf(1)
	}
	return math.NaN()
}

func writeDiff(w io.Writer, before, after familyRows, only string, moved float64) {
	var policies []string
	for p := range before {
		if after[p] != nil && (only == "" || p == only) {
			policies = append(policies, p)
		}
	}
	slices.Sort(policies)
	if len(policies) == 0 {
		fmt.Fprintln(w, "no policy in both files")
		return
	}
	for _, p := range policies {
		b, a := before[p], after[p]
		fmt.Fprintf(w, "%s (%d instances in both)\n", p, countCommon(b, a))
		fmt.Fprintf(w, "  score (relative)  min/p10/median  <98%% <90%%   %s  ->  %s\n", scoreStats(b, a, rowRelative), scoreStats(a, b, rowRelative))
		fmt.Fprintf(w, "  run goodput       min/p10/median  <98%% <90%%   %s  ->  %s\n", scoreStats(b, a, rowGoodput), scoreStats(a, b, rowGoodput))
		if rec := recoveryStats(b, a); rec != "" {
			fmt.Fprintf(w, "  recovery (s)      median/p90/never            %s  ->  %s\n", rec, recoveryStats(a, b))
		}
		writeMoved(w, b, a, moved)
	}
}

func rowRelative(r diffRow) float64 { return r.relative }
func rowGoodput(r diffRow) float64  { return r.goodput }

func countCommon(b, a map[int]diffRow) int {
	n := 0
	for i := range b {
		if _, ok := a[i]; ok {
			n++
		}
	}
	return n
}

// common returns f of the instances of x that other also has and that
// have a figure, sorted.
func common(x, other map[int]diffRow, f func(diffRow) float64) []float64 {
	var xs []float64
	for i, r := range x {
		if _, ok := other[i]; ok && !math.IsNaN(f(r)) {
			xs = append(xs, f(r))
		}
	}
	slices.Sort(xs)
	return xs
}

// at is the q-quantile of sorted xs, as the family report takes it.
func at(xs []float64, q float64) float64 {
	return xs[max(int(math.Ceil(q*float64(len(xs))))-1, 0)]
}

func scoreStats(x, other map[int]diffRow, f func(diffRow) float64) string {
	xs := common(x, other, f)
	if len(xs) == 0 {
		return "-"
	}
	below := func(b float64) int { return countIf(xs, func(v float64) bool { return v < b }) }
	return fmt.Sprintf("%.1f/%.1f/%.1f %d %d", 100*xs[0], 100*at(xs, 0.1), 100*at(xs, 0.5), below(0.98), below(0.9))
}

func countIf(xs []float64, f func(float64) bool) int {
	n := 0
	for _, x := range xs {
		if f(x) {
			n++
		}
	}
	return n
}

func recoveryStats(x, other map[int]diffRow) string {
	xs := common(x, other, func(r diffRow) float64 { return r.recovery })
	if len(xs) == 0 {
		return ""
	}
	never := countIf(xs, func(v float64) bool { return math.IsInf(v, 1) })
	s := func(v float64) string {
		if math.IsInf(v, 1) {
			return "never"
		}
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return fmt.Sprintf("%s/%s/%d", s(at(xs, 0.5)), s(at(xs, 0.9)), never)
}

// writeMoved lists the instances whose score or run goodput moved by more
// than moved, or whose recovery got longer by more than 5 s (or never
// came): the losses first, then the gains, each largest first, since a
// change is judged by what it breaks as much as by what it fixes.
func writeMoved(w io.Writer, b, a map[int]diffRow, moved float64) {
	var lost, gained []movedRow
	for i, rb := range b {
		ra, ok := a[i]
		if !ok {
			continue
		}
		dr, dg := nanZero(ra.relative-rb.relative), nanZero(ra.goodput-rb.goodput)
		switch worst, best := min(dr, dg), max(dr, dg); {
		case worst < -moved || ra.recovery > rb.recovery+5:
			lost = append(lost, movedRow{i, worst})
		case best > moved:
			gained = append(gained, movedRow{i, -best})
		}
	}
	for _, part := range []struct {
		name string
		rows []movedRow
	}{{"lost", lost}, {"gained", gained}} {
		if len(part.rows) == 0 {
			continue
		}
		slices.SortFunc(part.rows, func(x, y movedRow) int {
			return cmp.Or(cmp.Compare(x.by, y.by), cmp.Compare(x.id, y.id))
		})
		fmt.Fprintf(w, "  %s (%d):\n", part.name, len(part.rows))
		for _, m := range part.rows {
			rb, ra := b[m.id], a[m.id]
			fmt.Fprintf(w, "    #%d score %s -> %s, run goodput %s -> %s, recovery %s -> %s\n", m.id,
				pctOr(rb.relative), pctOr(ra.relative), pctOr(rb.goodput), pctOr(ra.goodput), secsOr(rb.recovery), secsOr(ra.recovery))
		}
	}
}

// movedRow is an instance that moved and the sort key of its move: the
// larger loss, or the larger gain negated, so that ascending order lists
// the largest first.
type movedRow struct {
	id int
	by float64
}

// nanZero is v, or 0 when a file has no figure.
func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func pctOr(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
}

func secsOr(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "never"
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + "s"
}
