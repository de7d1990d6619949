package nethttp_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"golang.org/x/time/rate"
)

// TestRecorderKeys: a sampled request's record carries the hash of its
// rate-limit key (the trusted key header, else the client address when
// rate limits need a key), 429s included, and never the key itself; a
// request without a key has none.
func TestRecorderKeys(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  shedhttp.Options
		reqs  []string // key header values, "" for none
		want  []string // keys whose hashes the records carry, "" for none
		codes []int
	}{
		{
			name: "no key function",
			reqs: []string{"acme", ""}, want: []string{"", ""}, codes: []int{200, 200},
		},
		{
			name: "key header",
			opts: shedhttp.Options{KeyHeader: "X-Tenant"},
			reqs: []string{"acme", "", "globex"}, want: []string{"acme", "", "globex"}, codes: []int{200, 200, 200},
		},
		{
			name: "rate limited, address as the key",
			opts: shedhttp.Options{KeyHeader: "X-Tenant", RateLimits: map[string]shedhttp.RateLimit{"interactive": {Rate: rate.Every(time.Hour), Burst: 1}}},
			reqs: []string{"acme", "acme", ""}, want: []string{"acme", "acme", "192.0.2.1"}, codes: []int{200, 429, 200},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			if err != nil {
				t.Fatal(err)
			}
			clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			opts := c.opts
			opts.Limiter, opts.Clock, opts.DefaultClass = recLimiter(t, 10), clk.now, "interactive"
			mw, err := nethttp.New(nethttp.Config{Options: opts, Recorder: rec})
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i, k := range c.reqs {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				if k != "" {
					r.Header.Set("X-Tenant", k)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != c.codes[i] {
					t.Fatalf("request %d: status %d, want %d", i, w.Code, c.codes[i])
				}
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(buf.String(), "acme") {
				t.Fatalf("a raw key was written:\n%s", buf.String())
			}
			rd := record.NewReader(&buf)
			var i int
			for {
				r, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.Kind != record.KindRequest {
					continue
				}
				if i < len(c.want) && r.Key != record.KeyHash(c.want[i]) {
					t.Errorf("record %d: key %#x, want the hash of %q", i, r.Key, c.want[i])
				}
				i++
			}
			if i != len(c.want) {
				t.Errorf("%d request records, want %d", i, len(c.want))
			}
		})
	}
}

// TestRecorderKeySourceTooLong: a key header whose name a recording's
// header cannot hold is a configuration error naming KeyHeader, not a
// recording that says nothing.
func TestRecorderKeySourceTooLong(t *testing.T) {
	rec, err := record.New(record.Config{Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Stop()
	long := "X-" + strings.Repeat("t", record.MaxKeySourceBytes)
	_, err = nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: recLimiter(t, 10), KeyHeader: long}, Recorder: rec})
	if !errors.Is(err, shedhttp.ErrInvalidConfig) || !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), "KeyHeader") {
		t.Errorf("New: %v, want an ErrInvalidConfig naming KeyHeader", err)
	}
	if _, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: recLimiter(t, 10), KeyHeader: long}}); err != nil {
		t.Errorf("without a recorder: %v", err)
	}
}
