package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestRejectThatWritesNothing: a Reject that only logs must not let
// net/http answer an empty 200 to a rejected request: a client must never
// read a success for work that did not run. The middleware then writes
// the default problem response itself.
func TestRejectThatWritesNothing(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	var logged atomic.Int32
	mw, err := nethttp.New(nethttp.Config{
		Options: shedhttp.Options{Limiter: l},
		Reject:  func(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) { logged.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	})
	srv := httptest.NewServer(mw(app))
	defer srv.Close()
	first := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	<-started
	resp, err := srv.Client().Get(srv.URL)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || logged.Load() != 1 {
		t.Errorf("rejected request answered %d (Reject called %d times), want 503 after one call", resp.StatusCode, logged.Load())
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
