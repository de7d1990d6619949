package echo_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

// TestOutcomePanicReleasesPermit: a panicking Outcome (user code, run
// after the handler returned) still releases the request's permit: the
// recovered server lives on, and once idle it admits the next request.
func TestOutcomePanicReleasesPermit(t *testing.T) {
	l := twoClasses(t, 2)
	e := shedEcho(t, shedecho.Config{Options: shedhttp.Options{
		Limiter: l,
		Outcome: func(r *http.Request, status int) shed.Outcome {
			if status == http.StatusTeapot {
				var m map[string]int
				m["boom"]++ // a bug in the user's mapping, on a rare status
			}
			return shedhttp.DefaultOutcome(r, status)
		},
	}}, middleware.Recover())
	e.GET("/teapot", func(c echov4.Context) error { return c.NoContent(http.StatusTeapot) })
	e.GET("/", func(c echov4.Context) error { return c.NoContent(http.StatusOK) })
	for range 2 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/teapot", nil))
	}
	if n := l.InFlight(); n != 0 {
		t.Errorf("in flight %d after every handler returned, want 0", n)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 {
		t.Errorf("idle server answers %d, want 200: the permits leaked", rec.Code)
	}
}
