package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// deadlineServer serves h behind the middleware, which reads the
// Transport's deadline header.
func deadlineServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	lim, err := shed.New(shed.Config{Limit: 8})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: lim, DeadlineHeader: retrybudget.ConnectTimeoutHeader}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDeadlineHeaderRepeatedTakesShortest: a deadline header present twice
// (a client's value next to a proxy's, or a stale copy next to a fresh
// one) bounds the handler by its shortest value: any value can only
// shorten the request's own deadline, and ignoring both ran the handler
// with none.
func TestDeadlineHeaderRepeatedTakesShortest(t *testing.T) {
	got := make(chan time.Duration, 4)
	u := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) {
		dl, ok := r.Context().Deadline()
		if !ok {
			got <- -1
			return
		}
		got <- time.Until(dl)
	})
	for _, vals := range [][]string{{"50", "50"}, {"50", "80"}} {
		req, _ := http.NewRequest(http.MethodGet, u+"/", nil)
		req.Header[retrybudget.ConnectTimeoutHeader] = vals
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case d := <-got:
			if d < 0 || d > 80*time.Millisecond {
				t.Errorf("header %q: handler ran with deadline %v (-1: none); want <= 50-80ms", vals, d)
			}
		default:
			t.Logf("header %q: status %d, handler not run", vals, resp.StatusCode)
		}
	}
}

// TestTransportReplacesStaleDeadlineKeys: the Transport owns the deadline
// header, under any spelling of its key: a stale copy the caller left
// under a lowercase key is not sent beside the fresh value, and the next
// hop's handler gets the caller's remaining time.
func TestTransportReplacesStaleDeadlineKeys(t *testing.T) {
	got := make(chan time.Duration, 1)
	values := make(chan []string, 1)
	u := deadlineServer(t, func(w http.ResponseWriter, r *http.Request) {
		values <- r.Header.Values(retrybudget.ConnectTimeoutHeader)
		if dl, ok := r.Context().Deadline(); ok {
			got <- time.Until(dl)
		} else {
			got <- -1
		}
	})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := retrybudget.NewTransport(retrybudget.TransportConfig{
		Base: base, MaxAttempts: 1, NoBudget: true, DeadlineHeader: retrybudget.ConnectTimeoutHeader,
		Breaker: retrybudget.BreakerConfig{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/", nil)
	req.Header["connect-timeout-ms"] = []string{"600000"} // stale, copied
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := <-values; len(v) != 1 {
		t.Errorf("the next hop got deadline values %q, want the fresh one alone", v)
	}
	if d := <-got; d < 0 || d > 200*time.Millisecond {
		t.Fatalf("B's handler deadline %v (-1: none); the caller had 200ms", d)
	}
}
