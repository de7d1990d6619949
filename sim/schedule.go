package sim

import (
	"fmt"
	"math"
	"time"
)

// RateChange changes a class's arrival rate at At to Factor times the
// class's base rate when Factor is set, else to Rate (requests per second,
// zero included). With Ramp the rate moves linearly to the new rate over
// Ramp; with For the new rate holds for For and the previous rate comes
// back (a spike or a dip). Changes apply in order and must not overlap.
type RateChange struct {
	At     time.Duration
	Rate   float64
	Factor float64
	Ramp   time.Duration
	For    time.Duration
}

// rateSeg is a piece of a piecewise-linear rate: rate(t) = rate0 +
// slope*(t-start) for t in [start, next start), in requests per second
// with t in seconds.
type rateSeg struct {
	start float64 // seconds
	rate0 float64
	slope float64 // per second per second
}

// rateFunc is a piecewise-linear arrival rate.
type rateFunc struct{ segs []rateSeg }

func buildRate(base float64, changes []RateChange, path string) (rateFunc, error) {
	f := rateFunc{segs: []rateSeg{{0, base, 0}}}
	add := func(s rateSeg) {
		if last := &f.segs[len(f.segs)-1]; last.start == s.start {
			*last = s
			return
		}
		f.segs = append(f.segs, s)
	}
	cur := base
	busyUntil := time.Duration(0)
	for i, ch := range changes {
		p := fmt.Sprintf("%s[%d]", path, i)
		if ch.At < busyUntil || ch.At < 0 {
			return f, &FieldError{Path: p + ".at", Msg: fmt.Sprintf("%v is before the end of the previous change (%v): changes must be in order and must not overlap", ch.At, busyUntil)}
		}
		target := ch.Rate
		if ch.Factor != 0 {
			target = base * ch.Factor
		}
		if math.IsNaN(target) || math.IsInf(target, 0) || target < 0 {
			return f, &FieldError{Path: p + ".rate", Msg: fmt.Sprintf("must be a finite rate >= 0, got %v", target)}
		}
		if ch.Ramp < 0 || ch.For < 0 {
			return f, &FieldError{Path: p, Msg: "ramp and for must be >= 0"}
		}
		if ch.Ramp > 0 && ch.For > 0 {
			return f, &FieldError{Path: p + ".for", Msg: "a change has either ramp or for, not both"}
		}
		at := ch.At.Seconds()
		switch {
		case ch.Ramp > 0:
			add(rateSeg{at, cur, (target - cur) / ch.Ramp.Seconds()})
			add(rateSeg{at + ch.Ramp.Seconds(), target, 0})
			cur = target
			busyUntil = addDur(ch.At, ch.Ramp) // saturated: no wrap to a past time
		case ch.For > 0:
			add(rateSeg{at, target, 0})
			add(rateSeg{at + ch.For.Seconds(), cur, 0})
			busyUntil = addDur(ch.At, ch.For)
		default:
			add(rateSeg{at, target, 0})
			cur = target
			busyUntil = ch.At
		}
	}
	return f, nil
}

// classRate returns the arrival rate of the open-loop class cl: its
// schedule, and during a surge of its heaviest key (Keys.Surge) key 0's
// extra traffic on top: key 0 sends a share p of the class's requests,
// so the class's rate is multiplied by 1 + (Factor-1)p.
func classRate(cl *Class) (rateFunc, error) {
	f, err := buildRate(cl.Rate, cl.Schedule, "")
	if err != nil || cl.Keys == nil || cl.Keys.Surge == nil {
		return f, err
	}
	s := cl.Keys.Surge
	return f.scaled(s.span(), 1+(s.Factor-1)*cl.Keys.hotShare()), nil
}

// at returns the rate at t seconds.
func (f *rateFunc) at(t float64) float64 {
	k := f.seg(t, 0)
	s := f.segs[k]
	return s.rate0 + s.slope*(t-s.start)
}

// max returns the highest rate of the function.
func (f *rateFunc) max() float64 {
	m := 0.0
	for i, s := range f.segs {
		m = math.Max(m, s.rate0)
		if i+1 < len(f.segs) {
			m = math.Max(m, s.rate0+s.slope*(f.segs[i+1].start-s.start))
		}
	}
	return m
}

// seg returns the index of the segment holding t, searching from hint.
func (f *rateFunc) seg(t float64, hint int) int {
	k := hint
	for k+1 < len(f.segs) && f.segs[k+1].start <= t {
		k++
	}
	return k
}

// integral returns the expected number of arrivals in [a, b] seconds.
func (f *rateFunc) integral(a, b float64) float64 {
	total := 0.0
	for k := f.seg(a, 0); a < b; k++ {
		s := f.segs[k]
		end := b
		if k+1 < len(f.segs) && f.segs[k+1].start < b {
			end = f.segs[k+1].start
		}
		r0 := s.rate0 + s.slope*(a-s.start)
		d := end - a
		total += r0*d + s.slope*d*d/2
		a = end
		if k+1 >= len(f.segs) {
			break
		}
	}
	return total
}

// arrivals generates the arrival times of a non-homogeneous Poisson
// process by inverting the integrated rate: each gap consumes one
// exponential draw, whatever the shape of the rate.
type arrivals struct {
	f    *rateFunc
	t    float64 // seconds
	hint int
}

// next returns the next arrival after the previous one given e, an
// exponential(1) draw, or +Inf when the rate stays at zero for ever.
func (a *arrivals) next(e float64) float64 {
	f := a.f
	for k := f.seg(a.t, a.hint); ; k++ {
		a.hint = k
		s := f.segs[k]
		r0 := s.rate0 + s.slope*(a.t-s.start)
		last := k+1 >= len(f.segs)
		d := math.Inf(1)
		if !last {
			d = f.segs[k+1].start - a.t
		}
		area := math.Inf(1)
		if !last {
			area = r0*d + s.slope*d*d/2
		} else if r0 <= 0 && s.slope <= 0 {
			a.t = math.Inf(1)
			return a.t
		}
		if e <= area {
			// Solve r0 x + slope x^2 / 2 = e in the stable form.
			x := 2 * e / (r0 + math.Sqrt(math.Max(r0*r0+2*s.slope*e, 0)))
			if !last && x > d {
				x = d
			}
			a.t += x
			return a.t
		}
		e -= area
		a.t = f.segs[k+1].start
	}
}
