package grpc

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// DefaultOutcome maps the error a handler returned to its permit's
// outcome, as the HTTP middleware maps statuses (shedhttp.DefaultOutcome):
//
//   - nil (OK): Success, a latency sample; Ignored for client-streaming
//     and bidirectional calls, whose duration is set by how long the
//     client keeps sending, not by the service.
//   - Unavailable, DeadlineExceeded: Dropped. They are what an overloaded
//     or timed-out dependency produces (HTTP 503, 504): the signal the
//     limit must react to.
//   - any other code: Ignored. Client errors (InvalidArgument, NotFound,
//     PermissionDenied...) are often answered before any real work, and a
//     handler bug or a dependency that fails fast (Internal, Unknown)
//     says nothing about capacity: as a Success its short latency would
//     pull the limit up while calls fail; as a drop it would shrink the
//     limit for a fault that less concurrency does not fix.
//
// Context errors returned as such count by their gRPC code
// (context.DeadlineExceeded is DeadlineExceeded).
func DefaultOutcome(call Call, err error) shed.Outcome {
	switch codeOf(err) {
	case codes.OK:
		if call.clientBound() {
			return shed.Ignored
		}
		return shed.Success
	case codes.Unavailable, codes.DeadlineExceeded:
		return shed.Dropped
	}
	return shed.Ignored
}

// codeOf returns the gRPC code of err, as the gRPC server sends it:
// context errors map to their codes, errors without a status to Unknown.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// AttemptMetadata is the metadata key that carries retrybudget's attempt
// number (retrybudget.AttemptHeader, lower-cased as gRPC wants keys): the
// Client sets it on every attempt, and the server interceptors put it in
// the handler's context (retrybudget.WithInboundAttempt), where a
// retrybudget.Transport or a Client used by the handler applies its
// InboundPolicy.
const AttemptMetadata = "shedkit-attempt"

// inboundAttempt returns the attempt number the call carries, 0 if none.
func inboundAttempt(ctx context.Context) int {
	v := metadata.ValueFromIncomingContext(ctx, AttemptMetadata)
	if len(v) != 1 {
		return 0 // absent, or repeated: not something we sent
	}
	return retrybudget.ParseAttempt(v[0])
}

// remoteHost returns the host part of a peer address ("ip:port"), or addr
// itself when it has no port.
func remoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// addrKey returns the rate-limit key of the peer address host, as the HTTP
// middleware computes it: an IPv4 address as itself, also when it comes
// IPv4-mapped; an IPv6 address as its prefix of v6Bits bits in CIDR
// notation ("2001:db8:1:2::/64"), without its zone, because one subscriber
// holds a whole /64; anything else (a Unix socket) as itself. It is a copy
// of the middleware's internal helper rather than an import of it: this
// module may be built against another version of the root module, whose
// internal packages promise nothing.
func addrKey(host string, v6Bits int) string {
	if strings.IndexByte(host, ':') < 0 {
		return host
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if a.Is4In6() {
		return a.Unmap().String()
	}
	if nat64Prefix.Contains(a) {
		// An IPv4 client through stateless translation (RFC 6052's
		// well-known prefix) counts by its own address, as IPv4 clients
		// do: grouped by /64, every one of them would share one key.
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:])).String()
	}
	p, err := a.WithZone("").Prefix(v6Bits)
	if err != nil {
		return host
	}
	return p.String()
}

// nat64Prefix is RFC 6052's well-known prefix for IPv4 addresses in IPv6.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
