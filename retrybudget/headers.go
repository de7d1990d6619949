package retrybudget

import (
	"context"
	"net/http"
	"strconv"
)

// The retry protocol between shedkit clients and servers.
const (
	// NoRetryHeader is set by a shedding server (value "overloaded") on
	// the 429 and 503 responses it sends when it rejects work to protect
	// itself. A [Transport] never retries a response that carries it with
	// any non-empty value, whatever its status and Retry-After.
	NoRetryHeader = "Shedkit-No-Retry"
	// NoRetryValue is the value servers put in NoRetryHeader.
	NoRetryValue = "overloaded"
	// AttemptHeader carries the 1-based attempt number that a
	// [Transport] sets on every attempt: "1" on the first, "2" on the
	// first retry, and so on. Servers read it with [RequestAttempt] or
	// [Propagate].
	AttemptHeader = "Shedkit-Attempt"
)

// maxAttemptValue is the largest attempt number ParseAttempt accepts.
const maxAttemptValue = 9999

// ParseAttempt parses an AttemptHeader value: 1 to 4 ASCII digits
// denoting 1..9999. Anything else, the empty string included, gives 0
// ("not a shedkit attempt").
func ParseAttempt(v string) int {
	if len(v) == 0 || len(v) > 4 {
		return 0
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// RequestAttempt returns the attempt number an inbound request carries in
// AttemptHeader, 0 when it has none or a malformed one.
func RequestAttempt(r *http.Request) int {
	v := r.Header[AttemptHeader]
	if len(v) != 1 {
		return 0 // absent, or repeated: not something we sent
	}
	return ParseAttempt(v[0])
}

type inboundKey struct{}

// WithInboundAttempt returns a context that carries n, the attempt number
// of the inbound request being served. A [Transport] that makes calls on
// behalf of that request reads it to apply its [InboundPolicy]. n <= 0
// returns ctx unchanged.
func WithInboundAttempt(ctx context.Context, n int) context.Context {
	if n <= 0 {
		return ctx
	}
	return context.WithValue(ctx, inboundKey{}, n)
}

// InboundAttempt returns the inbound attempt number carried by ctx, 0 when
// there is none.
func InboundAttempt(ctx context.Context) int {
	n, _ := ctx.Value(inboundKey{}).(int)
	return n
}

// Propagate is server middleware that puts the inbound request's attempt
// number (see [RequestAttempt]) in its context, where a [Transport] used
// by next finds it. Requests without the header pass through untouched
// and cost nothing but a header lookup.
func Propagate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := RequestAttempt(r); n > 0 {
			r = r.WithContext(WithInboundAttempt(r.Context(), n))
		}
		next.ServeHTTP(w, r)
	})
}

// attemptValues holds the AttemptHeader values a Transport sends, so that
// setting the header allocates nothing. The slices have capacity 1: an
// Add by a wrapped transport reallocates rather than writing into them.
var attemptValues = func() [maxAttemptsLimit + 1][]string {
	var vs [maxAttemptsLimit + 1][]string
	for i := 1; i <= maxAttemptsLimit; i++ {
		vs[i] = []string{strconv.Itoa(i)}[:1:1]
	}
	return vs
}()
