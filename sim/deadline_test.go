package sim

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// TestDeadlineHeaderSemantics: the time a replica is given for a request
// is exactly what the middleware takes from the header retrybudget's
// Transport sends for it: whole milliseconds rounded down, at most
// shedhttp.DefaultMaxDeadline, nothing when no time is left.
func TestDeadlineHeaderSemantics(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lefts := []int64{math.MinInt64 / 2, -1, 0, 1, int64(time.Millisecond) - 1, int64(time.Millisecond), int64(time.Millisecond) + 1,
		int64(shedhttp.DefaultMaxDeadline) - 1, int64(shedhttp.DefaultMaxDeadline), int64(shedhttp.DefaultMaxDeadline) + 1, math.MaxInt64 / 2}
	for range 10000 {
		lefts = append(lefts, rng.Int64N(int64(2*time.Minute)))
	}
	for _, left := range lefts {
		v := retrybudget.FormatDeadline(retrybudget.ConnectTimeoutHeader, time.Duration(left))
		d, ok := shedhttp.ParseDeadline(shedhttp.ConnectTimeoutHeader, v)
		if !ok {
			t.Fatalf("%v: header %q refused", time.Duration(left), v)
		}
		if want := min(d, shedhttp.DefaultMaxDeadline); propagatedLeft(left) != int64(want) {
			t.Fatalf("%v left: the simulator gives %v, the middleware %v", time.Duration(left), time.Duration(propagatedLeft(left)), want)
		}
	}
}

// deadlineLimiter is the limiter both sides decide with: one class with
// a queue, that learned that its work takes 500 ms (one permit held that
// long, ending at now).
func deadlineLimiter(t *testing.T, clock func() time.Time, now time.Time) *shed.Limiter {
	t.Helper()
	l, err := shed.New(shed.Config{Limit: 10, DeadlineMargin: 0.5, Clock: clock, Classes: []shed.ClassConfig{{Name: "a", QueueDepth: 10, MaxWait: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.TryAcquireAt(now.Add(-500*time.Millisecond), shed.Request{})
	if err != nil {
		t.Fatal(err)
	}
	p.ReleaseAt(now, shed.Success)
	return l
}

// TestDeadlineSimMatchesMiddleware: for the same remaining time and the
// same latency estimate, the simulator's replica and the real middleware
// (on 127.0.0.1, called through retrybudget's Transport) make the same
// decision: rejected at once for the deadline, or admitted. The times
// stay 50 ms away from the limiter's threshold (half the 500 ms service
// time), more than a loopback request takes.
func TestDeadlineSimMatchesMiddleware(t *testing.T) {
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{Base: base, MaxAttempts: 1, NoBudget: true,
		DeadlineHeader: retrybudget.ConnectTimeoutHeader, Breaker: retrybudget.BreakerConfig{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for _, left := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, time.Second, 2 * time.Minute} {
		// The simulator: the replica's request for a caller with left to go.
		e := &engine{sc: &Scenario{}, now: int64(time.Minute)}
		e.nowT = epoch.Add(time.Duration(e.now))
		task := &task{deadline: e.serviceDeadline(e.now + int64(left))}
		simL := deadlineLimiter(t, func() time.Time { return e.nowT }, e.nowT)
		p, simErr := simL.TryAcquireAt(e.nowT, serviceRequest(task))
		p.ReleaseAt(e.nowT, shed.Ignored)

		// The middleware, with the same estimate.
		mwL := deadlineLimiter(t, time.Now, time.Now())
		mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: mwL, DeadlineHeader: shedhttp.ConnectTimeoutHeader}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		ctx, cancel := context.WithTimeout(context.Background(), left)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if left > 0 && err != nil {
			t.Fatalf("%v left: %v", left, err)
		}
		if resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		srv.Close()

		simRejected := shed.ReasonOf(simErr) == shed.ReasonDeadline
		mwRejected := mwL.Snapshot().Classes[0].Rejected[shed.ReasonDeadline] == 1
		if left == 0 {
			// No time left: the Transport sends nothing at all, and the
			// replica would refuse it.
			mwRejected = err != nil && mwL.Snapshot().Classes[0].Admitted == 1
		}
		if simRejected != mwRejected || simRejected != (left <= 250*time.Millisecond) {
			t.Errorf("%v left: simulator rejects %v (%v), middleware %v (status %v)", left, simRejected, simErr, mwRejected, resp)
		}
	}
}

// TestDeadlinePropagationOff: a queue that has become longer than the
// callers' deadline. With propagation, the replicas know those deadlines
// and refuse at once what would time out in the queue; without it they
// see none, refuse nothing for one, and the requests wait until the queue
// times them out.
func TestDeadlinePropagationOff(t *testing.T) {
	sc := &Scenario{
		Name: "queue", Duration: 20 * time.Second,
		Classes:  []Class{{Name: "a", Rate: 200, Timeout: 300 * time.Millisecond, Queue: 500, MaxWait: time.Second}},
		Service:  Service{StaticLimit: 10},
		Upstream: Upstream{Capacity: 10, ServiceTime: Const(float64(100 * time.Millisecond))},
	}
	static, _ := ParsePolicy("static")
	rejected := func(off bool) (deadline, timeout int64) {
		sc.Service.NoDeadlinePropagation = off
		r, err := Run(sc, static, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range r.Series {
			deadline += row.Rejected[shed.ReasonDeadline]
			timeout += row.Rejected[shed.ReasonQueueTimeout]
		}
		return deadline, timeout
	}
	onDeadline, _ := rejected(false)
	offDeadline, offTimeout := rejected(true)
	if onDeadline == 0 || offDeadline != 0 || offTimeout == 0 {
		t.Fatalf("deadline rejections %d with propagation, %d without (queue timeouts %d): want some, none (some)", onDeadline, offDeadline, offTimeout)
	}
}
