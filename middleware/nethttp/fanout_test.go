package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
	"github.com/shedkit/shedkit/shed/fanout"
)

// TestFanOutUnderOwnLimiter is the README's fan-out on 127.0.0.1: 4
// requests fill the middleware's limiter of 4, and each handler fans out 8
// items under that same limiter. The request's permit reaches fanout
// through the context, so its items run on it: all 32 succeed. Before,
// each task waited for a second permit from the pool the requests held,
// and all 32 failed with queue_timeout.
//
// The 8 items of a request start at once and take the request's permit
// one after the other, so the last waits for the 7 before it. With the
// README's PermitWait of 100 ms the test depended on how fast 7 tasks of
// 1 ms run on a loaded machine under the race detector; 10 s is reached
// only by a task that never gets the permit.
func TestFanOutUnderOwnLimiter(t *testing.T) {
	lim, err := shed.New(shed.Config{Limit: 4, Classes: []shed.ClassConfig{{Name: "api", QueueDepth: 64, MaxWait: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: lim}})
	if err != nil {
		t.Fatal(err)
	}
	var failed, ok atomic.Int64
	entered := make(chan struct{}, 4)
	start := make(chan struct{})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-start // all 4 requests hold their permits: the limiter is full
		err := fanout.Run(r.Context(), slices.Values(make([]int, 8)),
			func(ctx context.Context, in int) (int, error) { time.Sleep(time.Millisecond); return in, nil },
			fanout.Config[int]{Bound: 8, Limiter: lim, PermitWait: 10 * time.Second, MaxItems: 10_000},
			func(res fanout.Result[int]) error {
				if res.Err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
				return nil
			})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	for range 4 {
		<-entered
	}
	close(start)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() != 32 {
		t.Fatalf("%d items failed, %d succeeded; want 0 and 32", failed.Load(), ok.Load())
	}
}
