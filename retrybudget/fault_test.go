package retrybudget_test

import (
	"sort"
	"testing"
	"time"

	"github.com/shedkit/shedkit/retrybudget"
)

// TestBudgetClockStepBack: after the wall clock steps back by more than
// the budget's TTL (an NTP correction), the budget must still bound
// retries. The window's time never goes backwards: a time before the
// latest one seen counts as that one. (Before the fix, new events were
// counted into buckets tagged with the old, later epochs, which the window
// ending at the new time ignores: 1,000 of 1,000 withdrawals succeeded.)
func TestBudgetClockStepBack(t *testing.T) {
	cfg := retrybudget.BudgetConfig{TTL: 10 * time.Second, RetryRatio: 0.1, MinRetriesPerSecond: 1}
	b, err := retrybudget.NewBudget(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bc := newBoundChecker(t, cfg)
	// Ten seconds of traffic fill every bucket of the ring.
	now := fuzzT0
	for i := range 100 {
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		b.DepositAt(at)
		bc.deposit(at)
	}
	// The clock steps back by 20 s. The window still ends at the latest
	// time seen (t0+9.9s) and holds the 100 deposits: 0.1 x 100 plus the
	// floor of 1/s x 10 s allow exactly 20 retries, however many ask.
	back := now.Add(-20 * time.Second)
	allowed := 0
	for range 1000 {
		if b.TryWithdrawAt(back) {
			allowed++
			bc.withdraw(back)
		}
	}
	if allowed != 20 {
		t.Fatalf("%d retries allowed within one instant after a clock step back; the budget allows 0.1 x 100 + 10 = 20", allowed)
	}
	// Traffic goes on from the stepped-back clock for 40 s, past the
	// latest time seen plus the TTL: one deposit and ten retries asked
	// every 100 ms. The bound holds over every TTL of the window's time,
	// and once the clock has caught up the window slides again.
	granted := 0
	for i := range 400 {
		at := back.Add(time.Duration(i) * 100 * time.Millisecond)
		b.DepositAt(at)
		bc.deposit(at)
		for range 10 {
			if b.TryWithdrawAt(at) {
				granted++
				bc.withdraw(at)
			}
		}
	}
	// The last 10 s (t0+10s to t0+20s) are a fresh window: 100 deposits
	// allow 10 + 10 retries, and the callers asked for more.
	if s := b.SnapshotAt(back.Add(39900 * time.Millisecond)); s.Deposits != 100 || s.Withdrawals != 20 || s.Balance != 0 {
		t.Fatalf("after the clock caught up: %+v, want 100 deposits, 20 withdrawals, balance 0", s)
	}
	if granted == 0 {
		t.Fatal("no retry granted in 40 s of traffic")
	}
}

// TestBudgetBeforeOrigin: times earlier than the first one a budget saw
// by more than the TTL count as that first time, so the floor still
// bounds them.
func TestBudgetBeforeOrigin(t *testing.T) {
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{TTL: 10 * time.Second, RetryRatio: 0.1, MinRetriesPerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.SnapshotAt(fuzzT0) // fixes the origin
	allowed := 0
	for i := range 1000 {
		if b.TryWithdrawAt(fuzzT0.Add(-time.Hour - time.Duration(i)*time.Second)) {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("%d retries allowed before the origin; the floor allows 10 per TTL", allowed)
	}
}

// boundChecker checks a budget's decisions against its contract without
// looking at its state: in the window's own time (the latest time seen),
// the withdrawals of the last TTL - TTL/Buckets never exceed RetryRatio
// x the deposits of the last TTL + MinRetriesPerSecond x TTL. (An event
// counts for between TTL - TTL/Buckets and TTL, so the window holds at
// least the former withdrawals and at most the latter deposits.)
type boundChecker struct {
	t              *testing.T
	full, inner    time.Duration // n x width, and (n-1) x width
	ratio, reserve float64
	started        bool
	start, last    time.Time
	deps, wds      []time.Duration // window time of each event since start, non-decreasing
}

// newBoundChecker returns a checker for a budget built from a valid cfg,
// with the defaults filled in as NewBudget does.
func newBoundChecker(t *testing.T, cfg retrybudget.BudgetConfig) *boundChecker {
	ttl, n := cfg.TTL, cfg.Buckets
	if ttl == 0 {
		ttl = retrybudget.DefaultBudgetTTL
	}
	if n == 0 {
		n = retrybudget.DefaultBudgetBuckets
	}
	ratio, floor := cfg.RetryRatio, cfg.MinRetriesPerSecond
	if ratio == 0 {
		ratio = retrybudget.DefaultRetryRatio
	}
	if floor == 0 {
		floor = retrybudget.DefaultMinRetriesPerSecond
	}
	width := ttl / time.Duration(n)
	return &boundChecker{t: t, full: width * time.Duration(n), inner: width * time.Duration(n-1),
		ratio: max(ratio, 0), reserve: max(floor, 0) * ttl.Seconds()}
}

// see records that the budget was called at now (the first call fixes
// its origin) and returns the window's time since the first call.
func (c *boundChecker) see(now time.Time) time.Duration {
	if !c.started {
		c.started, c.start, c.last = true, now, now
	}
	if now.After(c.last) {
		c.last = now
	}
	return c.last.Sub(c.start)
}

func (c *boundChecker) deposit(now time.Time) { c.deps = append(c.deps, c.see(now)) }

// withdraw records a granted withdrawal and checks the bound.
func (c *boundChecker) withdraw(now time.Time) {
	c.t.Helper()
	at := c.see(now)
	c.wds = append(c.wds, at)
	w := len(c.wds) - sort.Search(len(c.wds), func(i int) bool { return c.wds[i] >= at-c.inner })
	d := len(c.deps) - sort.Search(len(c.deps), func(i int) bool { return c.deps[i] > at-c.full })
	if limit := c.ratio*float64(d) + c.reserve + 1e-6; float64(w) > limit {
		c.t.Fatalf("at %v of window time: %d withdrawals within %v, but %d deposits within %v allow %.2f",
			at, w, c.inner, d, c.full, limit)
	}
}

// TestBudgetMonotonicOrigin: a budget first used with time.Now() measures
// times that carry a monotonic reading on that clock (immune to wall-clock
// steps), and times without one on the wall clock, with the same result
// when the two clocks agree.
func TestBudgetMonotonicOrigin(t *testing.T) {
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for range 10 {
		b.DepositAt(now)
	}
	for _, tt := range []struct {
		at   time.Time
		want uint64
	}{
		{now.Add(10*time.Second - 1), 10},
		{now.Add(10*time.Second - 1).Round(0), 10}, // wall clock only
		{now.Add(10 * time.Second), 0},
		{now.Add(10 * time.Second).Round(0), 0},
	} {
		if got := b.SnapshotAt(tt.at).Deposits; got != tt.want {
			t.Errorf("deposits at %v = %d, want %d", tt.at, got, tt.want)
		}
	}
}
