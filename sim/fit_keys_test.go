package sim

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
)

// recordKeysRun runs sc with a recorder on replica 0 that keeps at most
// maxRate records a second (-1: all) and returns the recording.
func recordKeysRun(t *testing.T, sc *Scenario, policy string, maxRate float64) []byte {
	t.Helper()
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: maxRate})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(sc, RecordPolicy(p, rec, 0), Options{Seed: 11}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFitKeysRoundTrip: a class spread over tenants, recorded through the
// simulated replica's limiter (queued decisions included), fitted back.
// With ample traffic every tenant is seen; the Zipf exponent comes back
// within 0.15, also when only every 2^k-th request is recorded.
func TestFitKeysRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name    string
		keys    Keys
		rate    float64
		policy  string
		maxRate float64
	}{
		{"50 keys zipf 1", Keys{Count: 50, Zipf: 1}, 500, "none", -1},
		{"5 keys even", Keys{Count: 5, Zipf: 0}, 200, "none", -1},
		// A static limit under the load: requests queue, and the
		// decisions on them come from other requests' calls.
		{"200 keys zipf 1.5, queued", Keys{Count: 200, Zipf: 1.5}, 1500, "static:limit=28", -1},
		{"50 keys zipf 0.5, sampled", Keys{Count: 50, Zipf: 0.5}, 2000, "none", 250},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := c.keys
			sc := &Scenario{
				Name: "fit-keys", Duration: 30 * time.Second,
				Classes:  []Class{{Name: "api", Rate: c.rate, Keys: &k, Queue: 100, MaxWait: 50 * time.Millisecond}},
				Upstream: Upstream{Capacity: 40, ServiceTime: Exp(float64(20 * time.Millisecond))},
			}
			data := recordKeysRun(t, sc, c.policy, c.maxRate)
			fit := fitBytes(t, data)
			kf := fit.Classes[0].Keys
			if kf.Keys == nil {
				t.Fatal("no keys fitted")
			}
			// Tenants with an expected few requests may go unseen: at
			// least 95% of them, and never more than there are.
			if kf.Seen > k.Count || kf.Seen < k.Count*95/100 {
				t.Errorf("%d keys seen, want %d (at least 95%%)", kf.Seen, k.Count)
			}
			if d := math.Abs(kf.Keys.Zipf - k.Zipf); d > 0.15 {
				t.Errorf("zipf %.3f, want %.2f within 0.15", kf.Keys.Zipf, k.Zipf)
			}
			got := fit.Scenario.Classes[0].Keys
			if got == nil || got.Count != kf.Seen || got.Zipf != kf.Keys.Zipf {
				t.Errorf("scenario keys %+v, want the fit's %+v", got, kf.Keys)
			}
			if c.policy != "none" && !strings.Contains(string(data), `"q":true`) {
				t.Error("no queued decision recorded: the queued path is not tested")
			}
			if kf.Unkeyed != 0 {
				t.Errorf("%d records of arrivals without a key", kf.Unkeyed)
			}
		})
	}
}

func TestZipfMLEAndChao1(t *testing.T) {
	zipfCounts := func(n int, s float64, total float64) []int {
		var w []float64
		sum := 0.0
		for r := 1; r <= n; r++ {
			w = append(w, math.Pow(float64(r), -s))
			sum += w[r-1]
		}
		out := make([]int, n)
		for i := range w {
			out[i] = int(math.Round(total * w[i] / sum))
		}
		return out
	}
	for _, c := range []struct {
		name      string
		counts    []int
		zipf, tol float64
		chao1     float64
	}{
		{"one key", []int{40}, 0, 0, 1},
		{"even", []int{10, 10, 10, 10}, 0, 1e-6, 4},
		{"exact zipf 1", zipfCounts(100, 1, 1e6), 1, 0.01, 100},
		{"exact zipf 2.5", zipfCounts(20, 2.5, 1e7), 2.5, 0.01, 20},
		{"all on one key of many", []int{1e6, 1, 1}, MaxZipf, 0, 3 + 2*1/2.0},
		{"singletons and doubletons", []int{9, 2, 1, 1}, -1, 0, 4 + 4/2.0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, se := zipfMLE(c.counts)
			if c.zipf >= 0 && math.Abs(s-c.zipf) > c.tol {
				t.Errorf("zipf %.4f, want %.2f within %g", s, c.zipf, c.tol)
			}
			if s < 0 || s > MaxZipf || se < 0 || math.IsNaN(se) {
				t.Errorf("zipf %v, standard error %v: out of range", s, se)
			}
			if got := chao1(c.counts); got != c.chao1 {
				t.Errorf("chao1 %v, want %v", got, c.chao1)
			}
		})
	}
}

// TestFitKeysReport: the report says when no keys were recorded; a class
// with a fitted rate limit keeps one key in the scenario, says why, and
// which keys to write to tune a quota per tenant instead.
func TestFitKeysReport(t *testing.T) {
	fit := &Fit{Classes: []ClassFit{{Name: "api"}}}
	var out strings.Builder
	writeKeys(&out, fit)
	if !strings.Contains(out.String(), "no tenant keys recorded") {
		t.Errorf("report %q, want it to say no keys were recorded", out.String())
	}
	cf := ClassFit{Name: "api", Keys: KeysFit{Keys: &Keys{Count: 30, Zipf: 1}, Seen: 30}}
	if k := fittedKeys(&cf, fit); k == nil || *k != (Keys{Count: 30, Zipf: 1}) {
		t.Errorf("keys %+v, want the fitted ones", k)
	}
	cf.RateLimit.Limit = &RateLimit{RPS: 10, Burst: 1}
	if k := fittedKeys(&cf, fit); k != nil || len(fit.Notes) != 1 || !strings.Contains(fit.Notes[0], "rate limit") ||
		!strings.Contains(fit.Notes[0], "replace its rate_limit with keys: {count: 30, zipf: 1}") {
		t.Errorf("keys %+v, notes %q: want none, and a note on the rate limit that says which keys to write instead", k, fit.Notes)
	}
}

// TestRecordPolicySaltsKeys: a recorder made with a salt records the
// simulated tenants' keys salted, as its header says, so that a fit of
// the recording counts the tenants, and no key is the unsalted one.
func TestRecordPolicySaltsKeys(t *testing.T) {
	salt := []byte("0123456789abcdef")
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, KeySalt: salt})
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{
		Name: "salted-keys", Duration: 10 * time.Second,
		Classes:  []Class{{Name: "api", Rate: 200, Keys: &Keys{Count: 5}}},
		Upstream: Upstream{Capacity: 40, ServiceTime: Exp(float64(20 * time.Millisecond))},
	}
	p, err := ParsePolicy("none")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(sc, RecordPolicy(p, rec, 0), Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	h, err := record.NewKeyHasher(salt)
	if err != nil {
		t.Fatal(err)
	}
	salted, unsalted := map[uint64]bool{}, map[uint64]bool{}
	for i := range 5 {
		salted[h.Hash(fmt.Sprint(i))] = true
		unsalted[record.KeyHash(fmt.Sprint(i))] = true
	}
	r := record.NewReader(&buf)
	seen := map[uint64]bool{}
	for {
		rc, err := r.Next()
		if err != nil {
			break
		}
		if rc.Key == 0 {
			continue
		}
		if !salted[rc.Key] || unsalted[rc.Key] {
			t.Fatalf("key %016x: not the salted hash of a tenant", rc.Key)
		}
		seen[rc.Key] = true
	}
	if hd, _ := r.Header(); hd.KeyHashing != h.Hashing() || len(seen) != 5 {
		t.Fatalf("header hashing %q (want %q), %d tenants seen (want 5)", hd.KeyHashing, h.Hashing(), len(seen))
	}
}

// TestFitKeySource: the fit carries where the counted keys came from into
// the scenario's keys and its report; files that disagree leave it
// unknown with a note naming them, files that do not say leave it as the
// others say with a note, and files left out (another hashing) do not
// count.
func TestFitKeySource(t *testing.T) {
	const tenant, addr = "header:X-Tenant", record.KeySourceAddr
	for _, c := range []struct {
		name   string
		files  []hashedFile
		want   string
		notes  [][]string // each key-source note's words, %d the file number
		report string
	}{
		{"a header", []hashedFile{{src: tenant}, {src: tenant}}, tenant, nil, "taken from     the trusted request header X-Tenant"},
		{"the address", []hashedFile{{src: addr}}, addr, nil, "taken from     the client address"},
		{"Classify", []hashedFile{{src: record.KeySourceClassify}}, "classify", nil, "taken from     the service's Classify function"},
		{"a source of a driver's own", []hashedFile{{src: "jwt:sub"}}, "jwt:sub", nil, "taken from     jwt:sub (a source this shedsim does not know)"},
		{"not said", []hashedFile{{}, {}}, "", nil, "taken from     not said by the recording"},
		{"files disagree", []hashedFile{{src: tenant}, {src: addr}}, "",
			[][]string{{"disagree on where the keys came from", "%1 says header:X-Tenant", "%2 says addr", "will not set a KeyHeader"}}, "taken from     not said"},
		{"one does not say", []hashedFile{{}, {src: tenant}}, tenant,
			[][]string{{"%1 does not say where its keys came from", "%2 says header:X-Tenant"}}, "X-Tenant"},
		{"older hashing, another source, left out", []hashedFile{{salt: testSalt1, src: addr}, {salt: testSalt2, src: tenant}}, tenant, nil, "X-Tenant"},
		{"keyless files say nothing", []hashedFile{{src: addr, keyless: true}, {src: tenant}}, tenant, nil, "X-Tenant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			names := writeHashed(t, dir, c.files)
			rd, err := record.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			fit, err := FitRecording(rd, FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			k := fit.Scenario.Classes[0].Keys
			if fit.KeySource != c.want || k == nil || k.Source != c.want || fit.Classes[0].Keys.Keys.Source != c.want {
				t.Errorf("KeySource %q, scenario keys %+v; want %q", fit.KeySource, k, c.want)
			}
			checkNotes(t, "key source notes", fit.Notes, func(n string) bool {
				return strings.Contains(n, "where the keys came from") || strings.Contains(n, "where its keys came from")
			}, c.notes, names)
			var report bytes.Buffer
			WriteFitReport(&report, fit)
			if !strings.Contains(report.String(), c.report) {
				t.Errorf("report lacks %q:\n%s", c.report, report.String())
			}
			y, err := MarshalScenario(fit.Scenario)
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(y), "source: "); has != (c.want != "") {
				t.Errorf("scenario YAML says a source: %v, want %v:\n%s", has, c.want != "", y)
			}
		})
	}
}

// TestFitKeySourceRateLimited: a class whose rate limit is fitted keeps
// one key, and the note that says which keys to write instead carries
// their source, quoted, so that it reads back as it was.
func TestFitKeySourceRateLimited(t *testing.T) {
	cf := &ClassFit{Name: "api", Keys: KeysFit{Seen: 10, Keys: &Keys{Count: 10, Zipf: 1.2, Source: "header:X-Tenant"}}}
	cf.RateLimit.Limit = &RateLimit{RPS: 100}
	fit := &Fit{}
	if k := fittedKeys(cf, fit); k != nil || len(fit.Notes) != 1 || !strings.Contains(fit.Notes[0], `keys: {count: 10, zipf: 1.2, source: "header:X-Tenant"}`) {
		t.Errorf("keys %+v, notes %q", k, fit.Notes)
	}
}
