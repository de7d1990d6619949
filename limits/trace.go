package limits

import "time"

// WindowTrace is one closed window as an adaptive limit read it: the
// window's summary, the signals it read against what it had learned
// before the window, and what it decided. GradientConfig.Trace and
// AIMDConfig.Trace receive one per window, so that a user can tell which
// rule moved the limit, and why, window by window.
type WindowTrace struct {
	// Window is the closed window's summary.
	Window WindowSummary
	// Limit is the limit the window ran under and Next the limit it
	// left, both before rounding down; Reason names the rule that
	// decided.
	Limit, Next float64
	Reason      Reason
	// Baseline is the latency the window was compared with (zero until
	// one is learned, or when the limit watches no latency) and
	// Background the share of work it expected to be dropped.
	Baseline   time.Duration
	Background float64
	// Ratio is the window's latency over the baseline (1 without one)
	// and Threshold the ratio above which that latency is congestion:
	// the tolerance, or the window's own noise when larger.
	Ratio, Threshold float64
	// Binding: the work in flight reached the limit; Used: it reached
	// MinUtilization of it; Steady: it changed by less than a quarter
	// since the window before.
	Binding, Used, Steady bool
	// LatencyCongested, DropsCongested and CeilingCongested say which
	// signals counted as congestion.
	LatencyCongested, DropsCongested, CeilingCongested bool
	// CrowdCongested: the drops counted as congestion only because the
	// work admitted with the limit nearly full failed far more often
	// than the rest (WindowSummary.Crowded); DropsCongested is set too.
	CrowdCongested bool
}

// trace returns the trace of window w, read as s by d before the window
// taught it anything, at limit lim, decided for reason r; the caller sets
// Next once the limit is applied.
func (d *detector) trace(w *WindowSummary, s *signals, lim float64, r Reason) WindowTrace {
	t := WindowTrace{
		Window: *w, Limit: lim, Reason: r,
		Background: d.bg.rate(), Ratio: s.ratio, Threshold: s.thresh,
		Binding: s.binding, Used: s.used, Steady: s.steady,
		LatencyCongested: s.latCong, DropsCongested: s.dropCong, CeilingCongested: s.ceilCong,
		CrowdCongested: s.crowdCong,
	}
	if d.latency && d.base.learned() {
		t.Baseline = time.Duration(d.base.value())
	}
	return t
}
