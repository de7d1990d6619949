package echo_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"

	echov4 "github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	shedecho "github.com/shedkit/shedkit/middleware/echo"
	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func config(o mwtest.Options) shedecho.Config {
	cfg := shedecho.Config{
		Options:  o.Options,
		Recorder: o.Recorder,
	}
	if o.Classify != nil {
		cfg.Classify = func(c echov4.Context, def shedhttp.Classification) shedhttp.Classification {
			return o.Classify(c.Request(), def)
		}
	}
	return cfg
}

// newEcho returns a quiet Echo instance.
func newEcho() *echov4.Echo {
	e := echov4.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	e.StdLogger = log.New(io.Discard, "", 0) // panics are expected
	return e
}

// shedEcho returns a quiet Echo instance with the middlewares before, then
// the shed middleware built from cfg.
func shedEcho(t testing.TB, cfg shedecho.Config, before ...echov4.MiddlewareFunc) *echov4.Echo {
	t.Helper()
	mw, err := shedecho.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	e.Use(before...)
	e.Use(mw)
	return e
}

// serve starts e on 127.0.0.1 and shuts it down at cleanup.
func serve(t testing.TB, e *echov4.Echo) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.Listener = ln
	done := make(chan error, 1)
	go func() { done <- e.Start("") }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Start returned %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

var adapter = mwtest.Adapter{
	Handler: func(t testing.TB, o mwtest.Options, app http.Handler) http.Handler {
		mw, err := shedecho.New(config(o))
		if err != nil {
			t.Fatal(err)
		}
		e := newEcho()
		if o.Outer != nil {
			e.Use(echov4.WrapMiddleware(o.Outer))
		}
		e.Use(mw)
		e.Any("/*", echov4.WrapHandler(app))
		return e
	},
	Serve:     func(t testing.TB, h http.Handler) string { return serve(t, h.(*echov4.Echo)) },
	Permit:    func(r *http.Request) *shed.Permit { return shedecho.Permit(echoContext(r)) },
	Reconcile: func(r *http.Request, n int64) error { return shedecho.Reconcile(echoContext(r), n) },
}

// echoContext gives the shared cases, which see only the request, an Echo
// context around it, the way a handler's c.Request() would.
func echoContext(r *http.Request) echov4.Context {
	return echov4.New().NewContext(r, nil)
}

// TestShared runs the cases that the net/http middleware passes too.
func TestShared(t *testing.T) { mwtest.Run(t, adapter) }
