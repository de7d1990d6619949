package chart

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/shedkit/shedkit/sim"
)

// Size of a figure.
const (
	Width  = 10 * vg.Inch
	Height = 12 * vg.Inch
)

// palette is colour-blind friendly (Okabe-Ito), in policy order.
var palette = []color.Color{
	color.RGBA{0, 0, 0, 255},
	color.RGBA{230, 159, 0, 255},
	color.RGBA{86, 180, 233, 255},
	color.RGBA{0, 158, 115, 255},
	color.RGBA{213, 94, 0, 255},
	color.RGBA{0, 114, 178, 255},
	color.RGBA{204, 121, 167, 255},
	color.RGBA{240, 228, 66, 255},
}

// panel describes one of the stacked plots.
type panel struct {
	title string
	log   bool
	value func(r *sim.Row) float64
}

var panels = []panel{
	{"limit (sum over replicas)", false, func(r *sim.Row) float64 { return r.Limit }},
	{"in flight (mean, all replicas)", true, func(r *sim.Row) float64 { return r.InFlight }},
	{"admitted p99 latency (s)", true, func(r *sim.Row) float64 { return r.AdmittedP99 }},
	{"goodput (requests/s), dashed: ideal", false, nil},
}

// ErrNoResults is returned when there is nothing to draw.
var ErrNoResults = errors.New("chart: no results")

// figure builds the stacked plots of one scenario.
func figure(results []*sim.Result) ([]*plot.Plot, error) {
	if len(results) == 0 {
		return nil, ErrNoResults
	}
	sc := results[0].Scenario
	var plots []*plot.Plot
	for k, pn := range panels {
		p := newPanel(sc, k, pn)
		if err := addLines(p, pn, sc, results); err != nil {
			return nil, err
		}
		if !pn.log && p.Y.Max > p.Y.Min {
			p.Y.Max += 0.05 * (p.Y.Max - p.Y.Min) // headroom above the highest line
		}
		plots = append(plots, p)
	}
	// The legend goes on the in-flight panel: the limit panel lacks the
	// policies without a limit.
	leg := plots[1]
	leg.Legend.Top = true
	leg.Legend.Left = true
	leg.Legend.XOffs = vg.Points(8)
	leg.Legend.TextStyle.Font.Size = vg.Points(9)
	for i, r := range results {
		leg.Legend.Add(r.Policy, legendThumb{palette[i%len(palette)]})
	}
	return plots, nil
}

// newPanel sets up the axes of panel k. The panels stack and share the
// time axis: the first is headed by the scenario's name, the last
// labels the axis, and each shades the trigger.
func newPanel(sc *sim.Scenario, k int, pn panel) *plot.Plot {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	if k == 0 {
		p.Title.Text = sc.Name + ": " + pn.title
	}
	if k == len(panels)-1 {
		p.X.Label.Text = "time (s)"
	}
	if pn.log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.X.Min, p.X.Max = 0, sc.Duration.Seconds()
	p.X.Tick.Marker = timeTicks{}
	p.Add(plotter.NewGrid())
	if t := sc.Trigger; t != nil {
		// Shade the trigger.
		lo, hi := t.At.Seconds(), t.End().Seconds()
		band := &shade{x0: lo, x1: hi}
		p.Add(band)
	}
	return p
}

// addLines draws a line per policy on p, in the policy's colour. On the
// goodput panel it also draws the ideal goodput, dashed, once: it is the
// scenario's, whatever the policy.
func addLines(p *plot.Plot, pn panel, sc *sim.Scenario, results []*sim.Result) error {
	iv := sc.Interval.Seconds()
	for i, r := range results {
		pts, ideal := panelPoints(r, pn, iv)
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("chart: %s/%s: %w", sc.Name, r.Policy, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.2)
		p.Add(l)
		if i == 0 && pn.value == nil && len(ideal) > 0 {
			il, err := plotter.NewLine(ideal)
			if err == nil {
				il.Color = color.Gray{Y: 120}
				il.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				il.Width = vg.Points(1)
				p.Add(il)
			}
		}
	}
	return nil
}

// panelPoints returns r's points on panel pn, at the middle of each
// interval, and on the goodput panel the ideal goodput. It leaves out the
// values a line cannot draw (NaN, infinities, and on a log scale zeros),
// so that a gap shows where there is nothing to plot.
func panelPoints(r *sim.Result, pn panel, iv float64) (pts, ideal plotter.XYs) {
	for j := range r.Series {
		row := &r.Series[j]
		x := row.Time - iv/2
		var y float64
		if pn.value == nil {
			y = float64(row.Goodput) / iv
			ideal = append(ideal, plotter.XY{X: x, Y: row.Ideal / iv})
		} else {
			y = pn.value(row)
		}
		if math.IsNaN(y) || math.IsInf(y, 0) || (pn.log && y <= 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: x, Y: y})
	}
	return pts, ideal
}

// render draws the plots on c.
func render(plots []*plot.Plot, c draw.Canvas) {
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(10)}
	canvases := plot.Align(rows, tiles, c)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
}

// WriteSVG draws the results of one scenario (one per policy) as SVG.
func WriteSVG(w io.Writer, results []*sim.Result) error {
	plots, err := figure(results)
	if err != nil {
		return err
	}
	c := vgsvg.New(Width, Height)
	render(plots, draw.New(c))
	_, err = c.WriteTo(w)
	return err
}

// WritePNG draws the results of one scenario as PNG at 96 dots per inch.
func WritePNG(w io.Writer, results []*sim.Result) error {
	plots, err := figure(results)
	if err != nil {
		return err
	}
	c := vgimg.NewWith(vgimg.UseWH(Width, Height), vgimg.UseDPI(96))
	render(plots, draw.New(c))
	_, err = vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// timeTicks marks about ten round instants over the time axis.
type timeTicks struct{}

func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if span/s <= 12 {
			break
		}
	}
	var ticks []plot.Tick
	for x := math.Ceil(lo/step) * step; x <= hi+1e-9; x += step {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
	}
	return ticks
}

// shade fills the trigger window in light grey.
type shade struct{ x0, x1 float64 }

func (s *shade) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := trX(s.x0), trX(s.x1)
	var path vg.Path
	path.Move(vg.Point{X: x0, Y: c.Min.Y})
	path.Line(vg.Point{X: x1, Y: c.Min.Y})
	path.Line(vg.Point{X: x1, Y: c.Max.Y})
	path.Line(vg.Point{X: x0, Y: c.Max.Y})
	path.Close()
	c.SetColor(color.Gray{Y: 235})
	c.Fill(path)
}

// legendThumb draws a short line in a policy's colour.
type legendThumb struct{ c color.Color }

func (t legendThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(draw.LineStyle{Color: t.c, Width: vg.Points(2)}, c.Min.X, y, c.Max.X, y)
}
