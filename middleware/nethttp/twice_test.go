package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestMountedTwice: two middlewares on one limiter around one handler (a
// careless integrator's nesting) take one permit per request: at a limit
// of 1 the inner one would otherwise wait for the permit the request
// itself holds, and an idle server would answer 503.
func TestMountedTwice(t *testing.T) {
	l, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "default", QueueDepth: 1, MaxWait: 200 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	mw := func() func(http.Handler) http.Handler {
		m, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{Limiter: l}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(mw()(mw()(app)))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("idle server: %d, want 200", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c := l.Snapshot().Classes[0]; c.Admitted != 1 || l.InFlight() != 0 {
		t.Errorf("admitted %d, in flight %d, want 1 and 0", c.Admitted, l.InFlight())
	}
}
