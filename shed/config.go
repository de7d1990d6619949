package shed

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of the packed in-flight state. The count and the cost of the work
// in flight share one 64-bit word so that admission is a single atomic
// compare-and-swap.
const (
	// MaxLimit is the largest concurrency limit a Limiter enforces.
	MaxLimit = 1<<countBits - 1
	// MaxTotalCost is the largest cost budget, request cost and
	// reconciled cost a Limiter takes. Without a cost budget
	// (Config.MaxCost zero) it acts as the budget. It is half of what the
	// state word's cost field holds: a Reconcile takes no lock, so it may
	// raise the in-flight cost up to MaxTotalCost between the check and
	// the add of an admission decided under the lock, and the field must
	// hold both without wrapping.
	MaxTotalCost = 1<<(costBits-1) - 1
	// MaxClasses is the largest number of priority classes.
	MaxClasses = 16
)

// Defaults applied to zero fields of Config.
const (
	// DefaultDemandHold keeps protected capacity reserved for 1 s after a
	// protected class last went short: long enough to cover the next few
	// arrivals of an interactive burst, short enough that a class that went
	// quiet stops holding capacity that batch work could use.
	DefaultDemandHold = time.Second
	// DefaultMaxSamplesPerSecond times every request up to 1,000 admissions
	// per second and every 2^k-th admission above that. Adaptive limits need tens
	// of samples per window; reading the clock costs ~100 ns.
	DefaultMaxSamplesPerSecond = 1000
	// DefaultRetryAfterMin and DefaultRetryAfterMax bound the Retry-After
	// hint of a rejection. HTTP carries whole seconds, so 1 s is the
	// smallest useful hint.
	DefaultRetryAfterMin = time.Second
	DefaultRetryAfterMax = 30 * time.Second
	// MaxRetryAfter is the largest RetryAfterMin and RetryAfterMax New
	// accepts. A hint says when a slot is likely to free; an hour is far
	// beyond anything the limiter can estimate, and it bounds the table of
	// shared rejections.
	MaxRetryAfter = time.Hour
	// MaxDeadlineMargin is the largest DeadlineMargin New accepts.
	MaxDeadlineMargin = 100
)

// Config configures a Limiter. Zero fields take the documented defaults;
// New rejects invalid values with an error that names the field.
type Config struct {
	// Limit is a static concurrency limit, used when Source is nil.
	// Exactly one of Limit and Source must be set.
	Limit int
	// Source supplies an adaptive (or otherwise changing) limit, for
	// example from package limits. It also receives latency and drop
	// samples from released permits. New asks it for its limit once and
	// refuses a source that reports less than 1 or panics: one made
	// without its constructor would otherwise hold the limiter at one
	// request in flight.
	Source LimitSource

	// MaxCost bounds the total cost of the work in flight (for example
	// LLM tokens). Zero means no cost budget: costs are only counted, up
	// to MaxTotalCost. A request whose cost exceeds MaxCost is rejected at
	// once with ReasonCostTooLarge.
	MaxCost int64

	// Classes are the priority classes, highest priority first. Requests
	// name a class by its index (Class). Empty means one class, "default".
	Classes []ClassConfig
	// Strict gives strict priority: while a higher class has unmet demand
	// (waiters, or a recent rejection), lower classes are admitted only
	// within their own protected share, so they can starve. Without
	// Strict, a higher class holds only its own protected share and
	// competes for the rest.
	Strict bool
	// DemandHold is how long a class counts as having unmet demand after
	// it was last rejected for lack of capacity. While it does, its unused
	// protected share is not lent to other classes. Default DefaultDemandHold.
	// The end of a hold is seen by the next admission, which frees the
	// share for whoever comes first; a release lends it to a waiting lower
	// class only once no request has come for a whole DemandHold. Lending
	// sooner on release would only reorder who gets a slot in the moment
	// before the next request, not use more capacity. If lower classes wait
	// too long after a burst of rejections, shorten DemandHold: it is the
	// time a protected class needs to come back before its share is lent.
	DemandHold time.Duration

	// MaxQueue bounds the total number of waiters over all classes. Zero
	// means the sum of the classes' QueueDepth.
	MaxQueue int

	// RetryAfterMin and RetryAfterMax bound the Retry-After hint carried
	// by rejections (see Rejection.RetryAfter for its rounding), and are
	// at most MaxRetryAfter. Defaults DefaultRetryAfterMin and
	// DefaultRetryAfterMax (or RetryAfterMin, if larger). ReasonDraining
	// and ReasonCostTooLarge rejections carry RetryAfterMax.
	RetryAfterMin time.Duration
	RetryAfterMax time.Duration

	// DryRun computes and reports every decision but admits everything:
	// rejections are counted and observed, then a permit is returned
	// anyway (Permit.DryRun names the reason). Use it to roll a limiter
	// out safely. Two rejections stand even so: ReasonDraining once
	// draining started (see Limiter.DrainAt), and ReasonCostTooLarge for a
	// cost above MaxCost (MaxTotalCost without a budget), which could
	// never be admitted.
	DryRun bool

	// DeadlineMargin weighs the expected service time in the deadline
	// check. A request with a Deadline is always rejected at once
	// (ReasonDeadline) when its deadline has passed or its remaining time
	// is at most its expected queue wait. With a positive margin it is
	// also rejected when that time is at most the queue wait plus
	// DeadlineMargin times the expected service time of its class: about
	// the median time the class's recent timed work held a permit (see
	// ServiceTimePerCost and ClassSnapshot.ServiceTime). With 0.5, a
	// rejected request had less than an even chance of finishing in time
	// even had it started at once, whatever the latency's shape.
	//
	// Zero, the default, leaves the service time out: under an adaptive
	// limit the check turns away work the limit would have served, and
	// the limit then sees less of the overload it must cut. Use it with a
	// static limit, or where work that ends late is worse than work not
	// done. At most MaxDeadlineMargin; negative is an error.
	DeadlineMargin float64
	// ServiceTimePerCost estimates the service time per unit of cost and
	// scales it by each request's cost, for work whose time grows with its
	// cost (LLM tokens) and whose reserved cost is close to the actual
	// one. Without it the estimate is per request, whatever its cost.
	ServiceTimePerCost bool

	// MaxSamplesPerSecond caps how many permits per second the wall-clock
	// API times (reads the clock for) to feed latency samples to Source.
	// Above the cap it times every 2^k-th admission of each class, with k
	// re-chosen every 100 ms from the measured admission rate. Drops are
	// always reported. The explicit-time API (...At methods) times every
	// permit.
	// Default DefaultMaxSamplesPerSecond; negative times every permit.
	MaxSamplesPerSecond float64

	// TenantWeight, when set, weighs the share of each tenant
	// (Request.Tenant) within its class: a contended class is shared in
	// proportion to the weights of its active tenants. It is called when
	// a tenant that has nothing in flight or queued in a class asks again,
	// never under the limiter's main lock (possibly under a lock of its
	// tenant table): it must be fast, must not block, and must not call
	// the Limiter. A result that is not a positive number counts as 1;
	// others are clamped to [1/1024, 1024]. Nil gives every tenant weight
	// 1: equal shares. It must not panic (the tenant may be client-chosen);
	// if it does, the panic propagates to the caller of TryAcquire,
	// Acquire or EnqueueAt, as a panicking Observer's does, and the request
	// decided nothing: it was neither admitted, queued nor counted, and
	// the limiter is left as it was.
	TenantWeight func(tenant string) float64

	// Observer, when set, is told about every decision. Nil costs nothing.
	Observer Observer

	// TrackLeaks follows every permit with a small heap object (about
	// three allocations and a stack capture per admission: for tests,
	// staging and debugging). A permit that becomes unreachable without
	// Release is then found by the garbage collector: its capacity is
	// reclaimed, it is counted in ClassSnapshot.Leaked, reported as an
	// EventLeaked and passed to OnLeak with the stack that acquired it.
	// Tracking also tells every copy of a Permit apart: only the first
	// release of an admission frees its capacity, and later releases or
	// reconciliations of its copies change nothing and are counted as
	// misuses (see Permit).
	TrackLeaks bool
	// OnLeak is called (from a runtime cleanup goroutine) for each leaked
	// permit found while TrackLeaks is set.
	OnLeak func(Leak)

	// Clock replaces time.Now for the wall-clock API. The explicit-time
	// API never calls it (New reads it once, for the limiter's epoch).
	// It must not panic. If it does, the panic goes on to the caller and
	// the limiter stays consistent: an admission it interrupts is undone,
	// a release it interrupts still gives the capacity back, and a
	// blocking Acquire it interrupts leaves the queue; waiters that
	// capacity could admit are then served at the next release.
	Clock func() time.Time
}

// CheckClassName returns an error when name cannot name a class: empty,
// not valid UTF-8, or holding a control or format character, or a line
// or paragraph separator (Unicode categories Cc, Cf, Zl, Zp). A class
// name ends up in logs, metric attributes, recordings and the reports
// and configurations fitted from them, where a line break, a terminal
// escape or a bidirectional override would change what they say. New
// refuses such a name in Config.Classes.
func CheckClassName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case !utf8.ValidString(name):
		return errors.New("not valid UTF-8")
	}
	for i, c := range name {
		if unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return fmt.Errorf("control or format character %U at byte %d", c, i)
		}
	}
	return nil
}

// ClassConfig configures one priority class.
type ClassConfig struct {
	// Name identifies the class in snapshots, events and errors, in
	// metric attributes and in recordings: CheckClassName must accept it.
	Name string
	// Protected is the share of the limit (and of MaxCost) reserved for
	// this class, in [0, 1]. Other classes may borrow it while the class
	// is idle; once the class has unmet demand again, borrowers are not
	// admitted into it until it is restored (running work is never
	// preempted). The shares of all classes sum to at most 1.
	Protected float64
	// QueueDepth is how many requests of this class may wait for
	// capacity. Zero means the class never waits: it is admitted or
	// rejected at once.
	QueueDepth int
	// MaxWait is the longest a request of this class waits in the queue.
	// Required when QueueDepth > 0.
	MaxWait time.Duration
	// LIFO serves the newest waiter of this class first instead of the
	// oldest. Under sustained overload it keeps the wait of the requests
	// that are served short, at the cost of fairness.
	LIFO bool
}

// ErrInvalidConfig is wrapped by every configuration error from New.
var ErrInvalidConfig = errors.New("shed: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// validate checks c and returns a copy with defaults filled in, or an
// error naming the first field found invalid.
func (c Config) validate() (Config, error) {
	if err := c.limitConfig(); err != nil {
		return c, err
	}
	if err := c.classConfig(); err != nil {
		return c, err
	}
	if err := c.retryAfterConfig(); err != nil {
		return c, err
	}
	if math.IsNaN(c.MaxSamplesPerSecond) {
		return c, configError("MaxSamplesPerSecond", "must be a number")
	}
	if c.MaxSamplesPerSecond == 0 {
		c.MaxSamplesPerSecond = DefaultMaxSamplesPerSecond
	}
	if m := c.DeadlineMargin; !(m >= 0 && m <= MaxDeadlineMargin) {
		return c, configError("DeadlineMargin", "must be in [0, %v] (0: the service time does not count), got %v", float64(MaxDeadlineMargin), m)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c, nil
}

// limitConfig checks the capacity: exactly one of Limit and Source, and a
// cost budget that fits the packed in-flight state.
func (c *Config) limitConfig() error {
	if c.Source == nil {
		if c.Limit <= 0 {
			return configError("Limit", "must be > 0 when Source is nil, got %d", c.Limit)
		}
		if c.Limit > MaxLimit {
			return configError("Limit", "must be <= %d, got %d", MaxLimit, c.Limit)
		}
	} else if c.Limit != 0 {
		return configError("Limit", "must be 0 when Source is set (the source supplies the limit)")
	} else if n, ok := firstLimit(c.Source); !ok || n < 1 && !(n == 0 && asProber(c.Source) != nil) {
		return configError("Source", "must report a limit of at least 1, or 0 for a closed Prober, got %s (a source made without its constructor, such as a zero limits.Gradient, never adapts)", limitText(n, ok))
	}
	if c.MaxCost < 0 || c.MaxCost > MaxTotalCost {
		return configError("MaxCost", "must be in [0, %d], got %d", int64(MaxTotalCost), c.MaxCost)
	}
	return nil
}

// firstLimit asks src for its limit once, as New's check of the
// LimitSource contract: a source that reports less than 1 (a zero
// limits.Gradient or AIMD reports -1), other than a Prober that is closed
// at that moment, or panics (a nil pointer in the interface) would
// hold the limiter at one request in flight, or panic on the first
// admission, without a word.
func firstLimit(src LimitSource) (n int, ok bool) {
	defer func() {
		if recover() != nil {
			n, ok = 0, false
		}
	}()
	return src.Limit(), true
}

func limitText(n int, ok bool) string {
	if !ok {
		return "a panic"
	}
	return strconv.Itoa(n)
}

// classConfig checks the classes and what governs how they share the
// limit: the queue bound, which defaults to the sum of their queues, and
// the demand hold. It copies Classes so that the caller's slice can change
// after New without reaching the limiter.
func (c *Config) classConfig() error {
	if len(c.Classes) == 0 {
		c.Classes = []ClassConfig{{Name: "default"}}
	} else {
		c.Classes = append([]ClassConfig(nil), c.Classes...)
	}
	if len(c.Classes) > MaxClasses {
		return configError("Classes", "at most %d classes, got %d", MaxClasses, len(c.Classes))
	}
	seen := make(map[string]bool, len(c.Classes))
	share := 0.0
	queue := 0
	for i, cl := range c.Classes {
		field := fmt.Sprintf("Classes[%d]", i)
		if err := CheckClassName(cl.Name); err != nil {
			return configError(field+".Name", "%.40q: %v", cl.Name, err)
		}
		if seen[cl.Name] {
			return configError(field+".Name", "duplicate class %q", cl.Name)
		}
		seen[cl.Name] = true
		if err := cl.validate(field); err != nil {
			return err
		}
		share += cl.Protected
		queue += cl.QueueDepth
	}
	if share > 1+1e-9 {
		return configError("Classes", "protected shares sum to %.3f, more than 1", share)
	}
	if c.MaxQueue < 0 {
		return configError("MaxQueue", "must be >= 0, got %d", c.MaxQueue)
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = queue
	}
	if c.DemandHold < 0 {
		return configError("DemandHold", "must be >= 0, got %v", c.DemandHold)
	}
	if c.DemandHold == 0 {
		c.DemandHold = DefaultDemandHold
	}
	return nil
}

// validate checks the share and the queue of one class, named field in
// the error: a queue needs a bound on its wait, and a wait needs a queue.
func (cl ClassConfig) validate(field string) error {
	if math.IsNaN(cl.Protected) || cl.Protected < 0 || cl.Protected > 1 {
		return configError(field+".Protected", "must be in [0, 1], got %v", cl.Protected)
	}
	if cl.QueueDepth < 0 {
		return configError(field+".QueueDepth", "must be >= 0, got %d", cl.QueueDepth)
	}
	if cl.MaxWait < 0 {
		return configError(field+".MaxWait", "must be >= 0, got %v", cl.MaxWait)
	}
	if cl.QueueDepth > 0 && cl.MaxWait == 0 {
		return configError(field+".MaxWait", "a queue needs a maximum wait (QueueDepth is %d)", cl.QueueDepth)
	}
	if cl.QueueDepth == 0 && cl.MaxWait > 0 {
		return configError(field+".QueueDepth", "must be > 0 when MaxWait is set")
	}
	return nil
}

// retryAfterConfig checks the Retry-After bounds. It fills in
// RetryAfterMin first: RetryAfterMax's default and check depend on the
// minimum in effect.
func (c *Config) retryAfterConfig() error {
	if c.RetryAfterMin < 0 || c.RetryAfterMin > MaxRetryAfter {
		return configError("RetryAfterMin", "must be in [0, %v], got %v", MaxRetryAfter, c.RetryAfterMin)
	}
	if c.RetryAfterMin == 0 {
		c.RetryAfterMin = DefaultRetryAfterMin
	}
	if c.RetryAfterMax == 0 {
		c.RetryAfterMax = max(DefaultRetryAfterMax, c.RetryAfterMin)
	}
	if c.RetryAfterMax < c.RetryAfterMin {
		return configError("RetryAfterMax", "must be >= RetryAfterMin (%v), got %v", c.RetryAfterMin, c.RetryAfterMax)
	}
	if c.RetryAfterMax > MaxRetryAfter {
		return configError("RetryAfterMax", "must be <= %v, got %v", MaxRetryAfter, c.RetryAfterMax)
	}
	return nil
}
