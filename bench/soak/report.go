package soak

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Report is what a server soak measured.
type Report struct {
	// Config is the configuration with its defaults filled in.
	Config Config

	// Requests sent by the load generator and the achieved offered rate
	// (requests per second over the attack).
	Requests    uint64
	OfferedRate float64
	// Responses by class of status, and every status by code.
	Admitted, RateLimited, Shed, OtherStatuses uint64
	Statuses                                   map[int]uint64
	// TransportErrors are requests without a response (connection
	// errors, client timeouts); ErrorSamples holds the first distinct ones.
	TransportErrors uint64
	ErrorSamples    []string
	// ShedRate is (429 + 503) / requests.
	ShedRate float64
	// MaxLatency is the longest any request took, whatever its outcome.
	MaxLatency time.Duration

	// AdmittedLatency is the latency of 2xx responses, overall and by the
	// phase in which they completed (before, during, after the slowdown).
	AdmittedLatency struct {
		All    Latency
		Phases [numPhases]Latency
	}
	// GoodputBefore and GoodputSlowdown are the mean 2xx responses per
	// second before the slowdown (the first second excluded) and during it.
	GoodputBefore, GoodputSlowdown float64
	// EffectiveService is the mean time the upstream held a worker for
	// the calls that succeeded, by the phase in which they ended.
	EffectiveService [numPhases]time.Duration
	// UtilizationBefore is the mean share of the upstream's worker time
	// spent on calls that succeeded, before the slowdown.
	UtilizationBefore float64
	// Recovery is the time from the end of the slowdown to the end of the
	// first second whose 2xx count is back to RecoveryShare of
	// GoodputBefore (1s resolution); negative when it never was.
	// UtilizationRecovery is the same for the useful utilization of the
	// upstream, which CPU starvation of the process does not lower (see
	// the package documentation).
	Recovery, UtilizationRecovery time.Duration

	// LimitMin and LimitMax are the extremes of the sampled limit.
	LimitMin, LimitMax int
	// Classes are the limiter's counters per class at the end.
	Classes []ClassFigures

	// Goroutines and Heap (HeapInuse after a GC) over the run.
	Goroutines, Heap Resource
	// GoroutinesBefore was counted before the server started,
	// GoroutinesAfter once everything was closed.
	GoroutinesBefore, GoroutinesAfter int
	// ServerConnsAccepted counts the connections the server accepted.
	ServerConnsAccepted int64

	// AttackEnd is when the last response arrived (from the start);
	// SettleTime how long the server then took to have nothing in flight.
	AttackEnd, SettleTime time.Duration
	// End is the state once the attack was over.
	End EndState

	PerSecond []Second
	Samples   []Sample
}

// Latency summarizes a set of latencies.
type Latency struct {
	Count          uint64
	Mean, P50, P99 time.Duration
	Max            time.Duration
}

// Resource summarizes one sampled resource (see Thresholds).
type Resource struct {
	Warmup       float64 // mean over the second half of the warm-up
	Peak         float64 // max after warm-up
	FirstQuarter float64 // mean of the first quarter of the samples after warm-up
	LastQuarter  float64 // mean of the last quarter
	Samples      int     // samples after warm-up
}

// ClassFigures are a class's limiter counters.
type ClassFigures struct {
	Name      string
	Admitted  uint64
	AfterWait uint64
	Rejected  map[string]uint64 // by shed.Reason name
	Dropped   uint64            // permits released as Dropped
	Leaked    uint64
}

// EndState is what was still in flight after the attack.
type EndState struct {
	LimiterInFlight int   // shed.Limiter.InFlight once the server settled
	Queued          int   // limiter waiters
	HandlerInFlight int   // requests inside the handler chain
	UpstreamBusy    int   // upstream workers held
	DrainInFlight   int   // shed.DrainReport.InFlight
	ServerConnsOpen int64 // server connections still open after closing
}

// Second is one second of the run: requests sent in it, responses that
// completed in it, and the resource sample taken at its end.
type Second struct {
	T                                  int
	Sent, OK, RateLimited, Shed, Other uint64
	// Utilization is the share of the upstream's worker time in this
	// second spent on calls that succeeded.
	Utilization                 float64
	Limit, InFlight, Goroutines int
	HeapInuse                   uint64
}

// Sample is one resource sample.
type Sample struct {
	T           time.Duration
	Goroutines  int
	HeapInuse   uint64
	Limit       int
	InFlight    int
	ServerConns int64
}

// CheckResult is the outcome of one check.
type CheckResult struct {
	Name   string
	OK     bool
	Detail string
}

// ErrCheck is wrapped by the error of Report.Check and ClientReport.Check.
var ErrCheck = errors.New("soak: check failed")

// Checks evaluates every check of the report.
func (r Report) Checks() []CheckResult {
	c := r.Config
	t := c.Thresholds
	var out []CheckResult
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, CheckResult{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	add("offered-rate", r.OfferedRate >= t.MinOfferedShare*float64(c.Rate),
		"achieved %.0f/s, configured %d/s (need >= %.0f%%)", r.OfferedRate, c.Rate, 100*t.MinOfferedShare)
	add("statuses", r.OtherStatuses == 0 && r.TransportErrors == 0,
		"statuses %s, %d without response %v (only 2xx, 429, 503 allowed)", formatStatuses(r.Statuses), r.TransportErrors, r.ErrorSamples)
	add("shed-rate", r.ShedRate >= t.MinShedRate,
		"%.1f%% shed (429 %d, 503 %d of %d; need >= %.0f%% at %.1fx overload)", 100*r.ShedRate, r.RateLimited, r.Shed, r.Requests, 100*t.MinShedRate, c.Overload)
	capRPS := c.capacityRPS()
	add("goodput", r.UtilizationBefore >= t.MinGoodput,
		"upstream busy with calls that succeeded %.0f%% of its time before the slowdown (need >= %.0f%%); 2xx %.0f/s, nominal capacity %.0f/s",
		100*r.UtilizationBefore, 100*t.MinGoodput, r.GoodputBefore, capRPS)
	healthy := max(c.ServiceTime, r.EffectiveService[phaseBefore])
	slow := max(time.Duration(float64(c.ServiceTime)*c.SlowdownFactor), r.EffectiveService[phaseSlow])
	pb, ps := r.AdmittedLatency.Phases[phaseBefore], r.AdmittedLatency.Phases[phaseSlow]
	add("admitted-p99", pb.Count > 0 && ps.Count > 0 &&
		pb.P99 <= time.Duration(t.P99Factor*float64(healthy)) && ps.P99 <= time.Duration(t.SlowP99Factor*float64(slow)),
		"p99 before the slowdown %v (need <= %gx %v), during it %v (need <= %gx %v)",
		round(pb.P99), t.P99Factor, round(healthy), round(ps.P99), t.SlowP99Factor, round(slow))
	add("answered-in-time", r.MaxLatency <= c.RequestTimeout+time.Second,
		"slowest response %v, request deadline %v", round(r.MaxLatency), c.RequestTimeout)
	recovered := func(d time.Duration) bool { return d >= 0 && d <= t.MaxRecovery }
	add("recovery", recovered(r.Recovery) || recovered(r.UtilizationRecovery),
		"2xx/s back to >= %.0f%% of %.0f in %s, useful upstream utilization back to >= %.0f%% of %.0f%% in %s (need either <= %v)",
		100*t.RecoveryShare, r.GoodputBefore, recoveryString(r.Recovery),
		100*t.RecoveryShare, 100*r.UtilizationBefore, recoveryString(r.UtilizationRecovery), t.MaxRecovery)
	g, h := r.Goroutines, r.Heap
	gs, hs := float64(t.GoroutineSlack), float64(t.HeapSlack)
	add("goroutines-bounded", g.Samples >= 4 && g.Peak <= t.PeakFactor*g.Warmup+gs && g.LastQuarter <= t.TrendFactor*g.FirstQuarter+gs,
		"warm-up %.0f, peak %.0f (<= %.0f), first quarter %.0f, last quarter %.0f (<= %.0f)",
		g.Warmup, g.Peak, t.PeakFactor*g.Warmup+gs, g.FirstQuarter, g.LastQuarter, t.TrendFactor*g.FirstQuarter+gs)
	add("heap-bounded", h.Samples >= 4 && h.Peak <= t.PeakFactor*h.Warmup+hs && h.LastQuarter <= t.TrendFactor*h.FirstQuarter+hs,
		"warm-up %s, peak %s (<= %s), first quarter %s, last quarter %s (<= %s)",
		mib(h.Warmup), mib(h.Peak), mib(t.PeakFactor*h.Warmup+hs), mib(h.FirstQuarter), mib(h.LastQuarter), mib(t.TrendFactor*h.FirstQuarter+hs))
	e := r.End
	add("in-flight-zero", e.LimiterInFlight == 0 && e.Queued == 0 && e.HandlerInFlight == 0 && e.UpstreamBusy == 0 && e.DrainInFlight == 0,
		"limiter %d, queued %d, handlers %d, upstream workers %d, drain report %d (after %v)",
		e.LimiterInFlight, e.Queued, e.HandlerInFlight, e.UpstreamBusy, e.DrainInFlight, round(r.SettleTime))
	var leaked uint64
	for _, cl := range r.Classes {
		leaked += cl.Leaked
	}
	add("no-leaks-at-end", e.ServerConnsOpen == 0 && r.GoroutinesAfter <= r.GoroutinesBefore+t.LeftoverGoroutines && leaked == 0,
		"server connections open %d, goroutines %d before, %d after (tolerance %d), leaked permits %d",
		e.ServerConnsOpen, r.GoroutinesBefore, r.GoroutinesAfter, t.LeftoverGoroutines, leaked)
	return out
}

// Check returns nil when every check passes, else an error (wrapping
// ErrCheck) that lists every failed check.
func (r Report) Check() error { return checkError(r.Checks()) }

// StarvedFactor is how much longer than configured the upstream's
// effective healthy service time may be before Report.Starved says the
// process was starved of CPU.
const StarvedFactor = 1.25

// Starved reports whether the machine starved the process of CPU before
// the slowdown: the upstream's timers fired so late that its effective
// service time exceeded the configured one by StarvedFactor. Latency and
// the achieved offered rate then measure the machine as much as the
// service; the package's short test enforces the timing checks
// (offered-rate, admitted-p99) only when the run was not starved.
func (r Report) Starved() bool {
	return float64(r.EffectiveService[phaseBefore]) > StarvedFactor*float64(r.Config.ServiceTime)
}

// TimingChecks names the checks that CPU starvation can fail on its own.
var TimingChecks = []string{"offered-rate", "admitted-p99"}

func checkError(cs []CheckResult) error {
	var failed []string
	for _, c := range cs {
		if !c.OK {
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrCheck, strings.Join(failed, "; "))
}

// WriteTo writes the report: the figures, the per-second table and the
// checks.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "server soak: %v at %d req/s offered (%.1fx the upstream's %.0f req/s: %d workers x %v); service time x%g from %v to %v\n",
		c.Duration, c.Rate, c.Overload, c.capacityRPS(), c.Capacity, c.ServiceTime, c.SlowdownFactor, c.SlowdownStart, c.SlowdownEnd)
	limit := "adaptive (limits.Gradient)"
	if c.StaticLimit > 0 {
		limit = fmt.Sprintf("static %d", c.StaticLimit)
	}
	fmt.Fprintf(&b, "  limit %s, request deadline %v, %d load generator workers\n", limit, c.RequestTimeout, c.Workers)
	fmt.Fprintf(&b, "  requests %d, achieved offered rate %.0f/s; 2xx %d, 429 %d, 503 %d, other %d, no response %d; shed rate %.1f%%\n",
		r.Requests, r.OfferedRate, r.Admitted, r.RateLimited, r.Shed, r.OtherStatuses, r.TransportErrors, 100*r.ShedRate)
	fmt.Fprintf(&b, "  2xx/s before the slowdown %.0f, during %.0f; recovery %s (useful upstream utilization %.0f%% before, recovery %s); limit range [%d, %d]\n",
		r.GoodputBefore, r.GoodputSlowdown, recoveryString(r.Recovery), 100*r.UtilizationBefore, recoveryString(r.UtilizationRecovery), r.LimitMin, r.LimitMax)
	fmt.Fprintf(&b, "  admitted latency p50/p99/max: all %v/%v/%v", round(r.AdmittedLatency.All.P50), round(r.AdmittedLatency.All.P99), round(r.AdmittedLatency.All.Max))
	for p, l := range r.AdmittedLatency.Phases {
		fmt.Fprintf(&b, "; %s %v/%v/%v (n=%d)", phaseNames[p], round(l.P50), round(l.P99), round(l.Max), l.Count)
	}
	fmt.Fprintf(&b, "\n  slowest response %v; effective upstream service time before/slowdown/after %v/%v/%v\n", round(r.MaxLatency),
		round(r.EffectiveService[phaseBefore]), round(r.EffectiveService[phaseSlow]), round(r.EffectiveService[phaseAfter]))
	for _, cl := range r.Classes {
		fmt.Fprintf(&b, "  class %-11s admitted %d (after a wait %d), dropped %d, rejected", cl.Name, cl.Admitted, cl.AfterWait, cl.Dropped)
		for _, k := range sortedKeys(cl.Rejected) {
			fmt.Fprintf(&b, " %s=%d", k, cl.Rejected[k])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  goroutines: before %d, warm-up %.0f, peak %.0f, quarters %.0f -> %.0f, after close %d\n",
		r.GoroutinesBefore, r.Goroutines.Warmup, r.Goroutines.Peak, r.Goroutines.FirstQuarter, r.Goroutines.LastQuarter, r.GoroutinesAfter)
	fmt.Fprintf(&b, "  heap in use: warm-up %s, peak %s, quarters %s -> %s\n",
		mib(r.Heap.Warmup), mib(r.Heap.Peak), mib(r.Heap.FirstQuarter), mib(r.Heap.LastQuarter))
	fmt.Fprintf(&b, "  server connections accepted %d\n", r.ServerConnsAccepted)
	b.WriteString("  per second (sent by send time; responses by completion time; sample at the end of the second):\n")
	b.WriteString("     t   sent   2xx   429   503 other util% limit inflight goroutines heapMiB\n")
	for _, s := range r.PerSecond {
		fmt.Fprintf(&b, "  %4d %6d %5d %5d %5d %5d %5.0f %5d %8d %10d %7.1f\n",
			s.T, s.Sent, s.OK, s.RateLimited, s.Shed, s.Other, 100*s.Utilization, s.Limit, s.InFlight, s.Goroutines, float64(s.HeapInuse)/(1<<20))
	}
	writeChecks(&b, r.Checks())
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func writeChecks(b *strings.Builder, cs []CheckResult) {
	b.WriteString("  checks:\n")
	for _, c := range cs {
		mark := "PASS"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(b, "    %s %-20s %s\n", mark, c.Name, c.Detail)
	}
}

func formatStatuses(m map[int]uint64) string {
	var parts []string
	for code := 100; code < 600; code++ {
		if n := m[code]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s: %d", code, http.StatusText(code), n))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func recoveryString(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return "<= " + d.String()
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func mib(v float64) string { return fmt.Sprintf("%.1fMiB", v/(1<<20)) }
