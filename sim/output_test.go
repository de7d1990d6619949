package sim

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/limits"
)

// TestSeriesLimitReasons: the series count each interval's windows by the
// reason of their decision, one limit_<reason> column per limits.Reason
// after rate_limited; the cut reasons add up to limit_cuts and relearn
// to limit_relearns, and a slowdown shows both cuts and growth.
func TestSeriesLimitReasons(t *testing.T) {
	sc, err := Builtin("slowdown")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePolicy("shedkit-gradient")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, p, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSeriesCSV(&b, []*Result{res}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	cols := strings.Split(lines[0], ",")
	col := func(name string) int {
		k := slices.Index(cols, name)
		if k < 0 {
			t.Fatalf("no column %s in %v", name, cols)
		}
		return k
	}
	if col("limit_idle") != col("rate_limited")+1 || cols[len(cols)-1] != "limit_"+strings.ReplaceAll(limits.Reason(limits.NumReasons-1).String(), "-", "_") {
		t.Fatalf("reason columns not after rate_limited: %v", cols)
	}
	var total [limits.NumReasons]int64
	for _, line := range lines[1:] {
		cells := strings.Split(line, ",")
		cell := func(name string) int64 {
			n, err := strconv.ParseInt(cells[col(name)], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		var cuts int64
		for r := limits.Reason(1); r < limits.NumReasons; r++ {
			n := cell("limit_" + strings.ReplaceAll(r.String(), "-", "_"))
			total[r] += n
			if r.IsCut() {
				cuts += n
			}
		}
		if cuts != cell("limit_cuts") || cell("limit_relearn") != cell("limit_relearns") {
			t.Fatalf("row %s: cuts by reason %d, limit_cuts %d; relearn %d, limit_relearns %d",
				cells[0:2], cuts, cell("limit_cuts"), cell("limit_relearn"), cell("limit_relearns"))
		}
	}
	grew := total[limits.ReasonGrow] + total[limits.ReasonSlowStart] + total[limits.ReasonRegrow]
	cut := total[limits.ReasonCutLatency] + total[limits.ReasonCutQueue] + total[limits.ReasonCutDrops]
	if grew == 0 || cut == 0 {
		t.Fatalf("windows by reason over the run %v: want growth and cuts in a slowdown", total)
	}
}
