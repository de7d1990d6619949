package main

import (
	"encoding/csv"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeCalibrationCSV writes one row per second: offered and good
// responses per class and the limit, measured and predicted.
func writeCalibrationCSV(path string, measured, predicted []second) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"second"}
	for _, src := range []string{"measured", "predicted"} {
		for _, c := range classNames {
			head = append(head, src+"_offered_"+c, src+"_good_"+c)
		}
		head = append(head, src+"_limit")
	}
	_ = w.Write(head)
	n := max(len(measured), len(predicted))
	for i := range n {
		row := []string{strconv.Itoa(i)}
		for _, secs := range [][]second{measured, predicted} {
			var s second
			if i < len(secs) {
				s = secs[i]
			}
			for c := range numClasses {
				row = append(row, strconv.Itoa(s.offered[c]), strconv.Itoa(s.good[c]))
			}
			row = append(row, strconv.Itoa(s.limit))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// calibrationChart draws good responses per second per class and the
// limit, measured (solid) and predicted (dashed), in one chart.
func calibrationChart(path string, s schedule, measured, predicted []second) error {
	p := plot.New()
	p.Title.Text = "Measured (solid) and predicted (dashed): good responses per second, and the limit"
	p.X.Label.Text = "seconds into the run"
	p.Legend.Top = true
	series := []struct {
		name string
		v    func(*second) float64
	}{
		{"good interactive/s", func(s *second) float64 { return float64(s.good[interactive]) }},
		{"good batch/s", func(s *second) float64 { return float64(s.good[batch]) }},
		{"limit", func(s *second) float64 { return float64(s.limit) }},
	}
	ymax := 0.0
	// The demo's last second holds only the stragglers: leave it out.
	n := min(len(measured), len(predicted))
	measured, predicted = measured[:n], predicted[:n]
	for k, sr := range series {
		for j, secs := range [][]second{measured, predicted} {
			pts := make(plotter.XYs, 0, len(secs))
			for i := range secs {
				v := sr.v(&secs[i])
				pts = append(pts, plotter.XY{X: float64(i), Y: v})
				ymax = max(ymax, v)
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = palette[k%len(palette)]
			l.Width = vg.Points(1.5)
			name := "measured " + sr.name
			if j == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				name = "predicted " + sr.name
			}
			p.Add(l)
			p.Legend.Add(name, l)
		}
	}
	for _, x := range []float64{s.SlowStart.Seconds(), (s.SlowStart + s.SlowFor).Seconds()} {
		v, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}})
		if err != nil {
			return err
		}
		v.Color = color.Gray{Y: 160}
		v.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(v)
	}
	p.Add(plotter.NewGrid())
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
