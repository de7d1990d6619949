package retrybudget

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Budget defaults, those of Finagle's RetryBudget.
const (
	DefaultBudgetTTL           = 10 * time.Second
	DefaultMinRetriesPerSecond = 10
	DefaultRetryRatio          = 0.2
	DefaultBudgetBuckets       = 10
)

// BudgetConfig configures a [Budget]. Zero fields mean the defaults.
type BudgetConfig struct {
	// Name identifies the budget in metrics (attribute
	// shedkit.retry.budget). Keep it low-cardinality, and give each
	// budget of a process its own: two budgets of one name on one meter
	// report their balances as one series, which shows either. Default
	// "default".
	Name string
	// TTL is how long a deposit or a withdrawal counts. Default 10s.
	TTL time.Duration
	// RetryRatio is the share of requests that may be retried: within
	// any span of TTL-TTL/Buckets, retries <= RetryRatio x requests + the
	// floor (see the package documentation). Default 0.2.
	// A negative value means 0: only the floor allows retries.
	RetryRatio float64
	// MinRetriesPerSecond is the floor that lets a quiet client retry:
	// MinRetriesPerSecond x TTL retries per TTL on top of the ratio.
	// Default 10. A negative value means no floor.
	MinRetriesPerSecond float64
	// Buckets is the number of time buckets of the sliding window; an
	// event stops counting between TTL-TTL/Buckets and TTL after it
	// happened. Default 10; at most 1000, and TTL/Buckets >= 1ms.
	Buckets int
}

// Budget bounds retries to a share of requests over a sliding window,
// plus a floor per second. Every logical request deposits; every retry
// withdraws, and is allowed only while the balance covers it.
//
// One Budget is meant to be shared by every caller of a process (see
// [Default]) or of a destination (see [BudgetMap]), and to live as long
// as they do. All methods are safe for concurrent use, take no lock and
// do not allocate.
//
// The zero value is a budget with the defaults, named "default", as
// NewBudget(BudgetConfig{}) returns: a Budget declared or allocated
// without NewBudget works (it takes its state on first use, once, even
// when first used concurrently). A Budget must not be copied.
type Budget struct {
	name    string // "" in a zero Budget: Name says "default"
	core    atomic.Pointer[budgetCore]
	denials atomic.Uint64

	gauges sync.Map // metric.Meter -> struct{}: one balance gauge per meter
}

// budgetCore is what a budget decides with. It is set once: by NewBudget,
// or on the first use of a zero Budget.
type budgetCore struct {
	ratio   float64
	reserve float64 // floor x TTL, in retries
	w       *window
}

// state returns the budget's core, giving a zero Budget the defaults.
func (b *Budget) state() *budgetCore {
	if c := b.core.Load(); c != nil {
		return c
	}
	return b.initDefault()
}

// initDefault sets the default core of a zero Budget. Of concurrent first
// uses, one compare-and-swap wins and the others use its core, so that no
// event counts into a window that is then dropped.
func (b *Budget) initDefault() *budgetCore {
	c := &budgetCore{
		ratio:   DefaultRetryRatio,
		reserve: DefaultMinRetriesPerSecond * DefaultBudgetTTL.Seconds(),
		w:       newWindow(DefaultBudgetTTL, DefaultBudgetBuckets),
	}
	if b.core.CompareAndSwap(nil, c) {
		return c
	}
	return b.core.Load()
}

// NewBudget returns a budget configured by cfg, or an error naming the
// first invalid field.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("%w: BudgetConfig.TTL must not be negative, got %v", ErrInvalidConfig, cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultBudgetTTL
	}
	if math.IsNaN(cfg.RetryRatio) || math.IsInf(cfg.RetryRatio, 0) || cfg.RetryRatio > 1000 {
		return nil, fmt.Errorf("%w: BudgetConfig.RetryRatio must be finite and at most 1000, got %v", ErrInvalidConfig, cfg.RetryRatio)
	}
	switch {
	case cfg.RetryRatio == 0:
		cfg.RetryRatio = DefaultRetryRatio
	case cfg.RetryRatio < 0:
		cfg.RetryRatio = 0
	}
	if math.IsNaN(cfg.MinRetriesPerSecond) || math.IsInf(cfg.MinRetriesPerSecond, 0) || cfg.MinRetriesPerSecond > 1e6 {
		return nil, fmt.Errorf("%w: BudgetConfig.MinRetriesPerSecond must be finite and at most 1e6, got %v", ErrInvalidConfig, cfg.MinRetriesPerSecond)
	}
	switch {
	case cfg.MinRetriesPerSecond == 0:
		cfg.MinRetriesPerSecond = DefaultMinRetriesPerSecond
	case cfg.MinRetriesPerSecond < 0:
		cfg.MinRetriesPerSecond = 0
	}
	if cfg.Buckets < 0 || cfg.Buckets > 1000 {
		return nil, fmt.Errorf("%w: BudgetConfig.Buckets must be in [0, 1000], got %d", ErrInvalidConfig, cfg.Buckets)
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBudgetBuckets
	}
	if cfg.TTL/time.Duration(cfg.Buckets) < time.Millisecond {
		return nil, fmt.Errorf("%w: BudgetConfig.TTL/Buckets must be at least 1ms, got %v/%d", ErrInvalidConfig, cfg.TTL, cfg.Buckets)
	}
	b := &Budget{name: cfg.Name}
	b.core.Store(&budgetCore{
		ratio:   cfg.RetryRatio,
		reserve: cfg.MinRetriesPerSecond * cfg.TTL.Seconds(),
		w:       newWindow(cfg.TTL, cfg.Buckets),
	})
	return b, nil
}

var defaultBudget, _ = NewBudget(BudgetConfig{})

// Default returns the process-wide budget with the default settings,
// used by every [Transport] whose config names no budget. Sharing it is
// what bounds amplification across all the clients of a process.
func Default() *Budget { return defaultBudget }

// Name returns the budget's name.
func (b *Budget) Name() string {
	if b.name == "" {
		return "default"
	}
	return b.name
}

// DepositAt records one logical request at now.
func (b *Budget) DepositAt(now time.Time) { b.state().w.addA(now) }

// TryWithdrawAt asks for one retry at now. It returns true and records the
// withdrawal when the balance covers it, false (and counts a denial)
// otherwise.
//
// Callers that share a time bucket cannot overshoot the balance together;
// callers whose clocks straddle a bucket boundary may overshoot it by one
// retry each.
func (b *Budget) TryWithdrawAt(now time.Time) bool {
	if c := b.state(); c.w.tryAddB(now, c.ratio, c.reserve) {
		return true
	}
	b.denials.Add(1)
	return false
}

// Deposit is DepositAt(time.Now()).
func (b *Budget) Deposit() { b.DepositAt(time.Now()) }

// TryWithdraw is TryWithdrawAt(time.Now()).
func (b *Budget) TryWithdraw() bool { return b.TryWithdrawAt(time.Now()) }

// BudgetSnapshot is the state of a [Budget] at one instant.
type BudgetSnapshot struct {
	// Balance is the number of retries allowed now: floor(RetryRatio x
	// Deposits + floor x TTL) - Withdrawals. It can be negative for a
	// while when deposits expire before the withdrawals they paid for.
	Balance int64
	// Deposits and Withdrawals are the counts in the current window.
	Deposits, Withdrawals uint64
	// Denials counts the retries refused since the budget was created.
	Denials uint64
}

// SnapshotAt returns the budget's state at now.
func (b *Budget) SnapshotAt(now time.Time) BudgetSnapshot {
	c := b.state()
	d, w := c.w.sums(now)
	allowance := math.Floor(float64(d)*c.ratio + c.reserve + 1e-9)
	return BudgetSnapshot{
		Balance:     int64(allowance) - int64(w),
		Deposits:    d,
		Withdrawals: w,
		Denials:     b.denials.Load(),
	}
}

// Snapshot is SnapshotAt(time.Now()).
func (b *Budget) Snapshot() BudgetSnapshot { return b.SnapshotAt(time.Now()) }

// idleAt reports whether the budget holds no event in its window, which
// makes it equivalent to a fresh one.
func (b *Budget) idleAt(now time.Time) bool { return b.state().w.idle(now) }

// observeBalance registers, once per meter, the observable gauge
// shedkit.retry.budget.balance for this budget. The meter keeps a
// reference to the budget, which is fine for the long-lived budgets this
// package is designed around.
func (b *Budget) observeBalance(m metric.Meter) error {
	if t := reflect.TypeOf(m); t == nil || t.Comparable() {
		if _, loaded := b.gauges.LoadOrStore(m, struct{}{}); loaded {
			return nil
		}
	}
	g, err := m.Int64ObservableGauge("shedkit.retry.budget.balance",
		metric.WithDescription("Retries the budget would allow now."),
		metric.WithUnit("{retry}"))
	if err != nil {
		return err
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrBudget.String(b.Name())))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, b.Snapshot().Balance, opt)
		return nil
	}, g)
	return err
}
