package echo_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"time"

	echov4 "github.com/labstack/echo/v4"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

func ExampleNew() {
	lim, err := shed.New(shed.Config{
		Limit: 2, // in production, an adaptive Source from package limits
		Classes: []shed.ClassConfig{
			{Name: "interactive", Protected: 0.5, QueueDepth: 50, MaxWait: 100 * time.Millisecond},
			{Name: "batch"},
		},
	})
	if err != nil {
		panic(err)
	}
	mw, err := shedecho.New(shedecho.Config{
		Options: shedhttp.Options{
			Limiter:    lim,
			Routes:     map[string]string{"/users/:id": "interactive", "/reports/": "batch"},
			RateLimits: map[string]shedhttp.RateLimit{"batch": {Rate: 10, Burst: 20}},
			SkipPaths:  []string{"/healthz"},
		},
	})
	if err != nil {
		panic(err)
	}
	e := echov4.New()
	e.Use(mw)
	e.GET("/users/:id", func(c echov4.Context) error {
		p := shedecho.Permit(c)
		return c.String(200, fmt.Sprintf("user %s, class %s", c.Param("id"), lim.ClassName(p.Class())))
	})
	e.GET("/reports/:name", func(c echov4.Context) error { return c.String(200, "report") })
	// e.Start(":8080")

	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/users/7", nil))
	fmt.Println(w.Code, w.Body)

	// With every slot taken by batch work, a new report is shed.
	a, _ := lim.TryAcquire(shed.Request{Class: 1})
	b, _ := lim.TryAcquire(shed.Request{Class: 1})
	w = httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/reports/q3", nil))
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
	a.Release(shed.Success)
	b.Release(shed.Success)
	// Output:
	// 200 user 7, class interactive
	// 503 Retry-After: 1 application/problem+json
}

// Config.Recorder records a sample of the requests for shedsim fit. In a
// service, record to a directory (record.Config.Dir), Start the recorder
// and Stop it at shutdown; here a buffer holds the recording, read back
// below.
func ExampleConfig_recorder() {
	lim, err := shed.New(shed.Config{Limit: 1, Classes: []shed.ClassConfig{{Name: "interactive"}, {Name: "batch"}}})
	if err != nil {
		panic(err)
	}
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1}) // -1: every request, for the example
	if err != nil {
		panic(err)
	}
	mw, err := shedecho.New(shedecho.Config{
		Options: shedhttp.Options{
			Limiter:   lim,
			Routes:    map[string]string{"/users/:id": "interactive"},
			KeyHeader: "X-Tenant", // trusted: set by the proxy
		},
		Recorder: rec,
	})
	if err != nil {
		panic(err)
	}
	e := echov4.New()
	e.Use(mw)
	e.GET("/users/:id", func(c echov4.Context) error { return c.String(200, "user") })
	e.GET("/reports/:name", func(c echov4.Context) error { return c.String(200, "report") })

	req := httptest.NewRequest("GET", "/users/7", nil)
	req.Header.Set("X-Tenant", "acme")
	e.ServeHTTP(httptest.NewRecorder(), req)
	held, _ := lim.TryAcquire(shed.Request{})
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/reports/q3", nil)) // over the limit
	held.Release(shed.Ignored)
	if err := rec.Stop(); err != nil {
		panic(err)
	}

	rd := record.NewReader(&buf)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if r.Kind == record.KindRequest {
			h, _ := rd.Header()
			fmt.Println(r.ClassName, r.Decision, r.Status, "keys from", h.KeySource)
		}
	}
	// Output:
	// interactive admit 200 keys from header:X-Tenant
	// batch reject 503 keys from header:X-Tenant
}
