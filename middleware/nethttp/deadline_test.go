package nethttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

// hop is one server on 127.0.0.1 behind the middleware, trusting the
// Connect-Timeout-Ms deadline header.
type hop struct {
	url  string
	lim  *shed.Limiter
	ran  atomic.Int64 // handler runs
	seen atomic.Int64 // ms left the last request announced, -1: none
}

func startHop(t *testing.T, app func(h *hop, w http.ResponseWriter, r *http.Request)) *hop {
	t.Helper()
	h := &hop{}
	var err error
	if h.lim, err = shed.New(shed.Config{Limit: 8, DeadlineMargin: 0.5}); err != nil {
		t.Fatal(err)
	}
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: h.lim, DeadlineHeader: retrybudget.ConnectTimeoutHeader}})
	if err != nil {
		t.Fatal(err)
	}
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ran.Add(1)
		app(h, w, r)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.seen.Store(-1)
		if v := r.Header.Get(retrybudget.ConnectTimeoutHeader); v != "" {
			n, _ := strconv.ParseInt(v, 10, 64)
			h.seen.Store(n)
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// TestDeadlineTwoHops: client -> gateway -> service, each hop behind the
// middleware and calling the next through retrybudget's Transport. The
// client has 200 ms; the service takes 500 ms (it learned that from one
// direct call), and turns away what has less than half of that left. The gateway, which knows nothing yet, admits the request
// and passes on what is left of the 200 ms; the service rejects it at once
// (deadline_too_short) and the client gets the 503 before its deadline,
// with its request never run by the service. Without propagation the
// service saw no deadline, ran the request, and the client gave up.
func TestDeadlineTwoHops(t *testing.T) {
	service := startHop(t, func(_ *hop, w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "ok")
	})
	out := mwtest.DeadlineClient(t, retrybudget.ConnectTimeoutHeader)
	gateway := startHop(t, func(_ *hop, w http.ResponseWriter, r *http.Request) {
		// The handler's context carries the client's deadline.
		resp, _, err := mwtest.Get(t, out, r.Context(), service.url+"/", nil)
		switch {
		case err != nil:
			w.WriteHeader(http.StatusGatewayTimeout)
		default:
			w.WriteHeader(resp.StatusCode)
		}
	})
	client := mwtest.DeadlineClient(t, retrybudget.ConnectTimeoutHeader)
	if resp, _, err := mwtest.Get(t, client, context.Background(), service.url+"/", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("learning call: %v %v", resp, err)
	}
	mwtest.WaitFor(t, "the learning call's release", func() bool { return service.lim.InFlight() == 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	resp, _, err := mwtest.Get(t, client, ctx, gateway.url+"/", nil)
	if err != nil {
		t.Fatalf("no answer before the client's deadline: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want the service's 503", resp.StatusCode)
	}
	if g, s := gateway.seen.Load(), service.seen.Load(); g <= 0 || g > 200 || s < 0 || s > g {
		t.Fatalf("announced %d ms to the gateway and %d ms to the service: want 0 <= service <= gateway <= 200", g, s)
	}
	snap := service.lim.Snapshot().Classes[0]
	if service.ran.Load() != 1 || snap.Rejected[shed.ReasonDeadline] != 1 || gateway.ran.Load() != 1 {
		t.Fatalf("service ran %d times with %d deadline rejections, gateway %d; want 1, 1, 1",
			service.ran.Load(), snap.Rejected[shed.ReasonDeadline], gateway.ran.Load())
	}
}
