package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// The kinds of incident of the incident family, with their weights.
var incidentKinds = []struct {
	name   string
	weight int
	draw   func(d *draft, r *rand.Rand) (time.Duration, bool)
}{
	{"slowdown", 4, (*draft).slowdown},
	{"ramp", 2, (*draft).ramp},
	{"capacity-loss", 3, (*draft).capacityLoss},
	{"errors", 2, (*draft).errorBurst},
	{"spike", 3, (*draft).spike},
	{"retry-storm", 2, (*draft).retryStorm},
	{"oscillation", 2, (*draft).oscillation},
	{"closed-loop", 2, (*draft).closedLoop},
	{"batch-flood", 2, (*draft).batchFlood},
}

// drawIncident draws one incident starting at d.at and returns its span.
func (d *draft) drawIncident(r *rand.Rand) (time.Duration, bool) {
	total := 0
	for _, k := range incidentKinds {
		total += k.weight
	}
	n := r.IntN(total)
	for _, k := range incidentKinds {
		if n -= k.weight; n < 0 {
			span, ok := k.draw(d, r)
			if ok {
				d.sc.Trigger = &Span{At: d.at, For: span}
				d.t.Kind = k.name
			}
			return span, ok
		}
	}
	return 0, false
}

func seconds(r *rand.Rand, lo, hi float64) time.Duration {
	return time.Duration(math.Round(uniform(r, lo, hi))) * time.Second
}

func (d *draft) event(ev UpstreamEvent) {
	if ev.Slowdown == 0 {
		ev.Slowdown = 1
	}
	if ev.Capacity == 0 {
		ev.Capacity = 1
	}
	d.sc.Upstream.Events = append(d.sc.Upstream.Events, ev)
}

// slowdown: every job started during it is 1.5 to 50 times slower.
func (d *draft) slowdown(r *rand.Rand) (time.Duration, bool) {
	f, span := logUniform(r, 1.5, 50), seconds(r, 10, 120)
	d.event(UpstreamEvent{At: d.at, For: span, Slowdown: f})
	d.t.Incident = fmt.Sprintf("slowdown x%.1f for %v", f, span)
	return span, true
}

// ramp: the dependency slows down gradually to 2-20x, stays there, and
// recovers as gradually.
func (d *draft) ramp(r *rand.Rand) (time.Duration, bool) {
	const steps = 10
	f, up, hold := logUniform(r, 2, 20), seconds(r, 10, 60), seconds(r, 0, 60)
	step := up / steps
	at := d.at
	for k := 1; k <= steps; k++ {
		d.event(UpstreamEvent{At: at, For: step, Slowdown: math.Pow(f, float64(k)/steps)})
		at += step
	}
	if hold > 0 {
		d.event(UpstreamEvent{At: at, For: hold, Slowdown: f})
		at += hold
	}
	for k := steps - 1; k >= 1; k-- {
		d.event(UpstreamEvent{At: at, For: step, Slowdown: math.Pow(f, float64(k)/steps)})
		at += step
	}
	d.t.Incident = fmt.Sprintf("ramp to x%.1f over %v, held %v", f, up, hold)
	return at - d.at, true
}

// capacityLoss: the upstream keeps 5-70% of its servers.
func (d *draft) capacityLoss(r *rand.Rand) (time.Duration, bool) {
	if d.capacity < 5 {
		return 0, false // a server or two cannot lose a share of themselves
	}
	keep, span := logUniform(r, 0.05, 0.7), seconds(r, 10, 120)
	d.event(UpstreamEvent{At: d.at, For: span, Capacity: keep})
	d.t.Incident = fmt.Sprintf("capacity loss to %.0f%% for %v", 100*keep, span)
	return span, true
}

// errorBurst: 10-100% of the jobs fail (after their service time).
func (d *draft) errorBurst(r *rand.Rand) (time.Duration, bool) {
	p, span := uniform(r, 0.1, 1), seconds(r, 5, 60)
	d.event(UpstreamEvent{At: d.at, For: span, Errors: p})
	d.t.Incident = fmt.Sprintf("errors %.0f%% for %v", 100*p, span)
	return span, true
}

// spike: traffic multiplies to 1.2-6 times the capacity.
func (d *draft) spike(r *rand.Rand) (time.Duration, bool) {
	f, span := logUniform(r, 1.2, 6)/d.t.Load, seconds(r, 10, 60)
	for i := range d.sc.Classes {
		d.sc.Classes[i].Schedule = []RateChange{{At: d.at, Factor: f, For: span}}
	}
	d.t.Incident = fmt.Sprintf("spike x%.1f (%.1fx capacity) for %v", f, f*d.t.Load, span)
	return span, true
}

// retryStorm: clients retry timed-out attempts (and a gateway may retry
// too) with no budget; a short slowdown makes attempts time out.
func (d *draft) retryStorm(r *rand.Rand) (time.Duration, bool) {
	d.t.Load = uniform(r, 0.3, 0.6)
	attempts := 3 + r.IntN(2)
	// Each attempt may take 2-5 times the mean: the slowdown must push
	// latency past it.
	ax := uniform(r, 2, 5) * d.mean
	d.t.Deadline = max(d.t.Deadline, float64(attempts)*ax)
	for i := range d.sc.Classes {
		d.sc.Classes[i].Retry = Retry{MaxAttempts: attempts}
		d.attemptX[i] = ax
	}
	if r.IntN(2) == 0 {
		d.sc.Gateway = &Gateway{Retry: Retry{MaxAttempts: 2}}
	}
	f, span := uniform(r, 3, 10), seconds(r, 5, 30)
	d.event(UpstreamEvent{At: d.at, For: span, Slowdown: f})
	d.t.Incident = fmt.Sprintf("retry storm: %d attempts, slowdown x%.1f for %v", attempts, f, span)
	return span, true
}

// oscillation: traffic alternates between its base and 1.1-2.5 times the
// capacity, with a period of 4-30 s.
func (d *draft) oscillation(r *rand.Rand) (time.Duration, bool) {
	d.t.Load = uniform(r, 0.3, 0.8)
	f := uniform(r, 1.1, 2.5) / d.t.Load
	period := seconds(r, 4, 30)
	n := int(math.Max(2, math.Round(uniform(r, 30, 120)/period.Seconds())))
	for i := range d.sc.Classes {
		var s []RateChange
		for k := range n {
			s = append(s, RateChange{At: d.at + time.Duration(k)*period, Factor: f, For: period / 2})
		}
		d.sc.Classes[i].Schedule = s
	}
	d.t.Incident = fmt.Sprintf("oscillation x%.1f every %v, %d times", f, period, n)
	return time.Duration(n) * period, true
}

// closedLoop: users who think between requests, through a slowdown.
func (d *draft) closedLoop(r *rand.Rand) (time.Duration, bool) {
	for i := range d.sc.Classes {
		d.thinkX[i] = logUniform(r, 1, 50) * d.mean
		d.sc.Classes[i].Retry = Retry{}
	}
	f, span := logUniform(r, 2, 20), seconds(r, 20, 120)
	d.event(UpstreamEvent{At: d.at, For: span, Slowdown: f})
	d.t.Incident = fmt.Sprintf("closed-loop users, slowdown x%.1f for %v", f, span)
	return span, true
}

// batchFlood: batch traffic floods the service to 1.5-4 times its
// capacity; interactive traffic has a protected share.
func (d *draft) batchFlood(r *rand.Rand) (time.Duration, bool) {
	li, lb := uniform(r, 0.2, 0.6), uniform(r, 0.1, 0.3)
	d.t.Load = li + lb
	d.sc.Classes = []Class{
		{Name: "interactive", Protected: uniform(r, 0.5, 0.9)},
		{Name: "batch"},
	}
	d.loads = []float64{li / d.t.Load, lb / d.t.Load}
	d.attemptX, d.thinkX = make([]float64, 2), make([]float64, 2)
	f := (uniform(r, 1.5, 4) - li) / lb
	span := seconds(r, 20, 90)
	d.sc.Classes[1].Schedule = []RateChange{{At: d.at, Factor: f, For: span}}
	d.t.Incident = fmt.Sprintf("batch flood x%.1f for %v", f, span)
	return span, true
}
