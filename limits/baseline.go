package limits

import "math"

// baseline tracks the typical latency of windows without congestion and
// how much it varies from window to window, in log space: an exponential
// average of log latency and of its squared deviation. In log space a
// latency twice the baseline is as far as one half of it, and the average
// is the geometric mean of the windows' statistics, which a few very slow
// windows do not drag up the way they drag an arithmetic mean. Until span
// windows are in, it is their plain mean, so that the first window does
// not set it for long.
type baseline struct {
	mean float64 // average log latency (ns); valid when n > 0
	v    float64 // average squared deviation from mean
	n    int     // windows averaged, up to span
	span int
}

func (b *baseline) learned() bool { return b.n > 0 }

// value returns the baseline latency in ns.
func (b *baseline) value() float64 { return math.Exp(b.mean) }

// spread returns the standard deviation of log latency between windows.
func (b *baseline) spread() float64 { return math.Sqrt(b.v) }

// add averages the log latency x into the baseline.
func (b *baseline) add(x float64) {
	if b.n == 0 {
		b.mean, b.v, b.n = x, 0, 1
		return
	}
	b.n = min(b.n+1, b.span)
	a := 2 / float64(b.span+1)
	if b.n < b.span {
		a = 1 / float64(b.n)
	}
	d := x - b.mean
	b.mean += a * d
	b.v = (1 - a) * (b.v + a*d*d)
}

// follow moves the baseline part of the way to x, keeping its spread: a
// window clearly below the baseline is news (the dependency got faster)
// that the average would take a span to believe.
func (b *baseline) follow(x, share float64) { b.mean += share * (x - b.mean) }

// reset takes x as the new baseline, with the spread learned so far: the
// dependency's latency changed, its noise need not have.
func (b *baseline) reset(x float64) {
	b.mean = x
	b.n = max(b.n, 1)
}

// dropBackground tracks the share of work that is dropped when nothing is
// congested: the deadlines a dependency's slowest requests miss whatever
// the limit, or its usual errors. Windows are weighted by their work, so
// a window of five samples counts for little.
type dropBackground struct {
	drops, total float64 // exponential averages of a window's drops and work
	span         int
}

// rate returns the background drop share.
func (d *dropBackground) rate() float64 {
	if d.total <= 0 {
		return 0
	}
	return d.drops / d.total
}

// add averages a window of k drops in n units of work.
func (d *dropBackground) add(k, n int) {
	if n == 0 {
		return
	}
	a := 2 / float64(d.span+1)
	d.drops += a * (float64(k) - d.drops)
	d.total += a * (float64(n) - d.total)
}

// reset takes k drops in n as the new background.
func (d *dropBackground) reset(k, n int) {
	if n > 0 {
		d.drops, d.total = float64(k), float64(n)
	}
}

// excess reports whether k drops in n units of work are clearly more than
// the background explains (see clearlyAbove).
func (d *dropBackground) excess(k, n int, z, tolerance float64) bool {
	return clearlyAbove(k, n, d.rate(), z, tolerance)
}

// clearlyAbove reports whether k drops in n units of work are clearly more
// than a drop share p explains: more than z binomial standard deviations
// for n above it, plus one drop, and above tolerance. The
// window-to-window spread of the share is no measure of chance here: on
// small services it is mostly the queue the limit admits, which the drops
// must show.
func clearlyAbove(k, n int, p, z, tolerance float64) bool {
	if k == 0 || n == 0 {
		return false
	}
	share := float64(k) / float64(n)
	if share <= tolerance {
		return false
	}
	return share > p+z*math.Sqrt(p*(1-p)/float64(n))+1/float64(n)
}
