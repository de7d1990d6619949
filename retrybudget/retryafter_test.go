package retrybudget

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 120 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0005", 5 * time.Second, true},
		{"86400", 24 * time.Hour, true},
		{"86401", MaxParsedRetryAfter, true},
		{"99999999999999999999999999", MaxParsedRetryAfter, true},
		{"Wed, 21 Oct 2015 07:28:30 GMT", 30 * time.Second, true},    // IMF-fixdate
		{"Wednesday, 21-Oct-15 07:29:00 GMT", time.Minute, true},     // RFC 850
		{"Wed Oct 21 07:28:10 2015", 10 * time.Second, true},         // asctime
		{"Wed, 21 Oct 2015 07:00:00 GMT", 0, true},                   // past
		{"Thu, 21 Oct 2100 07:28:00 GMT", MaxParsedRetryAfter, true}, // far future
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"12 s", 0, false},
		{"soon", 0, false},
		{"Wed, 32 Oct 2015 07:28:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", " 7 ", "86401", "99999999999999999999",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT",
		"Wed Oct 21 07:28:00 2015", "", "-1", "1.5", "\x00", "Mon, 01 Jan 0001 00:00:00 GMT"} {
		f.Add(s)
	}
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("not ok but d = %v", d)
			}
			return
		}
		if d < 0 || d > MaxParsedRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, out of [0, %v]", v, d, MaxParsedRetryAfter)
		}
		trimmed := strings.TrimSpace(v)
		if n, err := strconv.ParseInt(trimmed, 10, 64); err == nil && trimmed[0] != '+' && trimmed[0] != '-' {
			want := MaxParsedRetryAfter
			if n <= int64(MaxParsedRetryAfter/time.Second) {
				want = time.Duration(n) * time.Second
			}
			if d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", v, d, want)
			}
			return
		}
		if _, err := http.ParseTime(trimmed); err != nil && !allDigits(trimmed) {
			t.Fatalf("ParseRetryAfter(%q) ok, but it is neither digits nor an HTTP-date", v)
		}
	})
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
