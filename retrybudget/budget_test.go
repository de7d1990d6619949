package retrybudget

import (
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func mustBudget(t *testing.T, cfg BudgetConfig) *Budget {
	t.Helper()
	b, err := NewBudget(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withdrawAll withdraws until denied and returns how many succeeded.
func withdrawAll(b *Budget, now time.Time) int {
	n := 0
	for b.TryWithdrawAt(now) {
		n++
		if n > 1e6 {
			panic("unbounded budget")
		}
	}
	return n
}

func TestNewBudgetValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   BudgetConfig
		field string // "" means valid
	}{
		{"zero is defaults", BudgetConfig{}, ""},
		{"negative ttl", BudgetConfig{TTL: -time.Second}, "TTL"},
		{"nan ratio", BudgetConfig{RetryRatio: nan()}, "RetryRatio"},
		{"inf ratio", BudgetConfig{RetryRatio: inf()}, "RetryRatio"},
		{"huge ratio", BudgetConfig{RetryRatio: 1001}, "RetryRatio"},
		{"negative ratio means none", BudgetConfig{RetryRatio: -1}, ""},
		{"nan floor", BudgetConfig{MinRetriesPerSecond: nan()}, "MinRetriesPerSecond"},
		{"negative floor means none", BudgetConfig{MinRetriesPerSecond: -1}, ""},
		{"negative buckets", BudgetConfig{Buckets: -1}, "Buckets"},
		{"too many buckets", BudgetConfig{Buckets: 1001}, "Buckets"},
		{"bucket under 1ms", BudgetConfig{TTL: 10 * time.Millisecond, Buckets: 11}, "TTL/Buckets"},
		{"bucket of 1ms", BudgetConfig{TTL: 10 * time.Millisecond, Buckets: 10}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.cfg)
			if tt.field == "" {
				if err != nil || b == nil {
					t.Fatalf("NewBudget: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "BudgetConfig."+tt.field) {
				t.Fatalf("NewBudget error = %v, want one naming %s", err, tt.field)
			}
		})
	}
}

func TestBudgetDefaultsAreFinagles(t *testing.T) {
	b := mustBudget(t, BudgetConfig{})
	// No deposits: the floor alone, 10/s x 10 s.
	if got := b.SnapshotAt(t0).Balance; got != 100 {
		t.Fatalf("initial balance = %d, want 100", got)
	}
	for range 1000 {
		b.DepositAt(t0)
	}
	if got := withdrawAll(b, t0); got != 300 {
		t.Fatalf("withdrawals after 1000 deposits = %d, want 1000*0.2+100 = 300", got)
	}
	if d1, d2 := Default(), Default(); d1 != d2 || d1.Name() != "default" {
		t.Fatal("Default() must return one process-wide budget named default")
	}
}

func TestBudgetRatio(t *testing.T) {
	tests := []struct {
		ratio    float64
		deposits int
		want     int
	}{
		{0.2, 100, 20},
		{0.2, 4, 0},
		{0.2, 5, 1},
		{0.29, 100, 29}, // 0.29*100 is 28.999... in float64
		{0.5, 7, 3},
		{1, 10, 10},
		{2.5, 10, 25},
		{-1, 1000, 0}, // negative: no ratio
	}
	for _, tt := range tests {
		b := mustBudget(t, BudgetConfig{RetryRatio: tt.ratio, MinRetriesPerSecond: -1})
		for range tt.deposits {
			b.DepositAt(t0)
		}
		if got := withdrawAll(b, t0); got != tt.want {
			t.Errorf("ratio %v, %d deposits: %d withdrawals, want %d", tt.ratio, tt.deposits, got, tt.want)
		}
		s := b.SnapshotAt(t0)
		if s.Balance != 0 || s.Withdrawals != uint64(tt.want) || s.Deposits != uint64(tt.deposits) || s.Denials != 1 {
			t.Errorf("ratio %v: snapshot %+v", tt.ratio, s)
		}
	}
}

func TestBudgetFloor(t *testing.T) {
	b := mustBudget(t, BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: 3, TTL: 2 * time.Second})
	if got := withdrawAll(b, t0); got != 6 {
		t.Fatalf("floor 3/s over 2s allows %d, want 6", got)
	}
	// Still exhausted within the window...
	if b.TryWithdrawAt(t0.Add(1500 * time.Millisecond)) {
		t.Fatal("withdrawal allowed before the first ones expired")
	}
	// ...and replenished once they expire.
	if got := withdrawAll(b, t0.Add(2*time.Second)); got != 6 {
		t.Fatalf("after a TTL: %d withdrawals, want 6", got)
	}
}

func TestBudgetWindowExpiry(t *testing.T) {
	// TTL 10s in 10 buckets of 1s: an event at epoch e counts until the
	// clock reaches epoch e+10.
	b := mustBudget(t, BudgetConfig{MinRetriesPerSecond: -1})
	b.DepositAt(t0) // fixes the origin at t0
	for range 99 {
		b.DepositAt(t0.Add(500 * time.Millisecond))
	}
	for _, tt := range []struct {
		at   time.Duration
		want uint64
	}{
		{0, 100},
		{9*time.Second + 999*time.Millisecond, 100},
		{10 * time.Second, 0},
		{time.Hour, 0},
		// Snapshots do not move the window's time: a caller whose clock
		// lags reads the window at the latest time a deposit or a
		// withdrawal saw (t0+500ms), however far behind it is.
		{-time.Second, 100},
		{-10 * time.Second, 100},
		{-time.Hour, 100},
	} {
		if got := b.SnapshotAt(t0.Add(tt.at)).Deposits; got != tt.want {
			t.Errorf("deposits at t0+%v = %d, want %d", tt.at, got, tt.want)
		}
	}
	// Deposits spread over time expire one bucket at a time.
	b = mustBudget(t, BudgetConfig{MinRetriesPerSecond: -1})
	for s := range 10 {
		for range 10 {
			b.DepositAt(t0.Add(time.Duration(s) * time.Second))
		}
	}
	for s := 9; s <= 20; s++ {
		want := uint64(10 * max(0, 19-s))
		if s == 9 {
			want = 100
		}
		if got := b.SnapshotAt(t0.Add(time.Duration(s) * time.Second)).Deposits; got != want {
			t.Errorf("deposits at t0+%ds = %d, want %d", s, got, want)
		}
	}
}

func TestBudgetBalanceCanGoNegative(t *testing.T) {
	b := mustBudget(t, BudgetConfig{RetryRatio: 1, MinRetriesPerSecond: -1})
	for range 10 {
		b.DepositAt(t0)
	}
	for range 10 {
		if !b.TryWithdrawAt(t0.Add(5 * time.Second)) {
			t.Fatal("withdrawal denied")
		}
	}
	// The deposits expire at t0+10s, the withdrawals at t0+15s.
	if got := b.SnapshotAt(t0.Add(12 * time.Second)).Balance; got != -10 {
		t.Fatalf("balance = %d, want -10", got)
	}
	if b.TryWithdrawAt(t0.Add(12 * time.Second)) {
		t.Fatal("withdrawal allowed on a negative balance")
	}
}

func TestBudgetAnyTimeBase(t *testing.T) {
	for _, base := range []time.Time{{}, time.Unix(0, 0), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)} {
		b := mustBudget(t, BudgetConfig{MinRetriesPerSecond: -1})
		for range 10 {
			b.DepositAt(base)
		}
		if got := withdrawAll(b, base.Add(time.Second)); got != 2 {
			t.Errorf("base %v: %d withdrawals, want 2", base, got)
		}
		if got := b.SnapshotAt(base.Add(11 * time.Second)).Deposits; got != 0 {
			t.Errorf("base %v: deposits after TTL = %d", base, got)
		}
	}
}

// TestBudgetMatchesModel compares the budget with a straightforward model
// over random sequences of operations in virtual time.
func TestBudgetMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 50 {
		ttl := time.Duration(1+rng.IntN(20)) * time.Second
		buckets := 1 + rng.IntN(20)
		ratio := float64(rng.IntN(50)) / 100
		floor := float64(rng.IntN(5))
		b := mustBudget(t, BudgetConfig{TTL: ttl, Buckets: buckets, RetryRatio: ratio, MinRetriesPerSecond: floor})
		if ratio == 0 {
			ratio = DefaultRetryRatio
		}
		if floor == 0 {
			floor = DefaultMinRetriesPerSecond
		}
		width := ttl / time.Duration(buckets)
		type event struct {
			epoch    int64
			withdraw bool
		}
		var events []event
		now := t0
		b.DepositAt(now) // origin
		events = append(events, event{0, false})
		for op := range 2000 {
			now = now.Add(time.Duration(rng.IntN(int(width / 2))))
			e := int64(now.Sub(t0) / width)
			var d, w int
			live := events[:0]
			for _, ev := range events {
				if ev.epoch > e-int64(buckets) {
					live = append(live, ev)
					if ev.withdraw {
						w++
					} else {
						d++
					}
				}
			}
			events = live
			if rng.IntN(3) > 0 {
				b.DepositAt(now)
				events = append(events, event{e, false})
				continue
			}
			want := float64(w)+1 <= float64(d)*ratio+floor*ttl.Seconds()+1e-9
			if got := b.TryWithdrawAt(now); got != want {
				t.Fatalf("run %d op %d: TryWithdrawAt = %v, model says %v (d=%d w=%d)", run, op, got, want, d, w)
			}
			if want {
				events = append(events, event{e, true})
			}
		}
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := mustBudget(t, BudgetConfig{MinRetriesPerSecond: -1})
	const goroutines, per = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				b.DepositAt(t0.Add(time.Duration(g*per+i) * time.Microsecond))
			}
		})
	}
	wg.Wait()
	now := t0.Add(time.Second)
	var granted atomic.Int64
	for range goroutines {
		wg.Go(func() {
			for range per {
				if b.TryWithdrawAt(now) {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// All callers share one bucket: the limit is exact.
	if got := granted.Load(); got != goroutines*per/5 {
		t.Fatalf("granted %d withdrawals, want exactly %d", got, goroutines*per/5)
	}
	s := b.SnapshotAt(now)
	if s.Denials != goroutines*per-uint64(granted.Load()) || s.Balance != 0 {
		t.Fatalf("snapshot %+v", s)
	}

	// Mixed deposits and withdrawals with moving clocks: the budget may
	// overshoot by at most one withdrawal per caller at bucket edges.
	b = mustBudget(t, BudgetConfig{MinRetriesPerSecond: -1, TTL: time.Hour})
	granted.Store(0)
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				now := t0.Add(time.Duration(g*7+i) * time.Second)
				b.DepositAt(now)
				if b.TryWithdrawAt(now) {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got, limit := granted.Load(), int64(goroutines*per/5+goroutines); got > limit || got < goroutines*per/5-goroutines {
		t.Fatalf("granted %d, want about %d (at most %d)", got, goroutines*per/5, limit)
	}
}

func TestBudgetSaturates(t *testing.T) {
	// A bucket count saturates instead of wrapping into the epoch.
	var w window
	w.width, w.n = int64(time.Second), 1
	w.buckets = make([]bucket, 1)
	w.addA(t0)
	tag, _ := w.epoch(t0, false)
	w.buckets[0].a.Store(tag<<countBits | (countMask - 1))
	w.addA(t0)
	w.addA(t0)
	if a, _ := w.sums(t0); a != countMask {
		t.Fatalf("saturated count = %d, want %d", a, countMask)
	}
}

// TestBudgetZeroValue: a zero Budget is usable, with the defaults of
// NewBudget(BudgetConfig{}), from its first use on, even when that first
// use is concurrent. (Before the fix, Snapshot and every other method of
// a zero Budget panicked.)
func TestBudgetZeroValue(t *testing.T) {
	var zero Budget
	if s := zero.Snapshot(); s != (BudgetSnapshot{Balance: 100}) {
		t.Fatalf("snapshot of a zero budget = %+v, want the default floor of 100 retries", s)
	}
	if zero.Name() != "default" {
		t.Fatalf("Name() = %q, want %q", zero.Name(), "default")
	}

	// It decides as a budget with the defaults does.
	var b Budget
	ref := mustBudget(t, BudgetConfig{})
	for i := range 600 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		b.DepositAt(at)
		ref.DepositAt(at)
		for range 3 {
			if got, want := b.TryWithdrawAt(at), ref.TryWithdrawAt(at); got != want {
				t.Fatalf("step %d: zero budget allowed %v, default budget %v", i, got, want)
			}
		}
	}
	end := t0.Add(30 * time.Second)
	if got, want := b.SnapshotAt(end), ref.SnapshotAt(end); got != want {
		t.Fatalf("snapshot %+v, want %+v", got, want)
	}

	// Concurrent first uses share one state: no deposit is lost.
	var c Budget
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.DepositAt(t0)
			}
		})
	}
	wg.Wait()
	if s := c.SnapshotAt(t0); s.Deposits != 800 {
		t.Fatalf("%d deposits counted of 800", s.Deposits)
	}

	// A Transport takes it.
	if _, err := NewTransport(TransportConfig{Budget: &Budget{}}); err != nil {
		t.Fatalf("NewTransport with a zero Budget: %v", err)
	}
}
