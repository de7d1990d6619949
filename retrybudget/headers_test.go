package retrybudget

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestParseAttempt(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"1", 1}, {"2", 2}, {"0042", 42}, {"9999", 9999},
		{"", 0}, {"0", 0}, {"10000", 0}, {"-1", 0}, {"+1", 0}, {" 1", 0},
		{"1 ", 0}, {"x", 0}, {"1e2", 0}, {"١", 0}, // Arabic-Indic digit one
	}
	for _, tt := range tests {
		if got := ParseAttempt(tt.in); got != tt.want {
			t.Errorf("ParseAttempt(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func FuzzParseAttempt(f *testing.F) {
	for _, s := range []string{"1", "2", "0", "9999", "10000", "", "-1", "abc", "0001", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n := ParseAttempt(v)
		if n < 0 || n > maxAttemptValue {
			t.Fatalf("ParseAttempt(%q) = %d, out of [0, %d]", v, n, maxAttemptValue)
		}
		if n == 0 {
			return
		}
		// A positive result comes only from 1-4 ASCII digits denoting n.
		if len(v) > 4 || !allDigits(v) {
			t.Fatalf("ParseAttempt(%q) = %d for a value that is not 1-4 digits", v, n)
		}
		if m, err := strconv.Atoi(v); err != nil || m != n {
			t.Fatalf("ParseAttempt(%q) = %d, strconv says %d (%v)", v, n, m, err)
		}
	})
}

func TestRequestAttempt(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if RequestAttempt(r) != 0 {
		t.Fatal("no header must give 0")
	}
	r.Header.Set(AttemptHeader, "3")
	if RequestAttempt(r) != 3 {
		t.Fatal("header 3 must give 3")
	}
	r.Header.Add(AttemptHeader, "4")
	if RequestAttempt(r) != 0 {
		t.Fatal("a repeated header is not ours and must give 0")
	}
}

func TestInboundAttemptContext(t *testing.T) {
	ctx := context.Background()
	if InboundAttempt(ctx) != 0 {
		t.Fatal("empty context must give 0")
	}
	if WithInboundAttempt(ctx, 0) != ctx || WithInboundAttempt(ctx, -1) != ctx {
		t.Fatal("n <= 0 must return ctx unchanged")
	}
	if InboundAttempt(WithInboundAttempt(ctx, 2)) != 2 {
		t.Fatal("round trip of the inbound attempt failed")
	}
}

func TestPropagate(t *testing.T) {
	var seen int
	var sameRequest bool
	var in *http.Request
	h := Propagate(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen = InboundAttempt(r.Context())
		sameRequest = r == in
	}))
	for _, tt := range []struct {
		header string
		want   int
		same   bool
	}{{"", 0, true}, {"2", 2, false}, {"junk", 0, true}} {
		in = httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.header != "" {
			in.Header.Set(AttemptHeader, tt.header)
		}
		h.ServeHTTP(httptest.NewRecorder(), in)
		if seen != tt.want || sameRequest != tt.same {
			t.Errorf("header %q: inbound attempt %d (same request %v), want %d (%v)", tt.header, seen, sameRequest, tt.want, tt.same)
		}
	}
}

func TestAttemptValues(t *testing.T) {
	for n := 1; n <= maxAttemptsLimit; n++ {
		v := attemptValues[n]
		if len(v) != 1 || cap(v) != 1 || ParseAttempt(v[0]) != n {
			t.Fatalf("attemptValues[%d] = %q (cap %d)", n, v, cap(v))
		}
	}
}
