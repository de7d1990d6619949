package retrybudget

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/shedkit/shedkit/retrybudget"

// Attribute keys. The HTTP ones follow the OpenTelemetry HTTP client
// semantic conventions; the shedkit ones are documented in doc.go.
const (
	attrMethod       = attribute.Key("http.request.method")
	attrMethodOrig   = attribute.Key("http.request.method_original")
	attrServerAddr   = attribute.Key("server.address")
	attrServerPort   = attribute.Key("server.port")
	attrURLFull      = attribute.Key("url.full")
	attrStatusCode   = attribute.Key("http.response.status_code")
	attrErrorType    = attribute.Key("error.type")
	attrResendCount  = attribute.Key("http.request.resend_count")
	attrClient       = attribute.Key("shedkit.retry.client")
	attrBudget       = attribute.Key("shedkit.retry.budget")
	attrReason       = attribute.Key("shedkit.retry.reason")
	attrResend       = attribute.Key("shedkit.retry.resend")
	attrBreakerState = attribute.Key("shedkit.retry.breaker.state")
	attrAttempts     = attribute.Key("shedkit.retry.attempts")
	attrAttempt      = attribute.Key("shedkit.retry.attempt")
	attrDelay        = attribute.Key("shedkit.retry.delay")
	attrRetryAfter   = attribute.Key("shedkit.retry.retry_after")
)

// Span event names on the logical span.
const (
	eventBackoff = "shedkit.retry.backoff"
	eventDenied  = "shedkit.retry.denied"
)

// instruments holds the metric instruments of a Transport with their
// attribute options precomputed, so that recording allocates nothing.
type instruments struct {
	requests    metric.Int64Counter
	attempts    metric.Int64Counter
	denied      metric.Int64Counter
	transitions metric.Int64Counter

	clientOpts  []metric.AddOption
	firstOpts   []metric.AddOption
	resendOpts  []metric.AddOption
	reasonOpts  [len(reasonNames)][]metric.AddOption
	toStateOpts [3][]metric.AddOption
}

func newInstruments(m metric.Meter, client string) (*instruments, error) {
	in := &instruments{}
	var err error
	if in.requests, err = m.Int64Counter("shedkit.retry.requests",
		metric.WithDescription("Logical requests handled by the retrying transport."),
		metric.WithUnit("{request}")); err != nil {
		return nil, err
	}
	if in.attempts, err = m.Int64Counter("shedkit.retry.attempts",
		metric.WithDescription("Attempts sent on the wire, first attempts and retries."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	if in.denied, err = m.Int64Counter("shedkit.retry.denied",
		metric.WithDescription("Attempts the transport wanted to make but did not, by reason."),
		metric.WithUnit("{attempt}")); err != nil {
		return nil, err
	}
	if in.transitions, err = m.Int64Counter("shedkit.retry.breaker.transitions",
		metric.WithDescription("Circuit breaker state changes, by new state."),
		metric.WithUnit("{transition}")); err != nil {
		return nil, err
	}
	c := attrClient.String(client)
	opts := func(kvs ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(kvs, c)...))}
	}
	in.clientOpts = opts()
	in.firstOpts = opts(attrResend.Bool(false))
	in.resendOpts = opts(attrResend.Bool(true))
	for r := range in.reasonOpts {
		in.reasonOpts[r] = opts(attrReason.String(Reason(r).String()))
	}
	for _, s := range []gobreaker.State{gobreaker.StateClosed, gobreaker.StateHalfOpen, gobreaker.StateOpen} {
		in.toStateOpts[s] = opts(attrBreakerState.String(s.String()))
	}
	// Every series from zero: one that appears with its first count hides
	// that count from rate() and increase(), and an alert on the first
	// breaker opening would not fire.
	for r := 1; r < len(in.reasonOpts); r++ {
		in.denied.Add(context.Background(), 0, in.reasonOpts[r]...)
	}
	for _, o := range in.toStateOpts {
		in.transitions.Add(context.Background(), 0, o...)
	}
	return in, nil
}

func (in *instruments) breakerChanged(_, to gobreaker.State) {
	if int(to) < len(in.toStateOpts) {
		in.transitions.Add(context.Background(), 1, in.toStateOpts[to]...)
	}
}

// methods are the methods the semantic conventions know; others are
// reported as _OTHER.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true, http.MethodPatch: true,
}

// spanNames maps known methods to the logical span name, precomputed.
var logicalNames = func() map[string]string {
	m := make(map[string]string, len(knownMethods))
	for k := range knownMethods {
		m[k] = "retry " + k
	}
	return m
}()

func logicalSpanName(method string) string {
	if n, ok := logicalNames[method]; ok {
		return n
	}
	return "retry HTTP"
}

func attemptSpanName(method string) string {
	if knownMethods[method] {
		return method
	}
	return "HTTP"
}

func methodAttrs(method string) []attribute.KeyValue {
	if knownMethods[method] {
		return []attribute.KeyValue{attrMethod.String(method)}
	}
	return []attribute.KeyValue{attrMethod.String("_OTHER"), attrMethodOrig.String(method)}
}

// serverAttrs returns server.address and server.port of u.
func serverAttrs(u *url.URL) []attribute.KeyValue {
	host := u.Hostname()
	kvs := []attribute.KeyValue{attrServerAddr.String(host)}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	if p, err := strconv.Atoi(port); err == nil {
		kvs = append(kvs, attrServerPort.Int(p))
	}
	return kvs
}

// redactedURL returns u without its credentials, and with the values of
// the query parameters that carry signatures replaced, as url.full
// requires: a presigned download link must not end up in a trace backend.
func redactedURL(u *url.URL) string {
	if u.User == nil && u.RawQuery == "" {
		return u.String()
	}
	c := *u
	if u.User != nil {
		c.User = url.UserPassword("REDACTED", "REDACTED")
	}
	c.RawQuery = redactedQuery(u.RawQuery)
	return c.String()
}

// sensitiveParams are the query parameters whose values the semantic
// conventions want redacted in url.full.
var sensitiveParams = []string{"AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"}

// redactedQuery replaces the values of sensitiveParams in a raw query,
// leaving every other byte as it was.
func redactedQuery(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	changed := false
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if slices.Contains(sensitiveParams, k) {
			parts[i], changed = k+"=REDACTED", true
		}
	}
	if !changed {
		return raw
	}
	return strings.Join(parts, "&")
}

// errorType returns a low-cardinality error.type for a transport error.
func errorType(err error, attemptTimedOut bool) string {
	var re *RetryError
	if errors.As(err, &re) {
		if re.Err == nil {
			return re.Reason.String()
		}
		err = re.Err
	}
	var ne net.Error
	switch {
	case attemptTimedOut, errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	// The type of the error under net/http's *url.Error wrapper, such as
	// *net.OpError, as the conventions suggest.
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return fmt.Sprintf("%T", err)
}

// spanKindOpts are precomputed to keep Start free of allocation for the
// options slice.
var (
	internalOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	clientKind   = trace.WithSpanKind(trace.SpanKindClient)
)
