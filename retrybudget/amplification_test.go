package retrybudget

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// sendAll sends n logical GETs to url through tr from `workers`
// goroutines and fails the test on transport errors.
func sendAll(t *testing.T, tr http.RoundTripper, url string, n, workers int) {
	t.Helper()
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range jobs {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestAmplification sends 1,000 logical requests, with up to 3 retries
// each, to an upstream that always fails. Without a budget that is 4,000
// attempts; with one, at most 1,000 x (1 + ratio) + floor x TTL.
//
// The budget's TTL is an hour (with a floor of 100 retries per TTL) so
// that the whole test falls within one window whatever the machine's
// speed: the bound is then exact.
func TestAmplification(t *testing.T) {
	const (
		logical  = 1000
		attempts = 4
		floorTTL = 100 // floor x TTL
	)
	newBudget := func(ratio float64) *Budget {
		return mustBudget(t, BudgetConfig{TTL: time.Hour, RetryRatio: ratio,
			MinRetriesPerSecond: floorTTL / time.Hour.Seconds()})
	}

	t.Run("no budget", func(t *testing.T) {
		up := newUpstream(t, statuses(503))
		tr, _ := testTransport(t, TransportConfig{MaxAttempts: attempts, NoBudget: true})
		sendAll(t, tr, up.url(), logical, 4)
		if got := up.hits.Load(); got != logical*attempts {
			t.Fatalf("attempts without a budget = %d, want %d", got, logical*attempts)
		}
	})
	for _, ratio := range []float64{0.1, 0.2} {
		t.Run(fmt.Sprintf("budget ratio %.1f", ratio), func(t *testing.T) {
			up := newUpstream(t, statuses(503))
			b := newBudget(ratio)
			tr, _ := testTransport(t, TransportConfig{MaxAttempts: attempts, Budget: b})
			sendAll(t, tr, up.url(), logical, 4)
			got := up.hits.Load()
			limit := int64(logical*(1+ratio)) + floorTTL
			t.Logf("ratio %.1f: %d attempts for %d logical requests (%.2fx), limit %d", ratio, got, logical, float64(got)/logical, limit)
			if got > limit {
				t.Fatalf("attempts = %d, above the limit %d", got, limit)
			}
			// The budget is used, not merely blocking: every allowed retry
			// was made (all in one bucket, the budget is exact).
			if got < limit-int64(4) {
				t.Fatalf("attempts = %d, want about %d: retries were denied while the budget had balance", got, limit)
			}
			if s := b.Snapshot(); s.Deposits != logical || int64(s.Withdrawals) != got-logical {
				t.Fatalf("budget snapshot %+v, want %d deposits and %d withdrawals", s, logical, got-logical)
			}
		})
	}
	t.Run("two transports share one budget", func(t *testing.T) {
		const ratio = 0.2
		b := newBudget(ratio)
		upA := newUpstream(t, statuses(503))
		upB := newUpstream(t, statuses(503))
		trA, _ := testTransport(t, TransportConfig{MaxAttempts: attempts, Budget: b})
		trB, _ := testTransport(t, TransportConfig{MaxAttempts: attempts, Budget: b})
		var wg sync.WaitGroup
		wg.Go(func() { sendAll(t, trA, upA.url(), logical/2, 2) })
		wg.Go(func() { sendAll(t, trB, upB.url(), logical/2, 2) })
		wg.Wait()
		got := upA.hits.Load() + upB.hits.Load()
		limit := int64(logical*(1+ratio)) + floorTTL
		t.Logf("two transports: %d + %d = %d attempts, limit %d", upA.hits.Load(), upB.hits.Load(), got, limit)
		if got > limit {
			t.Fatalf("attempts = %d, above the one-budget limit %d", got, limit)
		}
	})
}
