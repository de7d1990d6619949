package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/sim"
)

// tinyTune is a two-class scenario at about 85% of its upstream's
// capacity, small enough to tune in a second.
const tinyTune = `name: tiny
duration: 30s
warmup: 5s
classes:
  - name: interactive
    rate: 150
    timeout: 1s
  - name: batch
    rate: 150
    timeout: 2s
    retry: {max_attempts: 2}
upstream:
  capacity: 20
  service_time: {dist: lognormal, median: 50ms, sigma: 0.5}
  degradation: 0.5
`

// tenantsTune is one class of 10 tenants, the heaviest sending half of
// its 100/s, with room for a 3x spike but not for the heaviest tenant's
// flood.
const tenantsTune = `name: tenants
duration: 30s
warmup: 5s
classes:
  - name: api
    rate: 100
    timeout: 1s
    keys: {count: 10, zipf: 1.5}
upstream:
  capacity: 10
  service_time: {dist: lognormal, median: 20ms, sigma: 0.5}
  degradation: 0.5
`

// runTuneCLI runs shedsim tune on tinyTune with args and returns stdout.
func runTuneCLI(t *testing.T, args ...string) string {
	t.Helper()
	return runTuneOn(t, tinyTune, args...)
}

// runTuneOn runs shedsim tune on the scenario src with args and returns
// stdout.
func runTuneOn(t *testing.T, src string, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args = append(append([]string{"tune", "-quiet"}, args...), path)
	if code := Main(context.Background(), args, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	return out.String()
}

// TestTuneOutput checks the ranking, the recommendation and that the
// printed scenario parses with the winner's settings. Seed 2's winner
// carries a retry budget, so that the snippet builds one.
func TestTuneOutput(t *testing.T) {
	out := runTuneCLI(t, "-budget", "4", "-top", "3", "-seed", "2")
	for _, want := range []string{"tiny-slowdown", "tiny-spike", "tiny-retry-storm", "recommended: ", "baseline (", "func newAdmission()", "shed.New(shed.Config{", "retrybudget.NewBudget("} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, y, ok := strings.Cut(out, "# Scenario with these settings")
	if !ok {
		t.Fatalf("no scenario in:\n%s", out)
	}
	sc, err := sim.ParseScenario("tuned.yaml", []byte(y[strings.IndexByte(y, '\n')+1:]))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Policies) != 1 || sc.Classes[1].Retry.Budget == nil {
		t.Errorf("tuned scenario: policies %v, batch budget %v", sc.Policies, sc.Classes[1].Retry.Budget)
	}
}

func TestTuneUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"tune", "-h"}, &out, &errb); code != ExitOK || !strings.Contains(errb.String(), "Objective:") {
		t.Errorf("tune -h: exit %d, %q", code, errb.String())
	}
	for _, args := range [][]string{{"tune"}, {"tune", "-budget", "0", "steady"}, {"tune", "no-such-scenario"}} {
		if code := Main(context.Background(), args, &out, &errb); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

// TestTuneSnippetCompiles pastes the printed Go code, and the code of an
// AIMD candidate with queues and a budget, into a throwaway module that
// replaces github.com/shedkit/shedkit with this repository, and vets it:
// the recommendation always compiles, its rate limits too (the AIMD
// candidate has one, set in the middleware's options), and a per-key
// quota of a class spread over keys, with and without the KeyHeader its
// recorded keys came from, and a cap on each tenant's requests in flight
// (a shedredis.ConcurrencyMiddleware: the module requires shedredis too,
// replaced by this repository's, and its go.sum has shedredis's sums).
func TestTuneSnippetCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module with the go command")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out := runTuneCLI(t, "-budget", "3")
	_, snippet, _ := strings.Cut(out, "// Go: paste into your service's package.\n")
	snippet, _, _ = strings.Cut(snippet, "\n# Scenario with these settings")
	aimd, quota, header := candidateSnippets(t)
	conc := concurrencySnippet(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	redis := filepath.Join(root, "middleware", "shedredis")
	gomod := "module tunecheck\n\ngo 1.26\n\nrequire (\n\tgithub.com/shedkit/shedkit v0.0.0\n\tgithub.com/shedkit/shedkit/middleware/shedredis v0.0.0\n)\n\n" +
		"replace github.com/shedkit/shedkit => " + root + "\n\nreplace github.com/shedkit/shedkit/middleware/shedredis => " + redis + "\n"
	sum, _ := os.ReadFile(filepath.Join(root, "go.sum"))
	redisSum, _ := os.ReadFile(filepath.Join(redis, "go.sum"))
	files := map[string]string{
		"go.mod":      gomod,
		"go.sum":      string(sum) + string(redisSum),
		"e/conc.go":   "package e\n\n" + conc + "\nvar New, Caps = newAdmission, newTenantConcurrency\n",
		"main.go":     "package main\n\n" + snippet + "\nfunc main() { _, _, _ = newAdmission() }\n",
		"b/aimd.go":   "package b\n\n" + aimd + "\nvar New, Options = newAdmission, newHTTPOptions\n",
		"c/quota.go":  "package c\n\n" + quota + "\nvar New, Options = newAdmission, newHTTPOptions\n",
		"d/header.go": "package d\n\n" + header + "\nvar New, Options = newAdmission, newHTTPOptions\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy", "-e"}, {"vet", "./..."}, {"run", "."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		b, err := cmd.CombinedOutput()
		// tidy -e: go-redis's own tests import modules the build does not
		// need, which are not in the cache; a build that needs one fails
		// below, saying GOPROXY=off.
		if err != nil && strings.Contains(string(b), "GOPROXY=off") {
			t.Skipf("the library's dependencies are not in the module cache (go mod download in the repository root):\n%s", b)
		}
		if err != nil {
			t.Fatalf("go %v: %v\n%s\nmain.go:\n%s\nb/aimd.go:\n%s\nc/quota.go:\n%s\nd/header.go:\n%s\ne/conc.go:\n%s", args, err, b, files["main.go"], aimd, quota, header, conc)
		}
	}
}

// candidateSnippets returns the Go snippets of an AIMD candidate with
// queues, a shared rate limit and a budget; of a per-key quota; and of
// the same quota with keys recorded from a trusted header, which sets
// KeyHeader.
func candidateSnippets(t *testing.T) (aimd, quota, header string) {
	t.Helper()
	sc, err := sim.ParseScenario("tiny.yaml", []byte(tinyTune))
	if err != nil {
		t.Fatal(err)
	}
	sc.Service.DemandHold, sc.Service.MaxCost = time.Second, 100
	c := sim.TuneCandidate{Policy: "shedkit-aimd:backoff=0.8,tolerance=3",
		Classes: []sim.TuneClass{{Protected: 0.5, Queue: 8, MaxWait: 50 * time.Millisecond}, {Queue: 32, MaxWait: 1500 * time.Microsecond, RateLimit: &sim.RateLimit{RPS: 112.5, Burst: 11, Shared: true}}},
		Budget:  &sim.Budget{Ratio: 0.1, MinPerSecond: 5}}
	aimd, err = c.GoSnippet(sc)
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := sim.ParseScenario("tenants.yaml", []byte(tenantsTune))
	if err != nil {
		t.Fatal(err)
	}
	k := sim.TuneCandidate{Policy: "shedkit-gradient", Classes: []sim.TuneClass{{RateLimit: &sim.RateLimit{RPS: 100, Burst: 10}}}}
	quota, err = k.GoSnippet(keyed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(quota, `"api": {Rate: 100, Burst: 10},`) || !strings.Contains(quota, "quotas per tenant") {
		t.Errorf("the per-key quota's snippet lacks the limit or says nothing of the key:\n%s", quota)
	}
	// Keys recorded from a trusted header (keys.source, as shedsim fit
	// writes it): the options set KeyHeader.
	fromHeader, err := sim.ParseScenario("tenants.yaml", []byte(strings.Replace(tenantsTune, "zipf: 1.5}", "zipf: 1.5, source: header:X-Tenant}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	header, err = k.GoSnippet(fromHeader)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`KeyHeader: +"X-Tenant",`).MatchString(header) || strings.Contains(quota, "KeyHeader:") {
		t.Errorf("KeyHeader is not set from the header, or set without one:\n%s\n%s", header, quota)
	}
	return aimd, quota, header
}

// concurrencySnippet returns the Go snippet of a candidate with a fleet
// cap on each tenant's requests in flight and a quota, on tenantsTune
// with four replicas and keys taken from a header.
func concurrencySnippet(t *testing.T) string {
	t.Helper()
	y := strings.Replace(tenantsTune, "zipf: 1.5}", "zipf: 1.5, source: header:X-Tenant}", 1) + "service: {replicas: 4}\n"
	sc, err := sim.ParseScenario("tenants.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	c := sim.TuneCandidate{Policy: "shedkit-gradient", Classes: []sim.TuneClass{{
		RateLimit: &sim.RateLimit{RPS: 100, Burst: 10, Shared: true}, KeyConcurrency: &sim.KeyConcurrency{Limit: 8, Shared: true}}}}
	src, err := c.GoSnippet(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shedredis.NewConcurrency(shedredis.Config{Client: client, Replicas: 4,", `{"api", 8},`} {
		if !strings.Contains(src, want) {
			t.Errorf("the cap's snippet lacks %q:\n%s", want, src)
		}
	}
	return src
}

// TestTuneRateLimitsFlag: by default some candidates carry a rate limit
// (rl=); -rate-limits=false keeps the scenario's own (none in tinyTune)
// and says so in the header line.
func TestTuneRateLimitsFlag(t *testing.T) {
	on := runTuneCLI(t, "-budget", "6", "-top", "6")
	off := runTuneCLI(t, "-budget", "6", "-top", "6", "-rate-limits=false")
	if !strings.Contains(on, " rl=") || strings.Contains(on, "-rate-limits=false") {
		t.Errorf("default: no candidate with a rate limit, or the flag in the header:\n%s", on)
	}
	if strings.Contains(off, " rl=") || strings.Contains(off, "rate_limit:") || !strings.Contains(off, "-budget 6 -rate-limits=false\n") {
		t.Errorf("-rate-limits=false: a rate limit was drawn, or the header lacks the flag:\n%s", off)
	}
}

// TestTuneKeysOutput: on a class spread over keys, tune runs the flood
// variant of that class, ranks by the other tenants' goodput during it,
// shows it and names the class, and draws per-key quotas and caps; the printed
// scenario keeps the keys.
func TestTuneKeysOutput(t *testing.T) {
	out := runTuneOn(t, tenantsTune, "-budget", "6", "-top", "6")
	for _, want := range []string{"tenants-flood", "then the other tenants' goodput during the flood", "goodput of class api while its heaviest tenant floods", "worst                   fairness  ", " rl=", " kc=", "keys: {count: 10, zipf: 1.5}"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Rank 1's second column is the other tenants' goodput (fairness).
	_, rank1, _ := strings.Cut(out, "\n   1  ")
	if f := strings.Fields(rank1); len(f) < 2 || !strings.HasSuffix(f[1], "%") || strings.Contains(f[1], "/") {
		t.Errorf("no tenants' figure after the worst case of rank 1:\n%s", out)
	}
	if plain := runTuneCLI(t, "-budget", "2"); strings.Contains(plain, "flood") {
		t.Errorf("a flood without keys:\n%s", plain)
	}
}

// TestTuneStoreOutput: tune runs a scenario whose tenants' limits live in
// a modelled store (service.store) to the end, and the scenario it prints
// keeps the store when the winner keeps a limit there, or says why not.
func TestTuneStoreOutput(t *testing.T) {
	src := strings.Replace(tenantsTune, "    keys: {count: 10, zipf: 1.5}\n",
		"    keys: {count: 10, zipf: 1.5}\n    rate_limit: {rps: 1000, shared: true}\n    key_concurrency: {limit: 50, shared: true}\n", 1) +
		"service:\n  replicas: 3\n  store: {latency: 1ms, lease_ttl: 3s}\n"
	out := runTuneOn(t, src, "-budget", "6", "-top", "6")
	_, y, ok := strings.Cut(out, "# Scenario with these settings")
	if !ok {
		t.Fatalf("no scenario in:\n%s", out)
	}
	sc, err := sim.ParseScenario("tuned.yaml", []byte(y[strings.IndexByte(y, '\n')+1:]))
	if err != nil {
		t.Fatal(err)
	}
	c := sc.Classes[0]
	stored := (c.RateLimit != nil && c.RateLimit.Shared) || (c.KeyConcurrency != nil && c.KeyConcurrency.Shared)
	switch {
	case stored && (sc.Service.Store == nil || sc.Service.Store.LeaseTTL != 3*time.Second):
		t.Errorf("the winner keeps a limit in the store, the tuned scenario's store is %+v:\n%s", sc.Service.Store, y)
	case !stored && !strings.Contains(y, "service.store left out"):
		t.Errorf("the store left out without a word:\n%s", y)
	}
}
