package retrybudget

import (
	"strconv"
	"strings"
	"time"
)

// Headers that carry a request's remaining time to the next hop, as a
// relative duration (clock skew between hosts does not matter). Set one as
// [TransportConfig.DeadlineHeader]; shedkit's middleware reads the one its
// own configuration names, from trusted peers only.
const (
	// EnvoyTimeoutHeader is Envoy's x-envoy-expected-rq-timeout-ms: whole
	// milliseconds.
	EnvoyTimeoutHeader = "X-Envoy-Expected-Rq-Timeout-Ms"
	// ConnectTimeoutHeader is the Connect protocol's: whole milliseconds.
	ConnectTimeoutHeader = "Connect-Timeout-Ms"
	// GRPCTimeoutHeader is gRPC's grpc-timeout: at most 8 digits and a
	// unit (H, M, S, m, u, n).
	GRPCTimeoutHeader = "Grpc-Timeout"
)

// maxGRPCTimeoutValue is the largest value gRPC's 8 digits hold.
const maxGRPCTimeoutValue = 99_999_999

// maxMillisValue is the largest millisecond value sent: Connect allows 10
// digits (about 115 days).
const maxMillisValue = 9_999_999_999

// grpcUnits are gRPC's timeout units, finest first.
var grpcUnits = [...]struct {
	d    time.Duration
	unit string
}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}}

// FormatDeadline returns the value of the deadline header named header
// (case-insensitive) for the remaining time d. It is rounded down, never
// up, so that the next hop is never told it has more time than it has:
// whole milliseconds (at most 10 digits, as Connect allows) for every
// header but [GRPCTimeoutHeader], which gets gRPC's format in the finest
// unit whose value fits 8 digits. d <= 0 gives "0" ("0n" for gRPC): no
// time left.
func FormatDeadline(header string, d time.Duration) string {
	if !strings.EqualFold(header, GRPCTimeoutHeader) {
		if d < time.Millisecond {
			return "0"
		}
		return strconv.FormatInt(min(int64(d/time.Millisecond), maxMillisValue), 10)
	}
	if d <= 0 {
		return "0n"
	}
	for _, u := range grpcUnits {
		if v := int64(d / u.d); v <= maxGRPCTimeoutValue {
			return strconv.FormatInt(v, 10) + u.unit
		}
	}
	return strconv.FormatInt(maxGRPCTimeoutValue, 10) + "H" // beyond any time.Duration
}

// deadlineValue returns the value of the deadline header for an attempt
// sent at now: the time left before the caller's deadline (ctxDeadline,
// when hasDeadline), never more than the attempt's own timeout (0: none).
// ok is false when the attempt has neither.
func deadlineValue(header string, now, ctxDeadline time.Time, hasDeadline bool, attemptTimeout time.Duration) (string, bool) {
	var left time.Duration
	switch {
	case hasDeadline && attemptTimeout > 0:
		left = min(ctxDeadline.Sub(now), attemptTimeout)
	case hasDeadline:
		left = ctxDeadline.Sub(now)
	case attemptTimeout > 0:
		left = attemptTimeout
	default:
		return "", false
	}
	return FormatDeadline(header, left), true
}
