package retrybudget

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A RoundTripper under the Transport that panics must not leave the
// attempt's CLIENT span open: an unended span is never exported, so the
// trace loses the very attempt that failed, and the SDK keeps it alive.
func TestAttemptSpanEndsWhenBasePanics(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	tr, _ := testTransport(t, TransportConfig{TracerProvider: tp, Base: roundTripperFunc(func(*http.Request) (*http.Response, error) {
		panic("base transport bug")
	})})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_, _ = tr.RoundTrip(get(t, "http://upstream.test/"))
	}()
	if started, ended := len(sr.Started()), len(sr.Ended()); started != 2 || ended != started {
		t.Fatalf("%d spans started, %d ended: want the logical and the attempt span, both ended", started, ended)
	}
	for _, s := range sr.Ended() {
		if s.SpanKind() == trace.SpanKindClient && s.Status().Code != codes.Error {
			t.Errorf("the panicked attempt's span has status %v, want error", s.Status())
		}
	}
}

// The logical span of a request that ends on an error status must say
// which, in error.type, as its attempt spans do: the semantic conventions
// want error.type whenever the span's status is an error, and a trace
// search for error.type would otherwise miss every logical request that
// failed on a status.
func TestLogicalSpanErrorTypeOnStatus(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	up := newUpstream(t, statuses(500))
	tr, _ := testTransport(t, TransportConfig{TracerProvider: tp, MaxAttempts: 1})
	if status, _, _, err := do(t, tr, get(t, up.url())); err != nil || status != 500 {
		t.Fatalf("status %d err %v", status, err)
	}
	for _, s := range sr.Ended() {
		if s.SpanKind() != trace.SpanKindInternal {
			continue
		}
		if s.Status().Code != codes.Error {
			t.Errorf("logical span status %v, want error", s.Status())
		}
		if et, ok := attrOf(s.Attributes(), attrErrorType); !ok || et.AsString() != "500" {
			t.Errorf("logical span error.type %q (set %v), want \"500\"", et.AsString(), ok)
		}
	}
}

// url.full on attempt spans must not carry the signatures of presigned
// URLs: the semantic conventions ask for the values of AWSAccessKeyId,
// Signature, sig and X-Goog-Signature to be replaced by REDACTED, as the
// credentials already are. A trace backend is not a place for a working
// S3 or GCS download link.
func TestURLFullRedactsSignatures(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	up := newUpstream(t, statuses(200))
	tr, _ := testTransport(t, TransportConfig{TracerProvider: tp})
	query := "?X-Goog-Signature=g00d&a=1&AWSAccessKeyId=AKIA&Signature=s3cr3t&sig=azure&b=2"
	if _, _, _, err := do(t, tr, get(t, up.url()+query)); err != nil {
		t.Fatal(err)
	}
	want := up.url() + "?X-Goog-Signature=REDACTED&a=1&AWSAccessKeyId=REDACTED&Signature=REDACTED&sig=REDACTED&b=2"
	n := 0
	for _, s := range sr.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		n++
		u, _ := attrOf(s.Attributes(), attrURLFull)
		if u.AsString() != want {
			t.Errorf("url.full %q, want %q", u.AsString(), want)
		}
		for _, secret := range []string{"g00d", "AKIA", "s3cr3t", "azure"} {
			if strings.Contains(u.AsString(), secret) {
				t.Errorf("url.full %q holds %q", u.AsString(), secret)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d attempt spans, want 1", n)
	}
}
