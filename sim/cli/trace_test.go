package cli

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestTrace: -trace writes one row per window of replica 0's limit, in
// time order, with the rule that decided each; the slowdown shows cuts.
// Without an adaptive limit, or with more than one run, it fails.
func TestTrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.csv")
	if code, _, e := run(t, "-scenario", "slowdown", "-policies", "shedkit-gradient", "-trace", path, "-out", "", "-quiet"); code != ExitOK {
		t.Fatalf("exit %d: %s", code, e)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 50 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	head := rows[0]
	col := func(name string) int { return slices.Index(head, name) }
	end, reason, limit, next := col("end_s"), col("reason"), col("limit"), col("next")
	if end != 0 || reason < 0 || limit < 0 || next < 0 {
		t.Fatalf("header %v", head)
	}
	var cuts int
	last := -1.0
	for _, r := range rows[1:] {
		at, _ := strconv.ParseFloat(r[end], 64)
		before, _ := strconv.ParseFloat(r[limit], 64)
		after, _ := strconv.ParseFloat(r[next], 64)
		if at <= last {
			t.Fatalf("window at %v after %v", at, last)
		}
		last = at
		if strings.HasPrefix(r[reason], "cut-") {
			cuts++
			if after >= before {
				t.Fatalf("%s from %v to %v", r[reason], before, after)
			}
		}
	}
	if cuts == 0 {
		t.Fatal("no cut traced in the slowdown")
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-scenario", "slowdown", "-policies", "static"}, ExitFail, "no adaptive limit"},
		{[]string{"-scenario", "slowdown", "-policies", "static;shedkit-aimd"}, ExitUsage, "one scenario and one policy"},
		{[]string{"-family", "incident", "-policies", "shedkit-aimd"}, ExitUsage, "one -instance"},
	} {
		code, _, e := run(t, append(tc.args, "-trace", path, "-out", "", "-quiet")...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, e, tc.code, tc.want)
		}
	}
}
