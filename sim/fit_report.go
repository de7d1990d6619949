package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode"
)

// WriteFitReport prints what a fit inferred and how sure it is. The
// report repeats what the recording says (class names, key hashings), so
// control characters other than line breaks and tabs print as '?': a
// crafted recording cannot send escape sequences to a terminal.
func WriteFitReport(w io.Writer, fit *Fit) {
	w = controlFree{w}
	fmt.Fprintf(w, "recording: %v from %s, %d intervals of %v, %d records (sampled 1 in up to %d, %d lost)\n",
		fit.Span, fit.Start.Format(time.RFC3339), fit.Intervals, fit.Scenario.Interval, fit.Records, fit.SampleEvery, fit.Lost)
	fmt.Fprintln(w, "arrivals (exact counts; the schedule is each class's spans of constant rate):")
	for _, c := range fit.Classes {
		refused := ""
		if c.Refused >= 0.5 {
			refused = fmt.Sprintf(" (and %.0f refused on sight, 413)", c.Refused)
		}
		fmt.Fprintf(w, "  %-14s %s/s on average, %.0f requests, %.0f shed%s; %d span(s):\n", c.Name, rate(c.MeanRate), c.Arrivals, c.Shed, refused, len(c.Segments))
		for _, s := range c.Segments {
			se := "n/a"
			if s.Count > 0 {
				se = fmt.Sprintf("%.1f%%", 100/math.Sqrt(s.Count))
			}
			fmt.Fprintf(w, "      %8v to %-8v %s/s (standard error %s)\n", s.At, s.At+s.For, rate(s.Rate), se)
		}
	}
	st := fit.ServiceTime
	fmt.Fprintf(w, "service time: %s, fit %s (KS distance %.3f; %s), from %d latencies in %d unsaturated intervals of %d (mean latency within 10%% of the baseline %v); median %v, mean %v, p99 %v\n",
		distString(st.Dist, true), st.Quality(), st.KS, candidates(st), st.N, fit.Unsaturated, fit.Intervals, fit.Baseline.Round(time.Microsecond),
		fitDur(st.Median), fitDur(st.Mean), fitDur(st.P99))
	writeCapacity(w, fit)
	writeRateLimits(w, fit)
	writeKeys(w, fit)
	writeNotRecorded(w, fit)
	fmt.Fprintln(w, "costs:")
	for _, c := range fit.Classes {
		cost, actual := "1 (none recorded)", "the estimate"
		if c.Cost.N > 0 {
			cost = fmt.Sprintf("%s, fit %s (KS %.3f, %d samples)", distString(c.Cost.Dist, false), c.Cost.Quality(), c.Cost.KS, c.Cost.N)
		}
		if !c.Actual.Dist.IsZero() {
			actual = distString(c.Actual.Dist, false) + " x the estimate"
		}
		fmt.Fprintf(w, "  %-14s estimate %s; actual %s\n", c.Name, cost, actual)
	}
	for _, n := range fit.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func writeCapacity(w io.Writer, fit *Fit) {
	c := fit.Capacity
	if !c.Observed {
		fmt.Fprintf(w, "capacity: at least %.0f servers (not observed: traffic never saturated)\n", c.Servers)
		return
	}
	fmt.Fprintf(w, "capacity: %.1f servers, confidence %s: Little's law, %s/s completed x %v mean service time, median over %d saturated intervals (mean latency >= 1.5x the baseline), spread %.1f%%; %.0f in flight there on average\n",
		c.Servers, c.Confidence, rate(c.Throughput), c.MeanService.Round(time.Microsecond), c.Intervals, 100*c.Spread, c.InFlight)
}

// writeRateLimits prints the classes' rate limits, when a class shows a
// 429.
func writeRateLimits(w io.Writer, fit *Fit) {
	seen := false
	for _, c := range fit.Classes {
		seen = seen || c.RateLimit.Records > 0
	}
	if !seen {
		return
	}
	fmt.Fprintln(w, "rate limits (429 before admission; a bucket per replica, from the rate of the requests that passed where 429s occurred):")
	for _, c := range fit.Classes {
		r := c.RateLimit
		switch {
		case r.Records == 0:
			fmt.Fprintf(w, "  %-14s none (no 429 recorded)\n", c.Name)
		case r.Limit == nil:
			fmt.Fprintf(w, "  %-14s none inferred: %s\n", c.Name, r.omitted(0))
		default:
			burst := fmt.Sprintf("burst %d (measured: the most that passed beyond the rate in the %v before a 429, over %d such span(s))",
				r.Limit.Burst, burstSpan*time.Duration(burstBin), r.Onsets)
			if !r.BurstObserved {
				burst = fmt.Sprintf("burst %d (not observed: the default, a tenth of a second of the rate; see the note)", r.Limit.Burst)
			}
			fmt.Fprintf(w, "  %-14s %s/s, confidence %s: %.0f requests rate limited (%d records) in %d intervals, spread %.1f%%; %s\n",
				c.Name, rate(r.Limit.RPS), r.Confidence, r.RateLimited, r.Records, r.Intervals, 100*r.Spread, burst)
		}
	}
}

func candidates(f DistFit) string {
	var parts []string
	for _, c := range f.Candidates {
		parts = append(parts, fmt.Sprintf("%s %.3f", c.Dist.Kind, c.KS))
	}
	return strings.Join(parts, ", ")
}

func fitDur(ns float64) time.Duration {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func rate(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.3g", r)
}

// distString describes d in the words of the scenario format.
func distString(d Dist, isTime bool) string {
	v := func(f float64) string {
		if isTime {
			return fitDur(f).String()
		}
		return formatNum(f)
	}
	switch d.Kind {
	case Constant:
		return "constant " + v(d.Value)
	case Exponential:
		return "exponential mean " + v(d.Mean)
	case LogNormal:
		return fmt.Sprintf("lognormal median %s sigma %.3f", v(d.Median), d.Sigma)
	case Uniform:
		return fmt.Sprintf("uniform %s to %s", v(d.Min), v(d.Max))
	}
	return d.Kind.String()
}

// writeKeys prints the classes' tenants, inferred from the records' keys.
func writeKeys(w io.Writer, fit *Fit) {
	keyed := false
	for _, c := range fit.Classes {
		keyed = keyed || c.Keys.Keys != nil
	}
	if !keyed {
		fmt.Fprintln(w, "keys: no tenant keys recorded (the scenario has one key per class)")
		return
	}
	fmt.Fprintln(w, "keys (tenants, from the hashes of the rate-limit keys on the records of arrivals; the count seen is a lower bound, tenants the recorder never kept are missing):")
	fmt.Fprintf(w, "  taken from     %s\n", describeKeySource(fit.KeySource))
	for _, c := range fit.Classes {
		k := c.Keys
		left := ""
		if k.Excluded > 0 {
			left = fmt.Sprintf("; %d more left out, hashed otherwise: see the notes", k.Excluded)
		}
		if k.Keys == nil {
			fmt.Fprintf(w, "  %-14s none recorded%s\n", c.Name, left)
			continue
		}
		trunc := ""
		if k.Truncated {
			trunc = fmt.Sprintf(" (more than %d: only the first were kept)", MaxKeys)
		}
		fmt.Fprintf(w, "  %-14s %d seen%s (Chao1 estimate of all: %.0f), zipf %.2f (standard error %.2g; maximum likelihood on %d keyed requests%s)\n",
			c.Name, k.Seen, trunc, k.Estimate, k.Keys.Zipf, k.ZipfSE, k.Requests, left)
	}
	if fit.SampleEvery > 1 {
		fmt.Fprintln(w, "  sampling keeps every 2^k-th request whatever its key: the shares are unbiased, but a rare tenant is likelier unseen")
	}
}

// controlFree writes to w with control characters other than '\n' and
// '\t', and the Unicode line and paragraph separators, as '?'. Each
// fmt.Fprint call is one Write, so no character is split across two.
type controlFree struct{ w io.Writer }

func (c controlFree) Write(p []byte) (int, error) {
	clean := strings.Map(func(r rune) rune {
		if (unicode.IsControl(r) && r != '\n' && r != '\t') || r == '\u2028' || r == '\u2029' {
			return '?'
		}
		return r
	}, string(p))
	if _, err := io.WriteString(c.w, clean); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeNotRecorded says which of the scenario's settings a recording
// cannot show, so that a fitted scenario without them is not read as
// "none was there". The cap on each tenant's requests in flight shows
// when shedredis.ConcurrencyMiddleware records its 429s
// (MiddlewareConfig.Recorder, see fit_keyconc.go); what it says is then
// per class, in the notes. The calls to the shared store show when
// shedredis records them (Config.Recorder, see fit_store.go).
func writeNotRecorded(w io.Writer, fit *Fit) {
	capped := false
	for _, c := range fit.Classes {
		if c.KeyConcurrency.Records > 0 {
			capped = true
			fmt.Fprintf(w, "key concurrency: class %s: %.0f requests refused at a tenant's cap (429), %d tenants; %s\n", c.Name, c.KeyConcurrency.Refused,
				c.KeyConcurrency.Keys, keyCapString(&c.KeyConcurrency))
		}
	}
	if !capped {
		fmt.Fprintln(w, "key concurrency: not observed: no 429 of shedredis.ConcurrencyMiddleware is in the recording (it records them with MiddlewareConfig.Recorder; without it, it refuses a tenant at its cap before the recorded middleware sees the request); the scenario sets no key_concurrency (set it by hand to your Concurrency's limit, or let shedsim tune try caps)")
	}
	fmt.Fprintln(w, storeString(&fit.Store))
}

// keyCapString says what the fit made of a class's refusals at a
// tenant's cap.
func keyCapString(k *KeyConcurrencyFit) string {
	if k.Limit == nil {
		return "cap not inferred (see the notes)"
	}
	return fmt.Sprintf("cap inferred: key_concurrency {limit: %d}", k.Limit.Limit)
}
