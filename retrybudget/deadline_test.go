package retrybudget

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestFormatDeadline(t *testing.T) {
	for _, tc := range []struct {
		header string
		d      time.Duration
		want   string
	}{
		{EnvoyTimeoutHeader, 1500 * time.Millisecond, "1500"},
		{ConnectTimeoutHeader, 1999999 * time.Microsecond, "1999"}, // rounded down, never up
		{"X-Deadline-Ms", time.Millisecond - 1, "0"},
		{EnvoyTimeoutHeader, -time.Second, "0"},
		{EnvoyTimeoutHeader, math.MaxInt64, "9999999999"}, // Connect's 10 digits
		{GRPCTimeoutHeader, 0, "0n"},
		{GRPCTimeoutHeader, -1, "0n"},
		{"grpc-timeout", 99_999_999, "99999999n"},
		{GRPCTimeoutHeader, 100_000_000, "100000u"},
		{GRPCTimeoutHeader, 250 * time.Millisecond, "250000u"},
		{GRPCTimeoutHeader, 2 * time.Minute, "120000m"},
		{GRPCTimeoutHeader, 40 * time.Hour, "144000S"},
		{GRPCTimeoutHeader, math.MaxInt64, "2562047H"},
	} {
		if got := FormatDeadline(tc.header, tc.d); got != tc.want {
			t.Errorf("FormatDeadline(%s, %v) = %q, want %q", tc.header, tc.d, got, tc.want)
		}
	}
}

// TestTransportSendsDeadline: every attempt tells the next hop the time
// left before the caller's deadline when it is sent, never more than the
// attempt timeout, and the transport owns the header: a stale value from
// the caller is replaced or removed. Before, nothing was sent.
func TestTransportSendsDeadline(t *testing.T) {
	clock := newFakeClock()
	u := newUpstream(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			clock.advance(30 * time.Millisecond) // time spent by the first attempt
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	tr, _ := testTransport(t, TransportConfig{DeadlineHeader: "connect-timeout-ms", AttemptTimeout: 5 * time.Second, Now: clock.now})
	ctx, cancel := context.WithDeadline(context.Background(), clock.now().Add(2*time.Second))
	defer cancel()
	req := get(t, u.url()).WithContext(ctx)
	req.Header.Set(ConnectTimeoutHeader, "999999") // stale, copied from an inbound request
	if status, _, _, err := do(t, tr, req); err != nil || status != http.StatusOK {
		t.Fatalf("status %d, %v", status, err)
	}
	if req.Header.Get(ConnectTimeoutHeader) != "999999" {
		t.Fatal("the caller's header was modified")
	}
	ms := func(i int) int64 {
		u.mu.Lock()
		defer u.mu.Unlock()
		v := u.headers[i][ConnectTimeoutHeader]
		if len(v) != 1 {
			t.Fatalf("attempt %d: deadline header %q", i+1, v)
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first, second := ms(0), ms(1)
	if first != 2000 {
		t.Fatalf("first attempt: %d ms left, want the 2 s deadline", first)
	}
	if second != first-30 {
		t.Fatalf("second attempt: %d ms left after the first took 30 ms of %d", second, first)
	}

	// The attempt timeout bounds it; with neither, the stale value goes.
	u2 := newUpstream(t, statuses(200))
	short, _ := testTransport(t, TransportConfig{DeadlineHeader: GRPCTimeoutHeader, AttemptTimeout: 100 * time.Millisecond})
	req = get(t, u2.url()).WithContext(ctx)
	do(t, short, req)
	none, _ := testTransport(t, TransportConfig{DeadlineHeader: GRPCTimeoutHeader})
	req = get(t, u2.url())
	req.Header.Set(GRPCTimeoutHeader, "1H")
	do(t, none, req)
	u2.mu.Lock()
	defer u2.mu.Unlock()
	if v := u2.headers[0].Get(GRPCTimeoutHeader); v != "100000u" {
		t.Errorf("with a 100 ms attempt timeout and 2 s left: %q, want 100000u", v)
	}
	if v, ok := u2.headers[1][GRPCTimeoutHeader]; ok {
		t.Errorf("with no deadline at all: %q sent, want none", v)
	}
}
