package shedhttp

import (
	"math"
	"strings"
	"time"
)

// Request headers that carry the caller's remaining time to the next hop,
// as relative durations (so that clock skew between hosts does not
// matter). The middleware reads the one its configuration names
// (DeadlineHeader); retrybudget.Transport sends it.
const (
	// EnvoyTimeoutHeader is Envoy's: the time, in whole milliseconds, in
	// which the router expects the request to complete.
	EnvoyTimeoutHeader = "X-Envoy-Expected-Rq-Timeout-Ms"
	// ConnectTimeoutHeader is the Connect protocol's: whole milliseconds.
	ConnectTimeoutHeader = "Connect-Timeout-Ms"
	// GRPCTimeoutHeader is gRPC's: at most 8 ASCII digits and a unit, H
	// (hours), M (minutes), S (seconds), m (milliseconds), u
	// (microseconds) or n (nanoseconds), such as "250m".
	GRPCTimeoutHeader = "Grpc-Timeout"
)

// DefaultMaxDeadline is the longest remaining time the middleware takes
// from a deadline header by default: a peer that announces more gets this.
// A minute is longer than nearly any interactive request's deadline and
// short enough that a peer's wrong value cannot keep work alive for long.
const DefaultMaxDeadline = time.Minute

// maxMillisDigits bounds a millisecond value: Connect allows at most 10
// digits (about 115 days), which a time.Duration holds.
const maxMillisDigits = 10

// maxGRPCDigits is gRPC's bound on the digits of a timeout value.
const maxGRPCDigits = 8

// ParseDeadline parses the value v of the deadline header named header
// (case-insensitive) and returns the remaining time it announces. For
// GRPCTimeoutHeader the value is in gRPC's format (see there); for every
// other name it is whole milliseconds, as in EnvoyTimeoutHeader and
// ConnectTimeoutHeader: 1 to 10 ASCII digits. Zero means that no time is
// left. Nothing else is accepted: no sign, no space, no fraction, no
// other unit; ok is false for a malformed value, which the middleware
// ignores. A gRPC value too large for a time.Duration saturates. It
// allocates nothing and never panics.
func ParseDeadline(header, v string) (d time.Duration, ok bool) {
	if strings.EqualFold(header, GRPCTimeoutHeader) {
		return parseGRPCTimeout(v)
	}
	n, ok := parseDigits(v, maxMillisDigits)
	if !ok {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// parseDigits parses 1 to max ASCII digits.
func parseDigits(v string, max int) (int64, bool) {
	if len(v) == 0 || len(v) > max {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// grpcUnits maps gRPC's timeout units to durations.
var grpcUnits = [...]struct {
	unit byte
	d    time.Duration
}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}, {'m', time.Millisecond}, {'u', time.Microsecond}, {'n', time.Nanosecond}}

func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 {
		return 0, false
	}
	n, ok := parseDigits(v[:len(v)-1], maxGRPCDigits)
	if !ok {
		return 0, false
	}
	for _, u := range grpcUnits {
		if v[len(v)-1] == u.unit {
			if n > math.MaxInt64/int64(u.d) {
				return math.MaxInt64, true
			}
			return time.Duration(n) * u.d, true
		}
	}
	return 0, false
}
