package shedhttp_test

import (
	"math"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
)

func TestParseDeadline(t *testing.T) {
	for _, tc := range []struct {
		header, v string
		want      time.Duration
		ok        bool
	}{
		{shedhttp.EnvoyTimeoutHeader, "1500", 1500 * time.Millisecond, true},
		{"connect-timeout-ms", "0", 0, true},
		{"X-My-Deadline", "0000000001", time.Millisecond, true},
		{shedhttp.ConnectTimeoutHeader, "9999999999", 9999999999 * time.Millisecond, true},
		{shedhttp.ConnectTimeoutHeader, "10000000000", 0, false}, // 11 digits
		{shedhttp.EnvoyTimeoutHeader, "", 0, false},
		{shedhttp.EnvoyTimeoutHeader, "-5", 0, false},
		{shedhttp.EnvoyTimeoutHeader, "+5", 0, false},
		{shedhttp.EnvoyTimeoutHeader, " 5", 0, false},
		{shedhttp.EnvoyTimeoutHeader, "5.5", 0, false},
		{shedhttp.EnvoyTimeoutHeader, "5m", 0, false},
		{shedhttp.EnvoyTimeoutHeader, "٥", 0, false}, // a non-ASCII digit
		{shedhttp.GRPCTimeoutHeader, "250m", 250 * time.Millisecond, true},
		{"grpc-timeout", "1H", time.Hour, true},
		{"GRPC-TIMEOUT", "3M", 3 * time.Minute, true},
		{shedhttp.GRPCTimeoutHeader, "2S", 2 * time.Second, true},
		{shedhttp.GRPCTimeoutHeader, "7u", 7 * time.Microsecond, true},
		{shedhttp.GRPCTimeoutHeader, "0n", 0, true},
		{shedhttp.GRPCTimeoutHeader, "99999999H", math.MaxInt64, true}, // saturates
		{shedhttp.GRPCTimeoutHeader, "123456789n", 0, false},           // 9 digits
		{shedhttp.GRPCTimeoutHeader, "5", 0, false},
		{shedhttp.GRPCTimeoutHeader, "m", 0, false},
		{shedhttp.GRPCTimeoutHeader, "5s", 0, false},
		{shedhttp.GRPCTimeoutHeader, "5 S", 0, false},
		{shedhttp.GRPCTimeoutHeader, "-5S", 0, false},
	} {
		got, ok := shedhttp.ParseDeadline(tc.header, tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseDeadline(%s, %q) = %v, %v; want %v, %v", tc.header, tc.v, got, ok, tc.want, tc.ok)
		}
	}
	// The names agree with the client's.
	if shedhttp.EnvoyTimeoutHeader != retrybudget.EnvoyTimeoutHeader || shedhttp.ConnectTimeoutHeader != retrybudget.ConnectTimeoutHeader ||
		shedhttp.GRPCTimeoutHeader != retrybudget.GRPCTimeoutHeader {
		t.Error("shedhttp and retrybudget name the deadline headers differently")
	}
}
