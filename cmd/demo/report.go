package main

import (
	"fmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// runResult is everything one run (one mode) produced.
type runResult struct {
	mode    string
	sched   schedule
	secs    []second
	logical int64 // logical requests the clients started
	attempt int64 // attempts that reached the upstream
	// answered and late count the gateway's answers, and those it
	// finished after its client had given up; busy is the upstream's work,
	// abandoned the part of it done for callers that had gone.
	answered, late  int64
	busy, abandoned time.Duration
	// trace is one sampled logical request of the run, its spans sorted
	// by start (spanKeeper.pick), for the report's picture.
	trace []sdktrace.ReadOnlySpan
}

// summary condenses a run into the figures of the side-by-side table.
type summary struct {
	goodput, goodputSlow  [numClasses]float64 // good / offered
	p99Healthy, p99Slow   [numClasses]time.Duration
	shed                  [numClasses]int
	amplification         float64 // upstream attempts / logical requests
	amplificationSlow     float64
	recovery              time.Duration // -1: not recovered before the end
	healthyRate, slowRate float64       // good responses per second
	late                  int64         // answers after the client gave up
	lateShare             float64       // of the gateway's answers
	abandoned             time.Duration // upstream work for callers that had gone
	abandonedShare        float64       // of the upstream's work
}

func (r *runResult) summarize() summary {
	var s summary
	slowFrom := int(r.sched.SlowStart / time.Second)
	slowTo := int((r.sched.SlowStart + r.sched.SlowFor) / time.Second)
	n := len(r.secs)
	all := sum(r.secs, 0, n)
	slow := sum(r.secs, slowFrom, slowTo)
	// Skip the first second: the limit and the clients warm up.
	healthy := sum(r.secs, 1, slowFrom)
	for c := 0; c < numClasses; c++ {
		s.goodput[c] = ratio(all.good[c], all.offered[c])
		s.goodputSlow[c] = ratio(slow.good[c], slow.offered[c])
		s.p99Healthy[c] = quantile(healthy.lat[c], 0.99)
		s.p99Slow[c] = quantile(slow.lat[c], 0.99)
		s.shed[c] = all.shed[c]
	}
	s.amplification = ratio(int(r.attempt), int(r.logical))
	s.late, s.lateShare = r.late, ratio(int(r.late), int(r.answered))
	s.abandoned = r.abandoned
	if r.busy > 0 {
		s.abandonedShare = float64(r.abandoned) / float64(r.busy)
	}
	s.amplificationSlow = ratio(slow.attempts, slow.offered[0]+slow.offered[1])
	s.healthyRate = float64(healthy.good[0]+healthy.good[1]) / float64(max(slowFrom-1, 1))
	s.slowRate = float64(slow.good[0]+slow.good[1]) / float64(max(slowTo-slowFrom, 1))
	// Recovery: the first second after the slowdown from which good
	// throughput stays at >= 90% of the healthy rate for 3 seconds.
	s.recovery = -1
	for i := slowTo; i+3 <= n-1; i++ {
		ok := true
		for j := i; j < i+3; j++ {
			if float64(r.secs[j].good[0]+r.secs[j].good[1]) < 0.9*s.healthyRate {
				ok = false
			}
		}
		if ok {
			s.recovery = time.Duration(i-slowTo) * time.Second
			break
		}
	}
	return s
}

func sum(secs []second, from, to int) totals {
	var t totals
	for i := max(from, 0); i < min(to, len(secs)); i++ {
		s := &secs[i]
		for c := 0; c < numClasses; c++ {
			t.offered[c] += s.offered[c]
			t.ok[c] += s.ok[c]
			t.good[c] += s.good[c]
			t.shed[c] += s.shed[c]
			t.failed[c] += s.failed[c]
			t.lat[c] = append(t.lat[c], s.lat[c]...)
		}
		t.attempts += s.attempts
	}
	return t
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func ms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func recoveryString(d time.Duration) string {
	if d < 0 {
		return "not within the run"
	}
	return d.String()
}

// table renders the side-by-side summary of the runs.
func table(runs []*runResult) string {
	var b strings.Builder
	sums := make([]summary, len(runs))
	fmt.Fprintf(&b, "| %-44s |", "")
	for i, r := range runs {
		sums[i] = r.summarize()
		fmt.Fprintf(&b, " %-20s |", r.mode)
	}
	b.WriteString("\n|" + strings.Repeat("-", 46) + "|")
	for range runs {
		b.WriteString(strings.Repeat("-", 22) + "|")
	}
	b.WriteString("\n")
	row := func(name string, f func(s summary) string) {
		fmt.Fprintf(&b, "| %-44s |", name)
		for _, s := range sums {
			fmt.Fprintf(&b, " %-20s |", f(s))
		}
		b.WriteString("\n")
	}
	row("interactive goodput (whole run)", func(s summary) string { return pct(s.goodput[interactive]) })
	row("interactive goodput (during the slowdown)", func(s summary) string { return pct(s.goodputSlow[interactive]) })
	row("batch goodput (whole run)", func(s summary) string { return pct(s.goodput[batch]) })
	row("batch goodput (during the slowdown)", func(s summary) string { return pct(s.goodputSlow[batch]) })
	row("good responses/s healthy -> slow", func(s summary) string { return fmt.Sprintf("%.0f -> %.0f", s.healthyRate, s.slowRate) })
	row("interactive p99 healthy / slow", func(s summary) string {
		return ms(s.p99Healthy[interactive]) + " / " + ms(s.p99Slow[interactive])
	})
	row("shed (429/503) interactive / batch", func(s summary) string {
		return fmt.Sprintf("%d / %d", s.shed[interactive], s.shed[batch])
	})
	row("upstream attempts per logical request", func(s summary) string {
		return fmt.Sprintf("%.2f (slow: %.2f)", s.amplification, s.amplificationSlow)
	})
	row("recovery to 90% of healthy after slowdown", func(s summary) string { return recoveryString(s.recovery) })
	row("answers after the client gave up", func(s summary) string {
		return fmt.Sprintf("%d (%s of answers)", s.late, pct(s.lateShare))
	})
	row("upstream time spent on abandoned work", func(s summary) string {
		return fmt.Sprintf("%.1f s (%s)", s.abandoned.Seconds(), pct(s.abandonedShare))
	})
	return b.String()
}

// reportCharts are the report's per-second charts: for each, the series
// every run contributes.
var reportCharts = []struct {
	file, title, ylabel string
	series              func(r *runResult, s *second) []float64
	names               []string
}{
	{"goodput.png", "Good responses per second (2xx within the deadline)", "responses/s",
		func(_ *runResult, s *second) []float64 {
			return []float64{float64(s.good[interactive]), float64(s.good[batch])}
		},
		[]string{"interactive", "batch"}},
	{"latency.png", "Interactive p99 latency of 2xx responses", "seconds",
		func(_ *runResult, s *second) []float64 { return []float64{s.p99(interactive).Seconds()} },
		[]string{"p99"}},
	{"inflight.png", "Gateway: concurrency limit and work in flight", "requests",
		func(_ *runResult, s *second) []float64 { return []float64{float64(s.limit), float64(s.inflight)} },
		[]string{"limit", "in flight"}},
	{"amplification.png", "Upstream attempts per logical request", "attempts / request",
		func(_ *runResult, s *second) []float64 {
			return []float64{ratio(s.attempts, s.offered[interactive]+s.offered[batch])}
		},
		[]string{"amplification"}},
}

// writeReport writes report.md and the charts under dir.
func writeReport(dir string, runs []*runResult, cfg string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# shedkit demo report\n\n")
	md.WriteString("The same load and the same upstream slowdown, once without protection and once with shedkit.\n\n")
	md.WriteString("```\n" + cfg + "\n```\n\n")
	md.WriteString(table(runs) + "\n")
	for _, c := range reportCharts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "seconds into the run"
		p.Y.Label.Text = c.ylabel
		p.Legend.Top = true
		i := 0
		ymax := 0.0
		for _, r := range runs {
			for k, name := range c.names {
				pts := make(plotter.XYs, 0, len(r.secs))
				for t := range r.secs[:len(r.secs)-1] {
					v := c.series(r, &r.secs[t])[k]
					if r.mode == "unprotected" && c.file == "inflight.png" && k == 0 {
						continue // no limit without shedkit
					}
					pts = append(pts, plotter.XY{X: float64(t), Y: v})
					ymax = max(ymax, v)
				}
				if len(pts) == 0 {
					continue
				}
				l, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				l.Color = palette[i%len(palette)]
				l.Width = vg.Points(1.5)
				if r.mode == "unprotected" {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l)
				p.Legend.Add(r.mode+" "+name, l)
				i++
			}
		}
		// Mark the slowdown.
		for _, x := range []time.Duration{runs[0].sched.SlowStart, runs[0].sched.SlowStart + runs[0].sched.SlowFor} {
			v, err := plotter.NewLine(plotter.XYs{{X: x.Seconds(), Y: 0}, {X: x.Seconds(), Y: ymax}})
			if err != nil {
				return err
			}
			v.Color = color.Gray{Y: 160}
			v.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(v)
		}
		p.Add(plotter.NewGrid())
		p.Legend.Padding = vg.Points(2)
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, c.file)); err != nil {
			return err
		}
		fmt.Fprintf(&md, "## %s\n\n![%s](%s)\n\n", c.title, c.title, c.file)
	}
	md.WriteString("The dashed grey lines mark the start and end of the upstream slowdown.\n")
	if err := writeTrace(dir, runs, &md); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644)
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 255},
}

// writeTrace adds to the report the picture of one logical request of the
// last run that kept one: its gateway span with shedkit's decision, the
// queue wait, the retrying client's logical span and its attempts, and the
// upstream's spans, as a tracing backend would show them.
func writeTrace(dir string, runs []*runResult, md *strings.Builder) error {
	for i := len(runs) - 1; i >= 0; i-- {
		spans := runs[i].trace
		if len(spans) == 0 {
			continue
		}
		if err := drawTrace(filepath.Join(dir, "trace.png"), spans); err != nil {
			return err
		}
		fmt.Fprintf(md, "\n## One request, traced (%s run)\n\n", runs[i].mode)
		md.WriteString("The most retried of the sampled logical requests, as its spans tell it (start, duration, span):\n\n")
		md.WriteString("```\n" + traceText(spans) + "```\n\n![one request's trace](trace.png)\n")
		return nil
	}
	return nil
}
