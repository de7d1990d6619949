package sim

import (
	"bufio"
	"fmt"
	"io"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/shed"
)

// TracePolicy returns a policy that builds p's limiters and gives f every
// window of one replica's adaptive limit (see PolicyEnv.Trace): which rule
// moved the limit in each window, and on what signals. f runs on the
// run's goroutine, in virtual time.
func TracePolicy(p Policy, replica int, f func(limits.WindowTrace)) Policy {
	return tracePolicy{p: p, replica: replica, f: f}
}

type tracePolicy struct {
	p       Policy
	replica int
	f       func(limits.WindowTrace)
}

func (tp tracePolicy) Name() string { return tp.p.Name() }

func (tp tracePolicy) NewLimiter(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
	if env.Replica == tp.replica {
		env.Trace = tp.f
	}
	return tp.p.NewLimiter(env)
}

// rateObserver keeps the 429s of a recorded policy underneath.
func (tp tracePolicy) rateObserver(i int) shed.Observer {
	if ro, ok := tp.p.(rateObserving); ok {
		return ro.rateObserver(i)
	}
	return nil
}

// keysOf keeps the keys of a recorded policy underneath.
func (tp tracePolicy) keysOf(i int) *recordKeys {
	if ro, ok := tp.p.(rateObserving); ok {
		return ro.keysOf(i)
	}
	return nil
}

// TraceCSV writes window traces as CSV, one row per window, with times in
// seconds since the start of the run (Epoch).
type TraceCSV struct {
	w    *bufio.Writer
	rows int
}

// NewTraceCSV returns a TraceCSV that writes to w; call Flush after the run.
func NewTraceCSV(w io.Writer) *TraceCSV { return &TraceCSV{w: bufio.NewWriter(w)} }

const traceHeader = "end_s,limit,next,reason,samples,drops,mean_in_flight,max_in_flight,median_s,mean_s,drop_mean_s," +
	"baseline_s,background,ratio,threshold,binding,used,steady,latency_congested,drops_congested,ceiling_congested,timed_drops,fast_drops,fresh,fresh_drops,crowded,crowded_drops,crowd_congested\n"

// Write writes window t (a TracePolicy's f).
func (c *TraceCSV) Write(t limits.WindowTrace) {
	if c.rows == 0 {
		c.w.WriteString(traceHeader)
	}
	c.rows++
	w := &t.Window
	fmt.Fprintf(c.w, "%.3f,%.2f,%.2f,%s,%d,%d,%.2f,%d,%.6f,%.6f,%.6f,%.6f,%.4f,%.3f,%.3f,%t,%t,%t,%t,%t,%t,%d,%d,%d,%d,%d,%d,%t\n",
		w.End.Sub(Epoch()).Seconds(), t.Limit, t.Next, t.Reason, w.Samples, w.Drops, w.MeanInFlight, w.MaxInFlight,
		w.Median.Seconds(), w.Mean.Seconds(), w.DropMean.Seconds(), t.Baseline.Seconds(), t.Background, t.Ratio, t.Threshold,
		t.Binding, t.Used, t.Steady, t.LatencyCongested, t.DropsCongested, t.CeilingCongested, w.TimedDrops, w.FastDrops,
		w.Fresh, w.FreshDrops, w.Crowded, w.CrowdedDrops, t.CrowdCongested)
}

// Rows returns the number of windows written.
func (c *TraceCSV) Rows() int { return c.rows }

// Flush writes what is buffered and returns the first write error.
func (c *TraceCSV) Flush() error { return c.w.Flush() }
