package main

import (
	"context"
	"fmt"
	"image/color"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Bounds of what the demo keeps of its own traces for the report: enough
// sampled requests to find one that was retried, in bounded memory.
const (
	keptTraces        = 2000
	keptSpansPerTrace = 32
	traceSampleRatio  = 0.1
)

// spanKeeper is a span processor that keeps the ended spans of a bounded
// number of sampled traces, so that the report can show one logical
// request as a tracing backend would, without one.
type spanKeeper struct {
	mu     sync.Mutex
	traces map[trace.TraceID][]sdktrace.ReadOnlySpan
}

func newSpanKeeper() *spanKeeper {
	return &spanKeeper{traces: map[trace.TraceID][]sdktrace.ReadOnlySpan{}}
}

func (k *spanKeeper) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (k *spanKeeper) Shutdown(context.Context) error                  { return nil }
func (k *spanKeeper) ForceFlush(context.Context) error                { return nil }

func (k *spanKeeper) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().TraceID()
	k.mu.Lock()
	defer k.mu.Unlock()
	spans, ok := k.traces[id]
	if (!ok && len(k.traces) >= keptTraces) || len(spans) >= keptSpansPerTrace {
		return
	}
	k.traces[id] = append(spans, s)
}

// reset forgets every trace (between runs).
func (k *spanKeeper) reset() {
	k.mu.Lock()
	k.traces = map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	k.mu.Unlock()
}

// pick returns the spans of the most retried logical request whose gateway
// span carries shedkit's decision, sorted by start; nil if none was kept.
func (k *spanKeeper) pick() []sdktrace.ReadOnlySpan {
	k.mu.Lock()
	defer k.mu.Unlock()
	var best []sdktrace.ReadOnlySpan
	bestScore := -1
	for _, spans := range k.traces {
		decided, attempts := false, 0
		for _, s := range spans {
			_, ok := attr(s, "shedkit.decision")
			decided = decided || ok
			if s.SpanKind() == trace.SpanKindClient {
				attempts++
			}
		}
		if !decided {
			continue
		}
		// The most attempts; among equals, the longest trace.
		score := attempts*1_000_000 + int(traceSpan(spans)/time.Millisecond)
		if score > bestScore {
			best, bestScore = spans, score
		}
	}
	best = slices.Clone(best)
	slices.SortFunc(best, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return best
}

func traceSpan(spans []sdktrace.ReadOnlySpan) time.Duration {
	if len(spans) == 0 {
		return 0
	}
	lo, hi := spans[0].StartTime(), spans[0].EndTime()
	for _, s := range spans {
		lo, hi = minTime(lo, s.StartTime()), maxTime(hi, s.EndTime())
	}
	return hi.Sub(lo)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spanLabel names a span as a trace view would: its service and name,
// then what shedkit and the HTTP conventions say about it.
func spanLabel(s sdktrace.ReadOnlySpan) string {
	var parts []string
	if v, ok := s.Resource().Set().Value("service.name"); ok {
		parts = append(parts, strings.TrimPrefix(v.AsString(), "shedkit-demo-")+":")
	}
	parts = append(parts, s.Name())
	for _, k := range []string{"shedkit.decision", "shedkit.reason", "shedkit.class", "shedkit.attempt",
		"http.request.resend_count", "http.response.status_code"} {
		if v, ok := attr(s, k); ok {
			parts = append(parts, strings.TrimPrefix(k, "shedkit.")+"="+v.String())
		}
	}
	return strings.Join(parts, " ")
}

// traceText is the picked trace as an indented tree, for the report.
func traceText(spans []sdktrace.ReadOnlySpan) string {
	if len(spans) == 0 {
		return ""
	}
	t0 := spans[0].StartTime()
	depth := map[trace.SpanID]int{}
	var b strings.Builder
	for _, s := range spans {
		d := 0
		if p, ok := depth[s.Parent().SpanID()]; ok {
			d = p + 1
		}
		depth[s.SpanContext().SpanID()] = d
		fmt.Fprintf(&b, "%7.1f ms %7.1f ms  %s%s\n", float64(s.StartTime().Sub(t0))/1e6,
			float64(s.EndTime().Sub(s.StartTime()))/1e6, strings.Repeat("  ", d), spanLabel(s))
	}
	return b.String()
}

// drawTrace writes the picked trace as a timeline: one bar per span, from
// its start to its end, labelled as in traceText.
func drawTrace(file string, spans []sdktrace.ReadOnlySpan) error {
	p := plot.New()
	p.Title.Text = "One logical request of the protected run, as traced (bars: spans; time in ms)"
	p.X.Label.Text = "milliseconds since the request arrived"
	p.HideY()
	t0 := spans[0].StartTime()
	n := len(spans)
	for i, s := range spans {
		x0 := float64(s.StartTime().Sub(t0)) / 1e6
		x1 := max(float64(s.EndTime().Sub(t0))/1e6, x0+0.5)
		y := float64(n - i)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: y - 0.3}, {X: x1, Y: y - 0.3}, {X: x1, Y: y + 0.2}, {X: x0, Y: y + 0.2}})
		if err != nil {
			return err
		}
		poly.Color = palette[int(s.SpanKind())%len(palette)]
		poly.LineStyle.Color = color.Black
		p.Add(poly)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x0, Y: y + 0.3}}, Labels: []string{spanLabel(s)}})
		if err != nil {
			return err
		}
		p.Add(l)
	}
	p.Y.Min, p.Y.Max = 0, float64(n)+1
	return p.Save(28*vg.Centimeter, vg.Length(2+n)*vg.Centimeter, file)
}
