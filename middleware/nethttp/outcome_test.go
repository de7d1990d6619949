package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestOutcomePanicReleasesPermit: a panicking Outcome (user code, run
// after the handler returned) still releases the request's permit: the
// recovered server lives on, and once idle it admits the next request.
func TestOutcomePanicReleasesPermit(t *testing.T) {
	l := newLimiter(t, 2)
	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{
		Limiter: l,
		Outcome: func(r *http.Request, status int) shed.Outcome {
			if status == http.StatusTeapot {
				var m map[string]int
				m["boom"]++ // a bug in the user's mapping, on a rare status
			}
			return shedhttp.DefaultOutcome(r, status)
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/teapot" {
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	for range 2 {
		func() {
			defer func() { _ = recover() }() // as net/http's conn.serve does
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/teapot", nil))
		}()
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("in flight %d after every handler returned, want 0", n)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 {
		t.Errorf("idle server answers %d, want 200: the permits leaked", rec.Code)
	}
}
