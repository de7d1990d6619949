package nethttp_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
)

// TestRecorderKeySalt sends the same traffic over 127.0.0.1 through
// middleware recording with two salts, the first twice, and unsalted: a
// salt gives the same keys every time, another salt and no salt other
// ones, and each recording still counts the same tenants.
func TestRecorderKeySalt(t *testing.T) {
	tenants := []string{"acme", "globex", "acme", "initech", "globex", "acme"}
	salt := func(s string) []byte { return []byte(strings.Repeat(s, 16)) }
	a1 := saltedKeys(t, salt("a"), tenants)
	a2 := saltedKeys(t, salt("a"), tenants)
	b := saltedKeys(t, salt("b"), tenants)
	plain := saltedKeys(t, nil, tenants)
	for i, k := range tenants {
		if a1[i] != a2[i] {
			t.Errorf("request %d (%s): key %#x, then %#x under the same salt", i, k, a1[i], a2[i])
		}
		if a1[i] == b[i] || a1[i] == plain[i] || b[i] == plain[i] {
			t.Errorf("request %d (%s): keys %#x, %#x, %#x: the same under two salts or unsalted", i, k, a1[i], b[i], plain[i])
		}
		if plain[i] != record.KeyHash(k) {
			t.Errorf("request %d (%s): unsalted key %#x, want KeyHash's %#x", i, k, plain[i], record.KeyHash(k))
		}
	}
	for _, keys := range [][]uint64{a1, b, plain} {
		if n := distinct(keys); n != 3 {
			t.Errorf("%d tenants in %x, want 3", n, keys)
		}
	}
}

// saltedKeys serves tenants' requests, one after another, through
// middleware recording with salt (nil: unsalted), and returns the keys
// of the request records in order.
func saltedKeys(t *testing.T, salt []byte, tenants []string) []uint64 {
	t.Helper()
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, KeySalt: salt})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: recLimiter(t, 10),
		DefaultClass: "interactive", KeyHeader: "X-Tenant"}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, k := range tenants {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Tenant", k)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	srv.Close() // every handler has returned, so every record is added
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	var keys []uint64
	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == record.KindRequest {
			keys = append(keys, r.Key)
		}
	}
	if len(keys) != len(tenants) {
		t.Fatalf("%d request records, want %d", len(keys), len(tenants))
	}
	return keys
}

func distinct(keys []uint64) int {
	m := map[uint64]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return len(m)
}
