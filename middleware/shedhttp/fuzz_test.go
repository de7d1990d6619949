package shedhttp_test

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// FuzzRetryAfterRoundTrip: the Retry-After a shedding server sends for a
// delay d is whole seconds, at least 1, never shorter than d, less than a
// second longer, and parses back (retrybudget.ParseRetryAfter, what a
// shedkit client reads) to the same number of seconds, capped at a day.
func FuzzRetryAfterRoundTrip(f *testing.F) {
	for _, d := range []int64{math.MinInt64, -1, 0, 1, int64(time.Second) - 1, int64(time.Second), int64(time.Second) + 1,
		int64(300 * time.Second), int64(301 * time.Second), int64(24 * time.Hour), int64(24*time.Hour) + 1, math.MaxInt64 - int64(time.Second), math.MaxInt64} {
		f.Add(d)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ns int64) {
		d := time.Duration(ns)
		v := shedhttp.RetryAfterValue(d)
		if len(v) != 1 {
			t.Fatalf("RetryAfterValue(%v) = %q, want one value", d, v)
		}
		secs, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || secs < 1 || v[0] != strconv.FormatInt(secs, 10) || secs != shedhttp.RetryAfterSeconds(d) {
			t.Fatalf("RetryAfterValue(%v) = %q: not canonical whole seconds >= 1 (%v)", d, v[0], err)
		}
		if d < math.MaxInt64-time.Second && (time.Duration(secs)*time.Second < d || (d >= time.Second && time.Duration(secs)*time.Second >= d+time.Second)) {
			t.Fatalf("RetryAfterValue(%v) = %d s: not d rounded up", d, secs)
		}
		got, ok := retrybudget.ParseRetryAfter(v[0], now)
		want := retrybudget.MaxParsedRetryAfter
		if secs < int64(want/time.Second) {
			want = time.Duration(secs) * time.Second
		}
		if !ok || got != want {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", v[0], got, ok, want)
		}
	})
}

// FuzzWriteProblem: for any status and method, the default rejection body
// is an RFC 9457 object with exactly type, title, status and detail, its
// Content-Length is right, HEAD gets no body, and nothing of the
// rejection (reason, class) leaks into it.
func FuzzWriteProblem(f *testing.F) {
	for _, s := range []int{429, 503, 413, 500, 418, 100, 599, 999} {
		f.Add(s, "GET", uint8(shed.ReasonQueueFull), uint8(3))
	}
	f.Add(503, "HEAD", uint8(shed.ReasonDraining), uint8(0))
	f.Add(429, "head", uint8(shed.ReasonRateLimited), uint8(1))
	f.Fuzz(func(t *testing.T, status int, method string, reason, class uint8) {
		if status < 100 || status > 999 {
			return // net/http refuses to write such a status at all
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Method = method
		w := httptest.NewRecorder()
		rej := shedhttp.Rejection{Status: status, Reason: shed.Reason(reason % shed.NumReasons), Class: shed.Class(class % shed.MaxClasses), RetryAfter: time.Second}
		shedhttp.WriteProblem(w, r, rej)
		if w.Code != status || w.Header().Get("Content-Type") != shedhttp.ProblemContentType {
			t.Fatalf("code %d, content type %q", w.Code, w.Header().Get("Content-Type"))
		}
		body := shedhttp.ProblemBody(status)
		if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(body)) {
			t.Fatalf("Content-Length %s for a body of %d bytes", cl, len(body))
		}
		if method == http.MethodHead {
			if w.Body.Len() != 0 {
				t.Fatalf("HEAD response with a body %q", w.Body)
			}
		} else if w.Body.String() != string(body) {
			t.Fatalf("body %q, ProblemBody %q", w.Body, body)
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		title := http.StatusText(status)
		if title == "" {
			title = "Error"
		}
		if len(p) != 4 || p["type"] != "about:blank" || p["title"] != title || p["status"] != float64(status) || p["detail"] == "" {
			t.Fatalf("problem %q", body)
		}
		for _, secret := range []string{rej.Reason.String(), "class", "limit", "in-flight", "queue"} {
			if rej.Reason != shed.ReasonNone && strings.Contains(strings.ToLower(string(body)), secret) {
				t.Fatalf("body %q names %q", body, secret)
			}
		}
	})
}

// FuzzMemoryStore: for any key (long, binary, empty), class and valid
// rate limit, a MemoryStore never holds more than MaxKeys buckets, gives a
// new key its first request, never answers a negative wait, and answers
// a wait only with a refusal.
func FuzzMemoryStore(f *testing.F) {
	ops := []byte{0, 1, 2, 0, 0, 0, 3, 4, 5, 250, 0, 0, 1, 1}
	f.Add(0, 2.0, 3, "tenant", ops)
	f.Add(4, 0.5, 1, strings.Repeat("k", 300), ops)
	f.Add(1, 1e-300, 1, "", ops)
	f.Add(64, math.Inf(1), 1, "\x00\xff", ops)
	f.Add(2, 1e300, 1<<30, "a", ops)
	f.Add(-1, 1.0, 1, "a", ops) // invalid
	f.Fuzz(func(t *testing.T, maxKeys int, r float64, burst int, key string, ops []byte) {
		s, err := shedhttp.NewMemoryStore(shedhttp.MemoryStoreConfig{MaxKeys: maxKeys})
		if (err != nil) != (maxKeys < 0) {
			t.Fatalf("NewMemoryStore(%d): %v", maxKeys, err)
		}
		if err != nil {
			return
		}
		lim := shedhttp.RateLimit{Rate: rate.Limit(r), Burst: burst}
		if lim.Validate() != nil {
			return // the middleware validates limits before using a store
		}
		other := shedhttp.RateLimit{Rate: lim.Rate / 2, Burst: max(1, burst/2)}
		if other.Validate() != nil {
			other = lim
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		seen := map[string]bool{}
		for i := 0; i+2 < len(ops) && i < 3000; i += 3 {
			now = now.Add(time.Duration(ops[i]) * time.Millisecond)
			k := key + strconv.Itoa(int(ops[i+1]%16))
			class := shed.Class(ops[i+2] % 3)
			l := lim
			if ops[i+2]&0x80 != 0 {
				l = other // the configuration changed
			}
			ok, wait := s.AllowAt(now, class, k, l)
			if wait < 0 || (ok && wait != 0) || (!ok && wait == 0) {
				t.Fatalf("AllowAt: ok %v, wait %v", ok, wait)
			}
			bk := strconv.Itoa(int(class)) + "/" + k
			if !seen[bk] && !ok {
				t.Fatalf("the first request of key %q (class %d) was refused", k, class)
			}
			seen[bk] = true
			if st := s.Stats(); st.Keys > s.MaxKeys() || st.EvictedBusy > st.Evicted {
				t.Fatalf("stats %+v with MaxKeys %d", st, s.MaxKeys())
			}
		}
	})
}

// FuzzDefaultOutcome: whatever the method, Upgrade header and status, the
// outcome is one of the three, 502-504 are always drops, and an ordinary
// request that succeeded is a latency sample.
func FuzzDefaultOutcome(f *testing.F) {
	f.Add("GET", "", 200)
	f.Add("GET", "websocket", 101)
	f.Add("CONNECT", "", 200)
	f.Add("POST", "h2c", 503)
	f.Add("get", "", 504)
	f.Fuzz(func(t *testing.T, method, upgrade string, status int) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Method = method
		if upgrade != "" {
			r.Header.Set("Upgrade", upgrade)
		}
		o := shedhttp.DefaultOutcome(r, status)
		switch {
		case o > shed.Ignored:
			t.Fatalf("outcome %v", o)
		case status == 502 || status == 503 || status == 504:
			if o != shed.Dropped {
				t.Fatalf("status %d: %v, want dropped", status, o)
			}
		case status < 400 && upgrade == "" && method != http.MethodConnect:
			if o != shed.Success {
				t.Fatalf("%s status %d: %v, want success", method, status, o)
			}
		case o != shed.Ignored:
			t.Fatalf("%s (upgrade %q) status %d: %v, want ignored", method, upgrade, status, o)
		}
	})
}

// FuzzParseDeadline: the deadline header parser never panics, accepts only
// canonical values (what it accepts formats back to the same text with the
// same unit), never returns a negative duration, and reads back what a
// shedkit client (retrybudget.FormatDeadline) sends for any duration:
// never more than that duration, and less by under one unit of the format.
func FuzzParseDeadline(f *testing.F) {
	for _, s := range []struct {
		grpc bool
		v    string
		d    int64
	}{
		{false, "1500", int64(1500 * time.Millisecond)}, {false, "0", 0}, {false, "-1", -1}, {false, "9999999999", math.MaxInt64},
		{false, "", 1}, {false, "1e3", int64(time.Second)}, {true, "250m", int64(250 * time.Millisecond)}, {true, "99999999H", math.MaxInt64},
		{true, "0n", 0}, {true, "1", 99_999_999}, {true, "12345678S", 100_000_000}, {true, "5x", math.MinInt64},
	} {
		f.Add(s.grpc, s.v, s.d)
	}
	f.Fuzz(func(t *testing.T, grpc bool, v string, ns int64) {
		header := shedhttp.ConnectTimeoutHeader
		if grpc {
			header = shedhttp.GRPCTimeoutHeader
		}
		d, ok := shedhttp.ParseDeadline(header, v)
		if ok && d < 0 {
			t.Fatalf("ParseDeadline(%s, %q) = %v: negative", header, v, d)
		}
		if ok && !grpc && strconv.FormatInt(int64(d/time.Millisecond), 10) != strings.TrimLeft(v, "0") && strings.Trim(v, "0") != "" {
			t.Fatalf("ParseDeadline(%s, %q) = %v: not the value it reads", header, v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseDeadline(%s, %q) rejected with %v", header, v, d)
		}
		sent := time.Duration(ns)
		w := retrybudget.FormatDeadline(header, sent)
		got, ok := shedhttp.ParseDeadline(header, w)
		if !ok {
			t.Fatalf("FormatDeadline(%s, %v) = %q, which ParseDeadline refuses", header, sent, w)
		}
		unit, most := time.Millisecond, 9_999_999_999*time.Millisecond
		if grpc {
			units := map[byte]time.Duration{'n': time.Nanosecond, 'u': time.Microsecond, 'm': time.Millisecond, 'S': time.Second, 'M': time.Minute, 'H': time.Hour}
			unit, most = units[w[len(w)-1]], math.MaxInt64
		}
		if want := min(max(sent, 0), most); got > want || want-got >= unit {
			t.Fatalf("%v sent as %q reads back as %v", sent, w, got)
		}
	})
}
