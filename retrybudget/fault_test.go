package retrybudget_test

import (
	"testing"
	"time"

	"github.com/shedkit/shedkit/retrybudget"
)

// TestBudgetClockStepBack: after the wall clock steps back by more than
// the budget's TTL (an NTP correction), the budget must still bound
// retries. Today every bucket of the ring is tagged with an epoch ahead of
// the new time by TTL or more; window.next counts a new event into such a
// bucket as "a newer epoch written by a caller whose clock runs ahead",
// but window.countIn ignores buckets more than n-1 epochs ahead, so the
// deposits and withdrawals made after the step are invisible: every
// withdrawal that the floor alone covers succeeds, without limit, until
// the clock catches up. (The same happens to the first calls of a budget
// made with times earlier than its origin by more than the TTL.)
func TestBudgetClockStepBack(t *testing.T) {
	t.Skip("BUG: retrybudget/window.go:104 (next) counts into buckets tagged more than n-1 epochs ahead, which countIn (window.go:93) ignores: a backward clock step > TTL makes withdrawals unbounded")
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{TTL: 10 * time.Second, RetryRatio: 0.1, MinRetriesPerSecond: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Ten seconds of traffic fill every bucket of the ring.
	now := fuzzT0
	for i := range 100 {
		b.DepositAt(now.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	// The clock steps back by 20 s: the floor allows 10 retries per TTL
	// (1/s x 10 s), the deposits of the window none (it holds none).
	back := now.Add(-20 * time.Second)
	allowed := 0
	for range 1000 {
		if b.TryWithdrawAt(back) {
			allowed++
		}
	}
	if allowed > 10 {
		t.Fatalf("%d retries allowed within one instant after a clock step back; the floor allows 10 per TTL", allowed)
	}
}
