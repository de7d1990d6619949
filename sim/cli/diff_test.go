package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const diffHeader = "family,seed,instance,shape,median_s,servers,replicas,shared,load,deadline_x,rate,warmup_s,incident,policy,judged,reference,relative,goodput,trigger_goodput,recovery_s,admitted_p99_s,trigger_p99_s,mean_limit,mean_in_flight,rejected\n"

// diffLine is a family CSV row with only the columns diff reads filled.
func diffLine(inst, policy, relative, goodput, recovery string) string {
	return "incident,1," + inst + ",constant,0.01,4,1,false,0.5,10,100,30,x,policy-" + policy + ",-,-," + relative + "," + goodput + ",-," + recovery + ",-,-,-,-,-\n"
}

func writeCSV(t *testing.T, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(diffHeader+strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDiff: an instance that keeps its score during the incident but
// loses its run goodput and never recovers is listed; one that moved by
// less than the threshold is not; the distributions are over the
// instances both files have.
func TestDiff(t *testing.T) {
	before := writeCSV(t, "before.csv",
		diffLine("1", "a", "1.0000", "0.9500", "5.0"),
		diffLine("2", "a", "0.5000", "0.9000", "2.0"),
		diffLine("3", "a", "0.9000", "0.9000", "1.0"),
		diffLine("4", "a", "0.1000", "0.1000", "1.0")) // only in before
	after := writeCSV(t, "after.csv",
		diffLine("1", "a", "1.0000", "0.3600", "-"),
		diffLine("2", "a", "0.5100", "0.9100", "2.0"),
		diffLine("3", "a", "0.9000", "0.9000", "1.0"))
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"diff", before, after}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{
		"family incident, seed 1\npolicy-a (3 instances in both)",
		"50.0/50.0/90.0 2 1  ->  51.0/51.0/90.0 2 1",
		"90.0/90.0/90.0 3 0  ->  36.0/36.0/90.0 3 1",
		"2/5/0  ->  2/never/1",
		"#1 score 100.0% -> 100.0%, run goodput 95.0% -> 36.0%, recovery 5s -> never",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "#2 ") || strings.Contains(got, "#4 ") {
		t.Errorf("lists an instance that moved by a point or that only one file has")
	}
}

// TestDiffOrdersMoves: losses come before gains, each largest first,
// so that what a change breaks is read before what it fixes.
func TestDiffOrdersMoves(t *testing.T) {
	before := writeCSV(t, "before.csv",
		diffLine("1", "a", "0.9000", "0.9000", "1.0"),
		diffLine("2", "a", "0.9000", "0.9000", "1.0"),
		diffLine("3", "a", "0.5000", "0.9000", "1.0"),
		diffLine("4", "a", "0.9000", "0.9000", "1.0"),
		diffLine("5", "a", "0.5000", "0.5000", "1.0"))
	after := writeCSV(t, "after.csv",
		diffLine("1", "a", "0.8000", "0.9000", "1.0"), // lost 10 points
		diffLine("2", "a", "0.9000", "0.5000", "1.0"), // lost 40
		diffLine("3", "a", "0.9500", "0.9000", "1.0"), // gained 45
		diffLine("4", "a", "0.9000", "0.9000", "9.0"), // recovery 8 s longer
		diffLine("5", "a", "0.6000", "0.6000", "1.0")) // gained 10
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"diff", before, after}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := out.String()
	t.Log(got)
	var order []string
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) > 0 && (strings.HasPrefix(f[0], "#") || f[0] == "lost" || f[0] == "gained") {
			order = append(order, f[0])
		}
	}
	want := []string{"lost", "#2", "#1", "#4", "gained", "#3", "#5"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("order %v, want %v", order, want)
	}
}

func TestDiffErrors(t *testing.T) {
	good := writeCSV(t, "good.csv", diffLine("1", "a", "1", "1", "1"))
	notFamily := filepath.Join(t.TempDir(), "summary.csv")
	if err := os.WriteFile(notFamily, []byte("scenario,policy,goodput\nx,y,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badInstance := writeCSV(t, "bad.csv", diffLine("one", "a", "1", "1", "1"))
	otherSeed := writeCSV(t, "seed2.csv", strings.Replace(diffLine("1", "a", "1", "1", "1"), "incident,1,", "incident,2,", 1))
	mixed := writeCSV(t, "mixed.csv", diffLine("1", "a", "1", "1", "1"), strings.Replace(diffLine("2", "a", "1", "1", "1"), "incident,", "healthy,", 1))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"one file", []string{"diff", good}, 2, "Usage"},
		{"missing file", []string{"diff", good, good + ".nope"}, 1, "no such file"},
		{"not a family CSV", []string{"diff", good, notFamily}, 1, `no "family" column`},
		{"bad instance", []string{"diff", badInstance, good}, 1, `line 2: instance "one"`},
		{"another seed", []string{"diff", good, otherSeed}, 1, "before is incident, seed 1, after is incident, seed 2"},
		{"two families in a file", []string{"diff", mixed, good}, 1, "line 3: healthy, seed 1 after incident, seed 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(t.Context(), tc.args, &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q: want %d and %q", code, errOut.String(), tc.code, tc.want)
			}
		})
	}
}

// FuzzReadFamilyCSV: any input is read or refused with an error, and
// the report of what was read is written without a panic.
func FuzzReadFamilyCSV(f *testing.F) {
	f.Add(diffHeader + diffLine("1", "a", "1.0000", "0.9", "-"))
	f.Add(diffHeader + diffLine("2", "a", "NaN", "+Inf", "1e308"))
	f.Add("family,instance\n1\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, _, err := readFamilyCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		var out bytes.Buffer
		writeDiff(&out, rows, rows, "", 0.03)
	})
}
