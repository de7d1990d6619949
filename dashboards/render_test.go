//go:build dashboards && linux

package dashboards

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// renderPanels draws what every panel showed during the check into
// out/dashboards/panels.png, laid out as the dashboard's rows: a picture
// of the dashboard without Grafana. The grey dashed lines mark the
// slowdown, the red one the start of the outage.
func renderPanels(t *testing.T, root string, results []panelResult, tl timeline, end time.Time) {
	var rows [][]*plot.Plot
	byPanel := map[string]*plot.Plot{}
	colors := map[string]int{}
	lastRow := ""
	for _, r := range results {
		p, ok := byPanel[r.panel]
		if !ok {
			p = newPanelPlot(r.panel, tl)
			byPanel[r.panel] = p
			if len(rows) == 0 || r.row != lastRow {
				rows = append(rows, nil)
				lastRow = r.row
			}
			rows[len(rows)-1] = append(rows[len(rows)-1], p)
		}
		for _, s := range r.series {
			lines := seriesLines(s, tl.start, palette[colors[r.panel]%len(palette)])
			for _, l := range lines {
				p.Add(l)
			}
			if len(lines) > 0 {
				p.Legend.Add(legendText(r.legend, s), lines[0])
				colors[r.panel]++
			}
		}
	}
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	for i := range rows {
		for _, p := range rows[i] {
			// The same time axis for every panel, as in Grafana, and y
			// from 0 (or below), as the dashboard's min says.
			p.X.Min, p.X.Max = 0, end.Sub(tl.start).Seconds()
			p.Y.Min = math.Min(0, p.Y.Min)
			if math.IsInf(p.Y.Max, -1) {
				p.Y.Max = 1 // no data
			}
		}
		for len(rows[i]) < cols {
			rows[i] = append(rows[i], nil) // a short row leaves its last tiles empty
		}
	}
	const tileW, tileH = 6 * vg.Inch, 3.6 * vg.Inch
	img := vgimg.New(vg.Length(cols)*tileW, vg.Length(len(rows))*tileH)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Millimeter, PadY: vg.Millimeter,
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j, p := range rows[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	dir := filepath.Join(root, "out", "dashboards")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Error(err)
		return
	}
	path := filepath.Join(dir, "panels.png")
	f, err := os.Create(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		t.Error(err)
		return
	}
	fmt.Printf("panels drawn in %s\n", path)
}

func newPanelPlot(title string, tl timeline) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds into the run"
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	p.Add(plotter.NewGrid())
	for _, m := range []struct {
		at time.Time
		c  color.Color
	}{{tl.slowStart, color.Gray{Y: 150}}, {tl.outageStart, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}}, {tl.slowEnd, color.Gray{Y: 150}}} {
		p.Add(&vrule{x: m.at.Sub(tl.start).Seconds(), c: m.c})
	}
	return p
}

// vrule is a vertical dashed line across the whole plot at x.
type vrule struct {
	x float64
	c color.Color
}

func (v *vrule) Plot(c draw.Canvas, p *plot.Plot) {
	x := p.X.Norm(v.x)*float64(c.Max.X-c.Min.X) + float64(c.Min.X)
	c.StrokeLine2(draw.LineStyle{Color: v.c, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}},
		vg.Length(x), c.Min.Y, vg.Length(x), c.Max.Y)
}

// DataRange keeps the rule inside the x range and leaves y to the data
// (plot.Add takes minima and maxima: infinities do not count).
func (v *vrule) DataRange() (xmin, xmax, ymin, ymax float64) {
	return v.x, v.x, math.Inf(1), math.Inf(-1)
}

// seriesLines turns a series into lines over seconds since start, broken
// where samples are missing (histogram_quantile gives NaN for a window
// without observations, and a series can be absent for a while), so that
// a gap does not show as a slope.
func seriesLines(s series, start time.Time, c color.Color) []*plotter.Line {
	ts, vs := s.points()
	var lines []*plotter.Line
	var seg plotter.XYs
	flush := func() {
		if len(seg) > 0 {
			if l, err := plotter.NewLine(seg); err == nil {
				l.Color = c
				l.Width = vg.Points(1.2)
				lines = append(lines, l)
			}
		}
		seg = nil
	}
	for i := range ts {
		if math.IsNaN(vs[i]) || math.IsInf(vs[i], 0) || (i > 0 && ts[i].Sub(ts[i-1]) > stepSecs*time.Second*3/2) {
			flush()
		}
		if !math.IsNaN(vs[i]) && !math.IsInf(vs[i], 0) {
			seg = append(seg, plotter.XY{X: ts[i].Sub(start).Seconds(), Y: vs[i]})
		}
	}
	flush()
	return lines
}

// legendText fills a Grafana legend format with a series' labels.
func legendText(format string, s series) string {
	return legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return s.Metric[strings.Trim(m, "{} ")]
	})
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 255},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 255},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 255},
}
