package grpc

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shedkit/shedkit/retrybudget"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/shedkit/shedkit/middleware/grpc"

// Attribute keys. The RPC ones follow the OpenTelemetry RPC semantic
// conventions as otelgrpc emits them (rpc.system.name, rpc.method as
// "pkg.Service/Method", rpc.response.status_code as the code's name); the
// shedkit ones are those of package retrybudget, so that HTTP and gRPC
// clients share dashboards.
const (
	attrRPCSystem   = attribute.Key("rpc.system.name")
	attrRPCMethod   = attribute.Key("rpc.method")
	attrRPCMethodIn = attribute.Key("rpc.method_original")
	attrRPCStatus   = attribute.Key("rpc.response.status_code")
	attrServerAddr  = attribute.Key("server.address")
	attrServerPort  = attribute.Key("server.port")
	attrErrorType   = attribute.Key("error.type")
	attrResendCount = attribute.Key("shedkit.retry.resend_count")
	attrClient      = attribute.Key("shedkit.retry.client")
	attrBudget      = attribute.Key("shedkit.retry.budget")
	attrReason      = attribute.Key("shedkit.retry.reason")
	attrResend      = attribute.Key("shedkit.retry.resend")
	attrBreaker     = attribute.Key("shedkit.retry.breaker.state")
	attrAttempts    = attribute.Key("shedkit.retry.attempts")
	attrAttempt     = attribute.Key("shedkit.retry.attempt")
	attrDelay       = attribute.Key("shedkit.retry.delay")
)

// Span event names on the logical span, those of package retrybudget.
const (
	eventBackoff = "shedkit.retry.backoff"
	eventDenied  = "shedkit.retry.denied"
)

var (
	rpcSystemGRPC = attrRPCSystem.String("grpc")
	internalKind  = trace.WithSpanKind(trace.SpanKindInternal)
	clientKind    = trace.WithSpanKind(trace.SpanKindClient)
)

// numReasons covers retrybudget's Reason values (ReasonBodyNotReplayable
// is last).
const numReasons = int(retrybudget.ReasonBodyNotReplayable) + 1

// instruments holds the Client's metric instruments, with the same names
// and attributes as retrybudget.Transport's, and their attribute options
// precomputed so that recording allocates nothing.
type instruments struct {
	requests    metric.Int64Counter
	attempts    metric.Int64Counter
	denied      metric.Int64Counter
	transitions metric.Int64Counter

	clientOpts  []metric.AddOption
	firstOpts   []metric.AddOption
	resendOpts  []metric.AddOption
	reasonOpts  [numReasons][]metric.AddOption
	toStateOpts [3][]metric.AddOption
}

func newInstruments(m metric.Meter, client string) (*instruments, error) {
	in := &instruments{}
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
		unit       string
	}{
		{&in.requests, "shedkit.retry.requests", "Logical requests handled by the retrying client.", "{request}"},
		{&in.attempts, "shedkit.retry.attempts", "Attempts sent on the wire, first attempts and retries.", "{attempt}"},
		{&in.denied, "shedkit.retry.denied", "Attempts the client wanted to make but did not, by reason.", "{attempt}"},
		{&in.transitions, "shedkit.retry.breaker.transitions", "Circuit breaker state changes, by new state.", "{transition}"},
	} {
		ctr, err := m.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.unit))
		if err != nil {
			return nil, err
		}
		*c.dst = ctr
	}
	cl := attrClient.String(client)
	opts := func(kvs ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(kvs, cl)...))}
	}
	in.clientOpts = opts()
	in.firstOpts = opts(attrResend.Bool(false))
	in.resendOpts = opts(attrResend.Bool(true))
	for r := range in.reasonOpts {
		in.reasonOpts[r] = opts(attrReason.String(retrybudget.Reason(r).String()))
	}
	for _, s := range []gobreaker.State{gobreaker.StateClosed, gobreaker.StateHalfOpen, gobreaker.StateOpen} {
		in.toStateOpts[s] = opts(attrBreaker.String(s.String()))
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

func (in *instruments) breakerChanged(to gobreaker.State) {
	if int(to) < len(in.toStateOpts) {
		in.transitions.Add(context.Background(), 1, in.toStateOpts[to]...)
	}
}

// gauges remembers the (meter, budget) pairs whose balance gauge is
// registered, so that several Clients sharing a budget observe it once.
var gauges sync.Map

type gaugeKey struct {
	m metric.Meter
	b *retrybudget.Budget
}

// observeBalance registers shedkit.retry.budget.balance for b on m, once
// per pair (always, for meters that cannot be map keys).
func observeBalance(m metric.Meter, b *retrybudget.Budget) error {
	if t := reflect.TypeOf(m); t == nil || t.Comparable() {
		if _, loaded := gauges.LoadOrStore(gaugeKey{m, b}, struct{}{}); loaded {
			return nil
		}
	}
	g, err := m.Int64ObservableGauge("shedkit.retry.budget.balance",
		metric.WithDescription("Retries the budget would allow now."),
		metric.WithUnit("{retry}"))
	if err != nil {
		return err
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrBudget.String(b.Name())))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, b.Snapshot().Balance, opt)
		return nil
	}, g)
	return err
}

// codeNames are the canonical names of the codes, as
// rpc.response.status_code wants them.
var codeNames = [...]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "_OTHER"
}

// Telemetry of a call whose method the client does not recognise, as the
// OpenTelemetry RPC conventions name it: rpc.method "_OTHER" (the name
// sent goes in rpc.method_original only) and the span named after
// rpc.system.name. A proxy forwards whatever names its own clients send,
// so naming spans after them would let any client create as many span
// names as it likes.
const (
	otherMethod   = "_OTHER"
	otherSpanName = "grpc"
)

// knownMethod reports whether the client recognises fullMethod: the call
// comes from a generated stub, which passes grpc.StaticMethod (the signal
// grpc-go's own OpenTelemetry plugin uses), or the method is one of
// ClientConfig.KnownMethods. It costs a map lookup and a scan of opts, no
// allocation.
func (c *Client) knownMethod(fullMethod string, opts []grpc.CallOption) bool {
	if _, ok := c.known[fullMethod]; ok {
		return true
	}
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); ok {
			return true
		}
	}
	return false
}

// maxMethodOriginalBytes bounds rpc.method_original: the name comes from
// the network (a proxy forwards what its clients send), bounded only by
// gRPC's header limits, and every span would carry it.
const maxMethodOriginalBytes = 256

// methodOriginal returns name as rpc.method_original: at most its first
// maxMethodOriginalBytes bytes, cut between characters, and valid UTF-8,
// as OpenTelemetry string attributes must be, each byte that is not
// UTF-8 replaced by U+FFFD. A short valid name is returned as it is,
// without allocation.
func methodOriginal(name string) string {
	if len(name) <= maxMethodOriginalBytes && utf8.ValidString(name) {
		return name
	}
	var b strings.Builder
	b.Grow(maxMethodOriginalBytes)
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:]) // utf8.RuneError, 1 for a byte that is not UTF-8
		if b.Len()+utf8.RuneLen(r) > maxMethodOriginalBytes {
			break
		}
		b.WriteRune(r)
		i += size
	}
	return b.String()
}

// methodName returns the span name and rpc.method of a full method name:
// "pkg.Service/Method", without the leading slash.
func methodName(fullMethod string) string {
	if len(fullMethod) > 1 && fullMethod[0] == '/' {
		return fullMethod[1:]
	}
	return fullMethod
}
