package retrybudget_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/shedkit/shedkit/retrybudget"
)

func ExampleBudget() {
	// Finagle's defaults: 20% of requests plus 10 retries per second,
	// over 10 s. Virtual time: nothing here reads the clock.
	b, err := retrybudget.NewBudget(retrybudget.BudgetConfig{})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 500 {
		b.DepositAt(now) // one per logical request
	}
	retries := 0
	for b.TryWithdrawAt(now) { // one per retry
		retries++
	}
	fmt.Println("retries allowed for 500 requests:", retries)
	fmt.Printf("%+v\n", b.SnapshotAt(now))
	// Ten seconds later the window has slid past every event.
	fmt.Printf("%+v\n", b.SnapshotAt(now.Add(10*time.Second)))
	// Output:
	// retries allowed for 500 requests: 200
	// {Balance:0 Deposits:500 Withdrawals:200 Denials:1}
	// {Balance:100 Deposits:0 Withdrawals:0 Denials:1}
}

func ExampleThrottle() {
	th, err := retrybudget.NewThrottle(retrybudget.ThrottleConfig{}) // K = 2
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// The backend accepted 40 of the last 100 requests.
	// The caller reports each answer of the backend to a request the
	// throttle allowed.
	for i := range 100 {
		if i < 40 {
			th.AcceptAt(now)
		} else {
			th.RejectAt(now)
		}
	}
	fmt.Printf("reject probability: %.3f\n", th.RejectProbabilityAt(now))
	// The caller supplies the random draw: a simulator passes its seeded
	// source, Allow uses ThrottleConfig.Rand.
	fmt.Println("u=0.1 allowed:", th.AllowAt(now, 0.1))
	fmt.Println("u=0.5 allowed:", th.AllowAt(now, 0.5))
	// Output:
	// reject probability: 0.198
	// u=0.1 allowed: false
	// u=0.5 allowed: true
}

func ExampleTransport() {
	// An upstream that sheds the first request, then recovers.
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "served attempt %s", r.Header.Get(retrybudget.AttemptHeader))
	}))
	defer srv.Close()

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Base:        base,
		BaseBackoff: time.Millisecond,
		// Budget: nil shares retrybudget.Default() with the whole process.
	})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var rep retrybudget.Report
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req = req.WithContext(retrybudget.WithReport(req.Context(), &rep))
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", rep.Attempts)
	// Output:
	// 200 served attempt 2
	// attempts: 2
}

func ExampleRetryError() {
	// A budget with nothing to spend, and an upstream that refuses
	// connections.
	empty, _ := retrybudget.NewBudget(retrybudget.BudgetConfig{RetryRatio: -1, MinRetriesPerSecond: -1})
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, _ := retrybudget.NewTransport(retrybudget.TransportConfig{Base: base, Budget: empty})
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	_, err := tr.RoundTrip(req)

	var re *retrybudget.RetryError
	fmt.Println(errors.Is(err, retrybudget.ErrBudgetExhausted), errors.As(err, &re) && re.Attempts == 1)
	// Output: true true
}

func ExamplePropagate() {
	// A service that calls an upstream on behalf of its callers, and does
	// not retry when its caller is already retrying.
	inner, _ := retrybudget.NewTransport(retrybudget.TransportConfig{
		Inbound: retrybudget.InboundNoRetryOnRetry,
	})
	_ = inner // used by the handler to call the upstream
	h := retrybudget.Propagate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("inbound attempt:", retrybudget.InboundAttempt(r.Context()))
		// req, _ := http.NewRequestWithContext(r.Context(), ...)
		// inner.RoundTrip(req) makes a single attempt when the inbound
		// attempt is 2 or more.
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(retrybudget.AttemptHeader, "2")
	h.ServeHTTP(httptest.NewRecorder(), r)
	// Output: inbound attempt: 2
}

func ExampleParseRetryAfter() {
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	for _, v := range []string{"120", "Wed, 21 Oct 2015 07:28:30 GMT", "soon"} {
		d, ok := retrybudget.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s false
}
