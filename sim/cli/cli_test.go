package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const small = `name: small
duration: 30s
warmup: 5s
classes:
  - name: a
    rate: 400
    timeout: 1s
upstream:
  capacity: 25
  service_time: {dist: lognormal, median: 50ms, sigma: 0.5}
  degradation: 0.5
  events:
    - {at: 12s, for: 8s, slowdown: 5}
expect:
  - {policy: static, metric: goodput, min: 0.5, max: 1.2}
  - {policy: none, metric: trigger_goodput, max: 0.5}
`

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func writeScenario(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	code, _, errOut := run(t, "-h")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"-scenario", "-suite", "-policies", "-seed", "-out", "-sweep", "-objective", "-quiet", "shedkit-gradient", "gcl-vegas", "trigger_p99", "series.csv", "chart.png", "file:line:column"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("-h does not mention %q", want)
		}
	}
}

func TestCompareWritesDeterministicOutputs(t *testing.T) {
	dir := t.TempDir()
	file := writeScenario(t, dir, "small.yaml", small)
	var outs [2]string
	for i := range outs {
		outs[i] = filepath.Join(dir, "out"+string(rune('a'+i)))
		code, stdout, stderr := run(t, "-scenario", file, "-policies", "none;static;shedkit-gradient:tolerance=2", "-out", outs[i], "-quiet", "-check", "-workers", []string{"1", "3"}[i])
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if stderr != "" {
			t.Errorf("-quiet wrote to stderr: %q", stderr)
		}
		if !strings.Contains(stdout, "shedkit-gradient:tolerance=2") || !strings.Contains(stdout, "goodput") {
			t.Errorf("table:\n%s", stdout)
		}
	}
	for _, f := range []string{"table.txt", "summary.csv", "summary.json", "small/series.csv", "small/series.json", "small/chart.svg", "small/chart.png"} {
		a, err := os.ReadFile(filepath.Join(outs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(outs[1], f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs with the same seed", f)
		}
		if len(a) == 0 {
			t.Errorf("%s is empty", f)
		}
	}
}

func TestCheckFails(t *testing.T) {
	dir := t.TempDir()
	file := writeScenario(t, dir, "small.yaml", strings.Replace(small, "max: 0.5", "min: 0.9", 1))
	code, _, stderr := run(t, "-scenario", file, "-policies", "none", "-out", "", "-quiet", "-check")
	if code != ExitFail || !strings.Contains(stderr, "expectation failed: small/none: trigger_goodput") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeScenario(t, dir, "bad.yaml", strings.Replace(small, "capacity: 25", "capacity: fifty", 1))
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-scenario", bad}, ExitUsage, "bad.yaml:9:13: upstream.capacity: want an integer, got \"fifty\""},
		{[]string{"-scenario", filepath.Join(dir, "missing.yaml")}, ExitUsage, "missing.yaml"},
		{[]string{"-scenario", "nope"}, ExitUsage, `no built-in scenario "nope"`},
		{[]string{}, ExitUsage, "give either -suite or -scenario"},
		{[]string{"-suite", "-scenario", "steady"}, ExitUsage, "give either -suite or -scenario"},
		{[]string{"-scenario", "steady", "-policies", "magic"}, ExitUsage, `unknown policy "magic"`},
		{[]string{"-scenario", "steady", "-policies", "static:limt=3"}, ExitUsage, `unknown parameter "limt"`},
		{[]string{"-scenario", "steady", "-policies", "static", "-sweep", "limit"}, ExitUsage, "is not key=value"},
		{[]string{"-scenario", "steady", "-sweep", "limit=1,2"}, ExitUsage, "-sweep needs -policies"},
		{[]string{"-scenario", "steady", "-policies", "static", "-sweep", "limit=5", "-objective", "max:speed"}, ExitUsage, `unknown metric "speed"`},
		{[]string{"-nosuchflag"}, ExitUsage, "flag provided but not defined"},
		{[]string{"-scenario", "steady", "extra"}, ExitUsage, `unexpected argument "extra"`},
		{[]string{"-print", "nope"}, ExitUsage, `no built-in scenario "nope"`},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	file := writeScenario(t, dir, "small.yaml", small)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := run(t, "-scenario", file, "-policies", "static", "-sweep", "limit=3,20,200", "-objective", "max:goodput,trigger_p99<=2s", "-out", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("ranking:\n%s", stdout)
	}
	// A limit near the capacity (25) wins; 200 admits a queue at the
	// upstream that the slowdown turns into long latency; 3 wastes capacity.
	if !strings.Contains(lines[2], "static:limit=20") {
		t.Errorf("best configuration: %q\n%s", lines[2], stdout)
	}
	if !strings.Contains(stdout, "violated") {
		t.Errorf("no configuration violates the p99 constraint:\n%s", stdout)
	}
	if !strings.Contains(stderr, "sweep of 3 configurations") {
		t.Errorf("stderr %q", stderr)
	}
	csv, err := os.ReadFile(filepath.Join(out, "sweep.csv"))
	if err != nil || !strings.HasPrefix(string(csv), "rank,configuration,score,feasible,small_goodput\n1,\"static:limit=20\"") {
		t.Errorf("sweep.csv: %v\n%s", err, csv)
	}
}

func TestListAndPrint(t *testing.T) {
	code, stdout, _ := run(t, "-list")
	if code != ExitOK || !strings.Contains(stdout, "slowdown") || !strings.Contains(stdout, "gcl-aimd") {
		t.Errorf("-list: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = run(t, "-print", "spike")
	if code != ExitOK || !strings.HasPrefix(stdout, "name: spike\n") {
		t.Errorf("-print: exit %d\n%s", code, stdout)
	}
}

func TestSplitPolicies(t *testing.T) {
	for in, want := range map[string]string{
		"none,static":                        "none|static",
		"none;static:limit=3":                "none|static:limit=3",
		"shedkit-gradient:tolerance=2,max=9": "shedkit-gradient:tolerance=2,max=9",
	} {
		if got := strings.Join(splitPolicies(in), "|"); got != want {
			t.Errorf("splitPolicies(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFamily(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "-family", "healthy", "-n", "2", "-seed", "5", "-policies", "static;static:limit={warm}", "-out", dir, "-quiet")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"family healthy, seed 5, 2 instances", "static:limit={warm}", "median"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"family-healthy.txt", "family-healthy.csv", "family-healthy.svg", "family-healthy.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	code, out, errOut = run(t, "-family", "incident", "-instance", "3", "-policies", "static", "-out", "", "-quiet")
	if code != ExitOK || !strings.Contains(out, "incident-3: ") {
		t.Errorf("-instance: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "-family", "healthy", "-n", "1", "-deadline-model", "abandon", "-policies", "static", "-out", "", "-quiet")
	if first, _, _ := strings.Cut(out, "\n"); code != ExitOK || first != "shedsim -family healthy -n 1 -seed 1 -deadline-model abandon -policies 'static'" {
		t.Errorf("-deadline-model: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "-family", "healthy", "-n", "1", "-deadline-model", "wait", "-policies", "static", "-out", "", "-quiet")
	if first, _, _ := strings.Cut(out, "\n"); code != ExitOK || first != "shedsim -family healthy -n 1 -seed 1 -policies 'static'" {
		t.Errorf("-deadline-model wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, args := range [][]string{
		{"-family", "nope"},
		{"-family", "healthy", "-n", "1", "-deadline-model", "nope"},
		{"-scenario", "steady", "-deadline-model", "cancel"},
		{"-family", "healthy", "-n", "0"},
		{"-family", "healthy", "-instance", "x"},
		{"-family", "healthy", "-n", "1", "-policies", "nope"},
	} {
		if code, _, _ := run(t, append(args, "-quiet", "-out", "")...); code == ExitOK {
			t.Errorf("%v: exit 0", args)
		}
	}
}
