package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// admission is the protected gateway's admission control: the settings
// shedsim tune searches (the limit algorithm and the parameters it sweeps,
// each class's protected share and queue, the retry budget). It is one
// value so that the gateway, the calibration's scenario and the tuned
// re-run are built from the same source and cannot drift apart.
type admission struct {
	algo string // "gradient" or "aimd"
	// tolerance and backoff are the limit's parameters that the tuner
	// sweeps; 0 keeps the algorithm's default.
	tolerance, backoff float64
	classes            [numClasses]classAdmission
	// budgetRatio and budgetFloor are the retry budget's RetryRatio and
	// MinRetriesPerSecond.
	budgetRatio, budgetFloor float64
}

// classAdmission is one class's setting in the limiter.
type classAdmission struct {
	protected float64
	queue     int
	wait      time.Duration
}

// The hand-picked configuration (make demo): interactive keeps 80% of the
// limit and may wait briefly in a deep queue; batch borrows whatever
// interactive leaves idle; Finagle's retry budget.
const (
	defaultAlgo                 = "gradient"
	defaultInteractiveProtected = 0.8
	defaultInteractiveQueue     = 200
	defaultInteractiveWait      = 250 * time.Millisecond
)

// addAdmissionFlags binds a's flags, with the hand-picked defaults.
func addAdmissionFlags(fs *flag.FlagSet, a *admission) {
	fs.StringVar(&a.algo, "limit-algo", defaultAlgo, "shedkit: limit algorithm, gradient or aimd")
	fs.Float64Var(&a.tolerance, "limit-tolerance", 0, "shedkit: latency ratio to the baseline that counts as congestion (gradient Tolerance, aimd LatencyTolerance; 0: the algorithm's default)")
	fs.Float64Var(&a.backoff, "limit-backoff", 0, "shedkit: factor of the limit on congestion, in (0, 1) (0: the algorithm's default)")
	in, ba := &a.classes[interactive], &a.classes[batch]
	fs.Float64Var(&in.protected, "interactive-protected", defaultInteractiveProtected, "shedkit: share of the limit kept for interactive")
	fs.IntVar(&in.queue, "interactive-queue", defaultInteractiveQueue, "shedkit: interactive requests that may wait for admission (0: none)")
	fs.DurationVar(&in.wait, "queue-wait", defaultInteractiveWait, "shedkit: longest an interactive request waits for admission")
	fs.Float64Var(&ba.protected, "batch-protected", 0, "shedkit: share of the limit kept for batch")
	fs.IntVar(&ba.queue, "batch-queue", 0, "shedkit: batch requests that may wait for admission (0: none)")
	fs.DurationVar(&ba.wait, "batch-queue-wait", 0, "shedkit: longest a batch request waits for admission (with -batch-queue)")
	fs.Float64Var(&a.budgetRatio, "budget-ratio", retrybudget.DefaultRetryRatio, "shedkit: retry budget, share of requests that may be retried")
	fs.Float64Var(&a.budgetFloor, "budget-floor", retrybudget.DefaultMinRetriesPerSecond, "shedkit: retry budget, retries per second allowed on top of the ratio")
}

// validate rejects what the gateway would refuse later, or ignore.
func (a *admission) validate(latencyCeiling time.Duration) error {
	switch a.algo {
	case "gradient":
	case "aimd":
		if latencyCeiling > 0 {
			return fmt.Errorf("-latency-ceiling applies to -limit-algo gradient only")
		}
	default:
		return fmt.Errorf("-limit-algo must be gradient or aimd, got %q", a.algo)
	}
	if a.tolerance < 0 || a.backoff < 0 || a.backoff >= 1 {
		return fmt.Errorf("-limit-tolerance must be >= 0 and -limit-backoff in [0, 1)")
	}
	sum := 0.0
	for _, c := range a.classes {
		if c.protected < 0 || c.queue < 0 || c.wait < 0 || (c.queue > 0 && c.wait == 0) {
			return fmt.Errorf("protected shares and queues must be >= 0, and a queue needs a wait > 0")
		}
		sum += c.protected
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("the protected shares add up to %g, more than 1", sum)
	}
	if a.budgetRatio <= 0 || a.budgetFloor <= 0 {
		return fmt.Errorf("-budget-ratio and -budget-floor must be > 0")
	}
	return nil
}

// limitSource is the limit source of shedotel.RegisterLimit and shed.Config.
type limitSource interface {
	shed.LimitSource
	Decisions(f func(reason string, windows uint64))
}

// newLimit builds a's limit algorithm with the demo's initial limit and,
// for Gradient, its latency ceiling.
func (a *admission) newLimit(initial int, ceiling time.Duration) (limitSource, error) {
	if a.algo == "aimd" {
		return limits.NewAIMD(limits.AIMDConfig{InitialLimit: initial, LatencyTolerance: a.tolerance, Backoff: a.backoff})
	}
	return limits.NewGradient(limits.GradientConfig{InitialLimit: initial, LatencyCeiling: ceiling, Tolerance: a.tolerance, Backoff: a.backoff})
}

// shedClasses returns the limiter's classes, in the order of classNames.
func (a *admission) shedClasses() []shed.ClassConfig {
	out := make([]shed.ClassConfig, numClasses)
	for c, k := range a.classes {
		out[c] = shed.ClassConfig{Name: classNames[c], Protected: k.protected}
		if k.queue > 0 {
			out[c].QueueDepth, out[c].MaxWait = k.queue, k.wait
		}
	}
	return out
}

func (a *admission) newBudget() (*retrybudget.Budget, error) {
	return retrybudget.NewBudget(retrybudget.BudgetConfig{Name: "gateway-upstream", RetryRatio: a.budgetRatio, MinRetriesPerSecond: a.budgetFloor})
}

// String describes a in one line, for the summary and the report.
func (a *admission) String() string {
	s := a.algo
	if a.tolerance > 0 {
		s += fmt.Sprintf(" tolerance %g", a.tolerance)
	}
	if a.backoff > 0 {
		s += fmt.Sprintf(" backoff %g", a.backoff)
	}
	for c, k := range a.classes {
		s += fmt.Sprintf("; %s protects %g%%", classNames[c], 100*k.protected)
		if k.queue > 0 {
			s += fmt.Sprintf(", queue %d up to %v", k.queue, k.wait)
		}
	}
	return s + fmt.Sprintf("; retry budget %g%% + %g/s", 100*a.budgetRatio, a.budgetFloor)
}
