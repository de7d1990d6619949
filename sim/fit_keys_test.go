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
