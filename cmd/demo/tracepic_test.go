package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSpanKeeperPicksTheMostRetried: of the kept traces, the report shows
// the one with shedkit's decision and the most attempts, as a tree and a
// picture; the keeper holds a bounded number of traces.
func TestSpanKeeperPicksTheMostRetried(t *testing.T) {
	k := newSpanKeeper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(k), sdktrace.WithResource(serviceResource(serviceGateway)))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	request := func(attempts int, decided bool) {
		ctx, server := tr.Start(context.Background(), "GET /api/search", trace.WithSpanKind(trace.SpanKindServer))
		if decided {
			server.SetAttributes(attribute.String("shedkit.decision", "admitted"))
		}
		lctx, logical := tr.Start(ctx, "retry GET")
		for range attempts {
			_, a := tr.Start(lctx, "GET", trace.WithSpanKind(trace.SpanKindClient))
			a.End()
		}
		logical.End()
		server.End()
	}
	request(1, true)
	request(3, true)
	request(5, false) // no decision: not the gateway's
	spans := k.pick()
	if len(spans) != 5 || spans[0].Name() != "GET /api/search" {
		t.Fatalf("picked %d spans starting with %q, want the 3-attempt request's 5", len(spans), spans[0].Name())
	}
	text := traceText(spans)
	if !strings.Contains(text, "gateway: GET /api/search decision=admitted") || strings.Count(text, "\n") != 5 {
		t.Errorf("trace text:\n%s", text)
	}
	if err := drawTrace(filepath.Join(t.TempDir(), "trace.png"), spans); err != nil {
		t.Fatal(err)
	}
	for range keptTraces + 10 {
		request(1, true)
	}
	if n := len(k.traces); n != keptTraces {
		t.Errorf("%d traces kept, want the bound %d", n, keptTraces)
	}
	k.reset()
	if k.pick() != nil {
		t.Error("a trace survived reset")
	}
}
