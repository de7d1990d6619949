package chart

import (
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/shedkit/shedkit/sim"
)

// familyFigure draws, per policy, the share of a family's instances
// (y) in which the judged goodput against the reference is at most x:
// the further right and the steeper, the better; a line that starts far
// left has instances where the policy does harm.
func familyFigure(res *sim.FamilyResult) (*plot.Plot, error) {
	if len(res.Instances) == 0 {
		return nil, ErrNoResults
	}
	p := plot.New()
	p.Title.Text = "family " + res.Family + ": goodput against the reference, distribution over instances"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "goodput / reference"
	p.Y.Label.Text = "share of instances at or below"
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	for k, spec := range res.Policies {
		var xs []float64
		for _, v := range res.Relative(k) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				xs = append(xs, min(v, 2))
			}
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, 0, 2*len(xs))
		for i, x := range xs {
			pts = append(pts, plotter.XY{X: x, Y: float64(i) / float64(len(xs))}, plotter.XY{X: x, Y: float64(i+1) / float64(len(xs))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = palette[k%len(palette)]
		l.Width = vg.Points(1.4)
		p.Add(l)
		p.Legend.Add(spec, legendThumb{l.Color})
	}
	return p, nil
}

// WriteFamilySVG draws a family run's distributions as SVG.
func WriteFamilySVG(w io.Writer, res *sim.FamilyResult) error {
	p, err := familyFigure(res)
	if err != nil {
		return err
	}
	c := vgsvg.New(Width, Width*0.6)
	p.Draw(draw.New(c))
	_, err = c.WriteTo(w)
	return err
}

// WriteFamilyPNG draws a family run's distributions as PNG at 96 dots
// per inch.
func WriteFamilyPNG(w io.Writer, res *sim.FamilyResult) error {
	p, err := familyFigure(res)
	if err != nil {
		return err
	}
	c := vgimg.NewWith(vgimg.UseWH(Width, Width*0.6), vgimg.UseDPI(96))
	p.Draw(draw.New(c))
	_, err = vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}
