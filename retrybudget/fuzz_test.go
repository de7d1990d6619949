package retrybudget_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/retrybudget"
)

var fuzzT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fuzzTime moves now by a signed step from one byte: mostly forward by up
// to 127 ms, sometimes back (a caller whose clock lags), and 0xff jumps a
// day ahead (every bucket expires).
func fuzzTime(now time.Time, b byte) time.Time {
	if b == 0xff {
		return now.Add(24 * time.Hour)
	}
	return now.Add(time.Duration(int8(b)) * time.Millisecond)
}

// budgetStep moves now by one fuzzed step: 0x00-0x7f forward by up to
// 127 ms, 0x80-0xfd back by 100 ms to 12.6 s (a lagging caller, or a
// wall clock stepped back by more than the default TTL), 0xfe a day back
// and 0xff a day ahead (every bucket expires).
func budgetStep(now time.Time, s byte) time.Time {
	switch {
	case s < 0x80:
		return now.Add(time.Duration(s) * time.Millisecond)
	case s == 0xfe:
		return now.Add(-24 * time.Hour)
	case s == 0xff:
		return now.Add(24 * time.Hour)
	}
	return now.Add(-time.Duration(s-0x7f) * 100 * time.Millisecond)
}

// FuzzBudget: NewBudget returns an error or a Budget whose decisions agree
// with its own snapshot through any sequence of deposits, withdrawals and
// clock moves, backwards included: a withdrawal succeeds exactly when the
// balance is at least one, never leaves the balance negative, and every
// refusal is counted. And, checked without the snapshot, the granted
// withdrawals respect the bound over every TTL of the budget's own time
// (see boundChecker).
func FuzzBudget(f *testing.F) {
	ops := []byte{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 50, 1, 1, 2, 0xff, 1, 1, 0, 1, 2, 0x90, 1, 1, 2, 0xfe, 1, 0, 1}
	// Ten seconds of deposits, a step back of 25.2 s, then retries: the
	// clock-step bug of TestBudgetClockStepBack.
	var stepBack []byte
	for range 100 {
		stepBack = append(stepBack, 0, 2, 100)
	}
	stepBack = append(stepBack, 2, 0xfd, 2, 0xfd)
	for range 50 {
		stepBack = append(stepBack, 1)
	}
	f.Add(int64(0), 0.0, 0.0, 0, ops)
	f.Add(int64(time.Second), 0.5, 2.0, 4, ops)
	f.Add(int64(100*time.Millisecond), -1.0, -1.0, 100, ops)
	f.Add(int64(10*time.Millisecond), 1000.0, 1e6, 10, ops)
	f.Add(int64(math.MaxInt64), 0.2, 10.0, 1000, ops)
	f.Add(int64(10*time.Second), 0.1, 1.0, 0, stepBack)
	f.Add(int64(time.Second), 0.0, -1.0, 0, stepBack)
	f.Add(int64(-1), 0.0, 0.0, 0, ops)               // invalid
	f.Add(int64(0), math.NaN(), 0.0, 0, ops)         // invalid
	f.Add(int64(0), 0.0, math.Inf(1), 0, ops)        // invalid
	f.Add(int64(time.Millisecond), 0.0, 0.0, 2, ops) // bucket under 1ms: invalid
	f.Fuzz(func(t *testing.T, ttl int64, ratio, floor float64, buckets int, ops []byte) {
		cfg := retrybudget.BudgetConfig{TTL: time.Duration(ttl), RetryRatio: ratio, MinRetriesPerSecond: floor, Buckets: buckets}
		b, err := retrybudget.NewBudget(cfg)
		if err != nil {
			if b != nil {
				t.Fatalf("NewBudget returned a budget and %v", err)
			}
			return
		}
		bc := newBoundChecker(t, cfg)
		now := fuzzT0
		var denials uint64
		for i := 0; i < len(ops) && i < 5000; i++ {
			switch ops[i] % 3 {
			case 0:
				b.DepositAt(now)
				bc.deposit(now)
			case 1:
				before := b.SnapshotAt(now)
				bc.see(now) // the snapshot may fix the origin
				ok := b.TryWithdrawAt(now)
				after := b.SnapshotAt(now)
				if ok != (before.Balance >= 1) {
					t.Fatalf("op %d: withdrawal %v with a balance of %d (%+v)", i, ok, before.Balance, before)
				}
				if ok && (after.Balance < 0 || after.Withdrawals != before.Withdrawals+1) {
					t.Fatalf("op %d: after a withdrawal %+v, before %+v", i, after, before)
				}
				if ok {
					bc.withdraw(now)
				} else {
					denials++
				}
				if after.Denials != denials {
					t.Fatalf("op %d: %d denials counted, %d made", i, after.Denials, denials)
				}
			default:
				if i+1 < len(ops) {
					i++
					now = budgetStep(now, ops[i])
				}
			}
		}
	})
}

// FuzzThrottle: NewThrottle returns an error or a Throttle whose reject
// probability is in [0, 1) and whose decisions follow it: AllowAt(now, u)
// rejects exactly when u < p. Ops: allow, accept, reject, move the clock.
func FuzzThrottle(f *testing.F) {
	ops := []byte{0, 10, 0, 20, 0, 30, 1, 0, 40, 0, 250, 0, 128, 2, 60, 1, 0, 5, 2, 0xff, 0, 0}
	f.Add(0.0, int64(0), 0, ops)
	f.Add(1.0, int64(time.Second), 10, ops)
	f.Add(1e300, int64(math.MaxInt64), 1000, ops)
	f.Add(0.5, int64(0), 0, ops)                // K below 1: invalid
	f.Add(math.NaN(), int64(0), 0, ops)         // invalid
	f.Add(2.0, int64(time.Millisecond), 2, ops) // bucket under 1ms: invalid
	f.Fuzz(func(t *testing.T, k float64, window int64, buckets int, ops []byte) {
		th, err := retrybudget.NewThrottle(retrybudget.ThrottleConfig{K: k, Window: time.Duration(window), Buckets: buckets})
		if err != nil {
			if th != nil {
				t.Fatalf("NewThrottle returned a throttle and %v", err)
			}
			return
		}
		now := fuzzT0
		for i := 0; i+1 < len(ops) && i < 5000; i += 2 {
			arg := ops[i+1]
			switch ops[i] % 4 {
			case 0:
				p := th.RejectProbabilityAt(now)
				if !(p >= 0 && p < 1) {
					t.Fatalf("op %d: reject probability %v", i, p)
				}
				u := float64(arg) / 256
				if got := th.AllowAt(now, u); got != !(u < p) {
					t.Fatalf("op %d: AllowAt(u=%v) = %v with p = %v", i, u, got, p)
				}
			case 1:
				th.AcceptAt(now)
			case 2:
				th.RejectAt(now)
			default:
				now = fuzzTime(now, arg)
			}
		}
	})
}

// FuzzRetryAfterFormats: every form of Retry-After a server may send,
// formatted from a known delay, parses back to that delay (capped), and
// never to a negative one.
func FuzzRetryAfterFormats(f *testing.F) {
	for _, s := range []int64{0, 1, 59, 3600, 86400, 86401, -1, -86400, math.MaxInt32, 1 << 40} {
		f.Add(s)
	}
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, secs int64) {
		if secs < -1<<40 || secs > 1<<40 {
			return // beyond year 36000: not an HTTP-date
		}
		want := retrybudget.MaxParsedRetryAfter
		if secs < int64(want/time.Second) {
			want = max(time.Duration(secs)*time.Second, 0)
		}
		if secs >= 0 {
			v := strconv.FormatInt(secs, 10)
			if d, ok := retrybudget.ParseRetryAfter(v, now); !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", v, d, ok, want)
			}
		}
		at := now.Add(time.Duration(secs) * time.Second)
		if at.Year() < 1970 || at.Year() > 9999 {
			return
		}
		layouts := []string{http.TimeFormat, time.ANSIC}
		if y := at.Year(); y >= 1970 && y < 2070 {
			layouts = append(layouts, time.RFC850) // two-digit years
		}
		for _, layout := range layouts {
			v := at.UTC().Format(layout)
			if layout == time.RFC850 {
				v = strings.Replace(v, "UTC", "GMT", 1)
			}
			d, ok := retrybudget.ParseRetryAfter(v, now)
			if !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", v, d, ok, want)
			}
		}
	})
}

// scripted is a base RoundTripper that answers every attempt with the same
// fuzzed response and records what it was sent.
type scripted struct {
	status  int
	header  http.Header
	mu      sync.Mutex
	seen    []int // RequestAttempt of each attempt
	open    int   // bodies handed out and not closed
	bodyErr bool
}

type countedBody struct {
	io.Reader
	s    *scripted
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() {
		b.s.mu.Lock()
		b.s.open--
		b.s.mu.Unlock()
	})
	return nil
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, retrybudget.RequestAttempt(req))
	if s.bodyErr {
		return nil, errors.New("connection reset")
	}
	s.open++
	return &http.Response{
		StatusCode: s.status,
		Header:     s.header.Clone(),
		Body:       &countedBody{Reader: strings.NewReader("body"), s: s},
		Request:    req,
	}, nil
}

// FuzzTransportHeaders: whatever status, Retry-After and no-retry header a
// server answers with, the Transport makes at most MaxAttempts attempts,
// numbers them 1, 2, ... in Shedkit-Attempt, never retries a response
// that says "do not retry" or is not retryable, waits no less than a
// Retry-After it honours and never more than MaxRetryAfter (or the
// backoff cap), and closes every body it does not return.
func FuzzTransportHeaders(f *testing.F) {
	f.Add(503, "2", "", int64(0), 0, false)
	f.Add(503, "2", "overloaded", int64(0), 0, false)
	f.Add(429, "30", "", int64(10*time.Second), 4, false)
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", "", int64(0), 3, false)
	f.Add(502, "soon", "", int64(0), 5, false)
	f.Add(200, "1", "", int64(0), 3, false)
	f.Add(504, " 0 ", "", int64(24*time.Hour), 100, false)
	f.Add(503, "99999999999999999999", "x", int64(0), 2, false)
	f.Add(0, "", "", int64(0), 3, true)
	f.Fuzz(func(t *testing.T, status int, retryAfter, noRetry string, maxRetryAfter int64, maxAttempts int, connErr bool) {
		if status < 100 || status > 999 {
			status = 503
		}
		in := headersInput{status: status, retryAfter: retryAfter, noRetry: noRetry,
			maxRetryAfter: time.Duration(maxRetryAfter), maxAttempts: maxAttempts, connErr: connErr}
		base := &scripted{status: status, header: in.header(), bodyErr: connErr}
		waits := &waitLog{}
		tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{
			Base:          base,
			NoBudget:      true,
			Breaker:       retrybudget.BreakerConfig{Disabled: true},
			MaxAttempts:   maxAttempts,
			MaxRetryAfter: time.Duration(maxRetryAfter),
			Rand:          func() float64 { return 0.5 },
			Sleep:         waits.sleep,
		})
		if err != nil {
			return // an invalid configuration, rejected
		}
		roundTripAndDrain(t, tr)
		seen := checkScriptedAttempts(t, base, in.effectiveMaxAttempts())
		retryable := connErr || status == 429 || status == 502 || status == 503 || status == 504
		if (!retryable || (!connErr && noRetry != "")) && len(seen) != 1 {
			t.Fatalf("status %d, no-retry %q: %d attempts, want 1", status, noRetry, len(seen))
		}
		checkWaits(t, in, len(seen), waits.all())
	})
}

// headersInput is one fuzzed upstream answer (status, Retry-After,
// no-retry header or a connection error) and Transport limits.
type headersInput struct {
	status        int
	retryAfter    string
	noRetry       string
	maxRetryAfter time.Duration
	maxAttempts   int
	connErr       bool
}

// header is what the scripted upstream answers with; empty values are left out.
func (in headersInput) header() http.Header {
	h := http.Header{}
	if in.retryAfter != "" {
		h["Retry-After"] = []string{in.retryAfter}
	}
	if in.noRetry != "" {
		h[retrybudget.NoRetryHeader] = []string{in.noRetry}
	}
	return h
}

// effectiveMaxAttempts is MaxAttempts after the zero value's default.
func (in headersInput) effectiveMaxAttempts() int {
	if in.maxAttempts == 0 {
		return retrybudget.DefaultMaxAttempts
	}
	return in.maxAttempts
}

// effectiveMaxRetryAfter is MaxRetryAfter after the zero value's default.
func (in headersInput) effectiveMaxRetryAfter() time.Duration {
	if in.maxRetryAfter == 0 {
		return retrybudget.DefaultMaxRetryAfter
	}
	return in.maxRetryAfter
}

// waitLog is a Sleep that returns at once and records each wait asked for.
type waitLog struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (l *waitLog) sleep(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	l.waits = append(l.waits, d)
	l.mu.Unlock()
	return nil
}

func (l *waitLog) all() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.waits...)
}

// roundTripAndDrain sends one GET, requires exactly one of a response or
// an error, and reads and closes the response body.
func roundTripAndDrain(t *testing.T, tr http.RoundTripper) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/x", nil)
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		if err != nil {
			t.Fatal("a response and an error")
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else if err == nil {
		t.Fatal("neither a response nor an error")
	}
}

// checkScriptedAttempts checks that every body was closed and that the
// attempts, at most effMax, were numbered 1, 2, ...; it returns those numbers.
func checkScriptedAttempts(t *testing.T, base *scripted, effMax int) []int {
	t.Helper()
	base.mu.Lock()
	seen, open := append([]int(nil), base.seen...), base.open
	base.mu.Unlock()
	if open != 0 {
		t.Errorf("%d response bodies left open", open)
	}
	if len(seen) < 1 || len(seen) > effMax {
		t.Fatalf("%d attempts, MaxAttempts %d", len(seen), effMax)
	}
	for i, n := range seen {
		if n != i+1 {
			t.Fatalf("attempt %d carried Shedkit-Attempt %d", i+1, n)
		}
	}
	return seen
}

// checkWaits checks that there was one wait per retry, that a Retry-After
// over MaxRetryAfter stopped the retries, and that every wait lies within
// the caps and is no shorter than an honoured Retry-After.
func checkWaits(t *testing.T, in headersInput, attempts int, waits []time.Duration) {
	t.Helper()
	effRA := in.effectiveMaxRetryAfter()
	if len(waits) != attempts-1 {
		t.Fatalf("%d waits for %d attempts", len(waits), attempts)
	}
	ra, raOK := time.Duration(0), false
	if !in.connErr && in.retryAfter != "" && isDigits(strings.TrimSpace(in.retryAfter)) {
		ra, raOK = retrybudget.ParseRetryAfter(in.retryAfter, time.Now())
	}
	if raOK && ra > effRA && attempts != 1 {
		t.Fatalf("Retry-After %v over the maximum %v was honoured: %d attempts", ra, effRA, attempts)
	}
	for _, w := range waits {
		if w < 0 || w > max(effRA, retrybudget.DefaultMaxBackoff) {
			t.Fatalf("wait %v outside [0, %v]", w, max(effRA, retrybudget.DefaultMaxBackoff))
		}
		if raOK && w < ra {
			t.Fatalf("wait %v shorter than Retry-After %v", w, ra)
		}
	}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
