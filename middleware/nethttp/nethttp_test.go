package nethttp_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/shedkit/shedkit/middleware/internal/mwtest"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/shed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func config(o mwtest.Options) nethttp.Config {
	return nethttp.Config{
		Options:  o.Options,
		Classify: o.Classify,
		Recorder: o.Recorder,
	}
}

var adapter = mwtest.Adapter{
	Handler: func(t testing.TB, o mwtest.Options, app http.Handler) http.Handler {
		mw, err := nethttp.New(config(o))
		if err != nil {
			t.Fatal(err)
		}
		h := mw(app)
		if o.Outer != nil {
			h = o.Outer(h)
		}
		return h
	},
	Serve: func(t testing.TB, h http.Handler) string {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panics are expected
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL
	},
	Permit:    func(r *http.Request) *shed.Permit { return nethttp.Permit(r.Context()) },
	Reconcile: func(r *http.Request, n int64) error { return nethttp.Reconcile(r.Context(), n) },
}

// TestShared runs the cases that the Echo middleware passes too.
func TestShared(t *testing.T) { mwtest.Run(t, adapter) }
