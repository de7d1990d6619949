package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/sim"
)

// saturating spikes past its upstream's capacity (20 servers x 1/50 ms
// mean: 400/s) for 8 s.
const saturating = `name: saturating
duration: 30s
classes:
  - name: a
    rate: 200
    schedule:
      - {at: 10s, rate: 800, for: 8s}
upstream:
  capacity: 20
  service_time: {dist: exponential, mean: 50ms}
`

// TestRecordAndFit records a run with -record and fits it with shedsim fit.
func TestRecordAndFit(t *testing.T) {
	dir := t.TempDir()
	scen, rec, fitted := filepath.Join(dir, "s.yaml"), filepath.Join(dir, "rec.jsonl"), filepath.Join(dir, "fitted.yaml")
	if err := os.WriteFile(scen, []byte(saturating), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, e := run(t, "-scenario", scen, "-policies", "none", "-record", rec, "-out", "", "-quiet"); code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, e)
	}
	code, out, e := run(t, "fit", "-o", fitted, rec)
	if code != ExitOK || out != "" {
		t.Fatalf("fit: exit %d, stdout %q: %s", code, out, e)
	}
	for _, want := range []string{"arrivals", "service time: exponential", "capacity: ", "confidence", "note: client deadlines"} {
		if !strings.Contains(e, want) {
			t.Errorf("report lacks %q:\n%s", want, e)
		}
	}
	sc, err := sim.LoadScenario(fitted)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "fitted-rec" || sc.Upstream.Capacity < 17 || sc.Upstream.Capacity > 23 || len(sc.Classes[0].Schedule) != 2 {
		t.Errorf("fitted %+v", sc)
	}
	// The scenario on stdout, the report silenced; then simulate it.
	code, out, e = run(t, "fit", "-quiet", "-name", "again", rec)
	if code != ExitOK || e != "" || !strings.Contains(out, "# Note: ") || !strings.Contains(out, "name: again") {
		t.Errorf("fit to stdout: exit %d, stderr %q\n%s", code, e, out)
	}
	if code, _, e := run(t, "-scenario", fitted, "-policies", "static", "-out", "", "-quiet"); code != ExitOK {
		t.Errorf("simulating the fitted scenario: exit %d: %s", code, e)
	}
	// A processor-sharing upstream, when the user knows it is one.
	code, out, e = run(t, "fit", "-quiet", "-discipline", "ps", rec)
	if code != ExitOK || !strings.Contains(out, "discipline: ps") {
		t.Errorf("fit -discipline ps: exit %d, stderr %q\n%s", code, e, out)
	}
}

// TestRecordAndFitRateLimit: a class's rate limit survives -record and
// shedsim fit: the report prints it and the fitted scenario sets it.
func TestRecordAndFitRateLimit(t *testing.T) {
	dir := t.TempDir()
	scen, rec := filepath.Join(dir, "s.yaml"), filepath.Join(dir, "rec.jsonl")
	limited := strings.Replace(saturating, "    rate: 200\n", "    rate: 200\n    rate_limit: {rps: 300, burst: 30}\n", 1)
	if err := os.WriteFile(scen, []byte(limited), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, e := run(t, "-scenario", scen, "-policies", "none", "-record", rec, "-out", "", "-quiet"); code != ExitOK {
		t.Fatalf("record: exit %d: %s", code, e)
	}
	code, out, e := run(t, "fit", rec)
	if code != ExitOK || !strings.Contains(e, "rate limits (429 before admission") || !strings.Contains(out, "rate_limit:") {
		t.Fatalf("fit: exit %d\n%s\n%s", code, e, out)
	}
	sc, err := sim.ParseScenario("fitted.yaml", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if l := sc.Classes[0].RateLimit; l == nil || l.RPS < 270 || l.RPS > 330 {
		t.Errorf("fitted rate limit %+v, want 300/s within 10%%", l)
	}
}

func TestFitUsage(t *testing.T) {
	code, _, e := run(t, "fit", "-h")
	if code != ExitOK || !strings.Contains(e, "Little's law") || !strings.Contains(e, "-max-steps") || !strings.Contains(e, "rate limits ") {
		t.Errorf("fit -h: exit %d\n%s", code, e)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"k\":\"req\",\"t\":1,\"c\":0}\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, []byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":[],"tick":1}`+"\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"fit"}, ExitUsage, "give one recording"},
		{[]string{"fit", "a", "b"}, ExitUsage, "give one recording"},
		{[]string{"fit", "-interval", "-1s", bad}, ExitUsage, "FitOptions.Interval"},
		{[]string{"fit", "-discipline", "lifo", bad}, ExitUsage, "want fifo or ps"},
		{[]string{"fit", filepath.Join(dir, "missing")}, ExitUsage, "no such file"},
		{[]string{"fit", bad}, ExitUsage, "bad.jsonl:1: record before the header"},
		{[]string{"fit", empty}, ExitFail, "too short"},
		{[]string{"-scenario", "steady,spike", "-policies", "none", "-record", filepath.Join(dir, "r"), "-out", ""}, ExitUsage, "one scenario and one policy"},
	} {
		code, _, e := run(t, c.args...)
		if code != c.code || !strings.Contains(e, c.msg) {
			t.Errorf("%v: exit %d, want %d; stderr %q, want %q", c.args, code, c.code, e, c.msg)
		}
	}
}

// TestFitKeyHashings: shedsim fit over a directory whose files hash keys
// under two salts fits, counts the tenants of the newest salt's files
// only and says so; over salted and older files it warns.
func TestFitKeyHashings(t *testing.T) {
	for _, c := range []struct {
		name  string
		salts [][]byte // per file, nil unsalted
		older int      // file number (1-based) written as before, 0 none
		want  []string
	}{
		{"two salts", [][]byte{[]byte("0123456789abcdef"), []byte("fedcba9876543210")}, 0, []string{
			"record-000001.jsonl hashes its keys as hmac-sha256:f15086f611419a12 but the newest keyed records (",
			"record-000002.jsonl) as hmac-sha256:ee4b47ff25030fe3", "300 more left out, hashed otherwise"}},
		{"salted and older", [][]byte{[]byte("0123456789abcdef"), nil}, 2, []string{
			"record-000002.jsonl does not say how its keys are hashed", "the tenant counts may be wrong"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, salt := range c.salts {
				recordTenants(t, dir, salt, i)
			}
			if c.older > 0 {
				name := filepath.Join(dir, fmt.Sprintf("record-%06d.jsonl", c.older))
				b, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(name, regexp.MustCompile(`,"keys":"[^"]*"`).ReplaceAll(b, nil), 0o644)
			}
			code, out, e := run(t, "fit", dir)
			if code != ExitOK || !strings.Contains(out, "# Note: keys: ") {
				t.Fatalf("fit: exit %d, want 0 and a note in the scenario\n%s\n%s", code, e, out)
			}
			for _, w := range c.want {
				if !strings.Contains(e, w) {
					t.Errorf("report lacks %q:\n%s", w, e)
				}
			}
		})
	}
}

// recordTenants records 3 s of 10 tenants' traffic in a new file of dir,
// keys hashed under salt (nil: unsalted), starting 5 s after the last.
func recordTenants(t *testing.T, dir string, salt []byte, i int) {
	t.Helper()
	rec, err := record.New(record.Config{Dir: dir, MaxRecordsPerSecond: -1, Classes: []string{"api"}, KeySalt: salt})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 5*i, 0, time.UTC)
	for j := range 300 {
		at := start.Add(time.Duration(j) * 10 * time.Millisecond)
		rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1, InFlight: 1}, rec.KeyHash(fmt.Sprint("tenant", j%10)))
		rec.Observe(shed.Event{Kind: shed.EventReleased, Time: at.Add(5 * time.Millisecond), Cost: 1,
			Timed: true, Latency: 5 * time.Millisecond, Outcome: shed.Success})
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestFitRefusesJunkKeyHashing: a header's key hashing with a carriage
// return (which YAML ends a comment at), a line separator and an escape
// used to reach the notes, the scenario's comments and the report; the
// reader now refuses it as malformed, naming the field, and the fit
// writes nothing. (What the notes still repeat from outside, the path,
// is TestFitPathStaysComment's.)
func TestFitRefusesJunkKeyHashing(t *testing.T) {
	dir := t.TempDir()
	recordTenants(t, dir, []byte("0123456789abcdef"), 0)
	recordTenants(t, dir, nil, 1)
	name := filepath.Join(dir, "record-000001.jsonl")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`,"keys":"[^"]*"`).ReplaceAll(b, []byte(`,"keys":"x\rdescription: injected\u2028name: also\u001b[2J"`))
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, e := run(t, "fit", dir)
	if code != ExitUsage || out != "" || !strings.Contains(e, name+":1: header: keys") || strings.ContainsAny(e, "\x1b\r\u2028") {
		t.Fatalf("fit: exit %d, want %d and an error naming the file and keys, escaped\n%q\n%s", code, ExitUsage, e, out)
	}
}

// TestFitPathStaysComment: the path of the recording, which the first
// comment and the notes repeat, may hold any byte but NUL: a carriage
// return or a line separator in it must not end the comment (the rest
// would be read as a field of the scenario), nor an escape make the file
// unreadable (YAML refuses control characters) or reach a terminal
// through the report.
func TestFitPathStaysComment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x\rdescription: injected\u2028name: also\x1b[2J", "rec")
	recordTenants(t, dir, []byte("0123456789abcdef"), 0)
	recordTenants(t, dir, nil, 1) // keys hashed otherwise: a note names both files
	code, out, e := run(t, "fit", dir)
	if code != ExitOK || !strings.Contains(out, "# Fitted by shedsim fit from "+filepath.Dir(filepath.Dir(dir))+"/x description: injected name: also [2J/rec.\n") {
		t.Fatalf("fit: exit %d, want 0 and the path on one comment line\n%s\n%s", code, e, out)
	}
	if strings.ContainsAny(e, "\x1b\r\u2028") || !strings.Contains(e, "also?[2J") {
		t.Fatalf("report with control characters:\n%q", e)
	}
	sc, err := sim.ParseScenario("fitted.yaml", []byte(out))
	if err != nil {
		t.Fatalf("the scenario does not read back: %v\n%s", err, out)
	}
	if sc.Description == "injected" || sc.Name != "fitted-rec" {
		t.Fatalf("the scenario read back with description %q, name %q:\n%s", sc.Description, sc.Name, out)
	}
}
