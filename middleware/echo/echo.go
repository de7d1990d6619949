package echo

import (
	"net/http"

	echov4 "github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Config configures the middleware, in Echo's conventions. Only Limiter
// is required; zero fields take the documented defaults.
type Config struct {
	// Skipper defines a function to skip the middleware. Default: skip
	// nothing (besides SkipPaths).
	Skipper middleware.Skipper

	// Options holds the configuration every shedkit HTTP middleware
	// shares (Limiter, Routes, RateLimits, SkipPaths, Outcome...); its
	// fields are promoted: cfg.Limiter.
	shedhttp.Options

	// Classify, when set, refines the default classification (computed
	// from Routes, DefaultClass, ClassHeader and KeyHeader, passed as def):
	// for example it sets the cost from the request, or the key from an
	// authenticated identity. It runs on every request that is not
	// skipped, before rate limiting, and must be fast.
	Classify func(c echov4.Context, def shedhttp.Classification) shedhttp.Classification
	// RejectHandler writes the response to a rejected request, after the
	// middleware set Retry-After and the no-retry header; its error is
	// returned up the chain. When it returns nil without writing, the
	// default response is written after it. What it writes, through
	// c.Response() or its Writer, is all the client gets: nothing is
	// written on top, and a body or Flush without a status goes out with
	// the rejection's status (Rejection.Status), not an implicit 200.
	// Default: an RFC 9457 problem body written with
	// shedhttp.WriteProblem, and a nil error.
	RejectHandler func(c echov4.Context, rej shedhttp.Rejection) error

	// Recorder, when set, records a sample of the requests (class, cost,
	// decision, queue wait, latency, outcome, status, and the hash of the
	// rate-limit key when there is one, Recorder.KeyHash: salted when
	// record.Config.KeySalt is set, never the key itself) and the
	// limiter's limit over time, for shedsim fit, as the net/http
	// middleware's does (nethttp.Config.Recorder). New makes it watch
	// Limiter and tells it where the keys come from
	// (Recorder.SetKeySource: KeyHeader, else the client's address,
	// Context.RealIP; with Classify, as the requests show it: those while
	// it keeps the keys, "classify" if it replaces them, none if it does
	// both). Only sampled
	// requests read the clock; the others cost a few atomic adds. Skipped
	// requests are not recorded. Start and Stop it yourself (see package
	// record). Off (nil) by default.
	Recorder *record.Recorder
}

// New returns the middleware for cfg, or an error naming the invalid field
// (wrapping shedhttp.ErrInvalidConfig). Unlike Echo's own XxxWithConfig
// functions it does not panic on a bad configuration.
func New(cfg Config) (echov4.MiddlewareFunc, error) {
	e, err := core.New(cfg.Options)
	if err != nil {
		return nil, err
	}
	skipper := cfg.Skipper
	if skipper == nil {
		skipper = middleware.DefaultSkipper
	}
	m := &mw{e: e, skipper: skipper, classify: cfg.Classify, reject: cfg.RejectHandler, needKey: e.NeedsKey() || cfg.Classify != nil}
	if err := e.SetRecorder(cfg.Recorder, cfg.Classify != nil); err != nil {
		return nil, err
	}
	return func(next echov4.HandlerFunc) echov4.HandlerFunc {
		return func(c echov4.Context) error { return m.serve(c, next) }
	}, nil
}

// mw is the middleware New returns.
type mw struct {
	e        *core.Engine
	skipper  middleware.Skipper
	classify func(echov4.Context, shedhttp.Classification) shedhttp.Classification
	// reject is the RejectHandler; nil: the default problem response.
	reject  func(echov4.Context, shedhttp.Rejection) error
	needKey bool
}

// serve classifies and admits the request c serves, then runs next.
func (m *mw) serve(c echov4.Context, next echov4.HandlerFunc) error {
	e, r := m.e, c.Request()
	if m.skipper(c) || e.Skip(r) {
		return next(c)
	}
	if rej, tooLarge := e.CheckBody(r, c.Path()); tooLarge {
		return m.rejectWith(c, rej)
	}
	cl := e.Classify(r, c.Path())
	if cl.Key == "" && m.needKey {
		cl.Key = e.AddrKey(c.RealIP())
	}
	if m.classify != nil {
		key := cl.Key
		cl = m.classify(c, cl)
		e.Reclassified(key, cl.Key)
	}
	rq := e.RecBegin(cl)
	st, rej := e.Admit(r, cl)
	if st == nil {
		e.RecRejected(&rq, rej)
		return m.rejectWith(c, rej)
	}
	return m.admitted(c, next, st, &rq)
}

// admitted runs next for the admitted request c serves, and releases
// (and records) its permit on every path.
func (m *mw) admitted(c echov4.Context, next echov4.HandlerFunc, st *core.State, rq *core.Recording) error {
	e, r := m.e, c.Request()
	r2 := r.WithContext(st)
	if r.Body != nil && r.Body != http.NoBody {
		body := r.Body
		if n := e.MaxBody(); n > 0 {
			body = http.MaxBytesReader(c.Response().Writer, body, n)
		}
		// Time blocked reading the body is the client's, not the
		// service's: the release must not count it.
		r2.Body = st.WatchBody(body)
	}
	c.SetRequest(r2)
	// Echo's Response records the status itself; the wrapper is there to
	// see a hijack (Response.Hijack goes through it) and the header that
	// Response.Flush sends past Echo's record: WrapWriter records the
	// status, without recordStatus, only over writers through which a
	// flush can send it (net/http's, an outer Gzip's, which would hide
	// it, or one that unwraps to a writer that can flush).
	res := c.Response()
	w := res.Writer
	res.Writer = st.WrapWriter(w, false)
	// Release on every path. Without recover, a panic keeps its original
	// stack: the deferred call releases the permit and the panic goes on
	// (to Echo's Recover middleware, if any).
	returned := false
	defer func() {
		if !returned {
			res.Writer = w
			settle(res, st)
			actual := st.Permit.Cost()
			e.ReleasePanicked(st)
			e.RecDone(rq, st, actual, shed.Ignored, 0)
		}
	}()
	err := next(c)
	returned = true
	res.Writer = w
	settle(res, st)
	c.SetRequest(r)
	actual := st.Permit.Cost()
	code := status(c, st, err)
	o := e.Release(st, r, code)
	e.RecDone(rq, st, actual, o, core.SentStatus(code))
	return err
}

// settle brings Echo's record of the response in line with what went out,
// before Echo's error handler reads it:
//   - a final header the wrapper saw go out past Echo's Response
//     (Response.Flush before any write sends net/http's implicit 200
//     without committing the Response) commits it, so that the error
//     handler, for an error or a panic after it, writes nothing on top of
//     the response the client is reading;
//   - an informational 1xx alone (103 Early Hints), which Echo counts as
//     committing the Response, does not: the final status is still to
//     come, and the error handler must write it, or net/http would send
//     an implicit 200 for a request that failed.
func settle(res *echov4.Response, st *core.State) {
	switch {
	case st.Status != 0:
		if !res.Committed || informational(res.Status) {
			res.Status, res.Committed = st.Status, true
		}
	case res.Committed && informational(res.Status) && res.Size == 0:
		res.Status, res.Committed = http.StatusOK, false
	}
}

// informational reports whether code is a 1xx that a final status follows
// (101 Switching Protocols ends the response).
func informational(code int) bool {
	return code >= 100 && code < 200 && code != http.StatusSwitchingProtocols
}

// ToMiddleware is New(cfg), for Echo's Config.ToMiddleware convention.
func (cfg Config) ToMiddleware() (echov4.MiddlewareFunc, error) { return New(cfg) }

// status is the response status of a request whose handler returned err:
// what was written, else what Echo's default error handler will write.
func status(c echov4.Context, st *core.State, err error) int {
	if st.Status != 0 {
		// What the wrapper saw go out (net/http's writers, and those
		// that can flush). It differs from Echo's record when the
		// handler went past Echo's Response: Response.Flush sends the
		// implicit 200 but does not commit it, and an HTTPError
		// returned after it can no longer be sent.
		return st.Status
	}
	res := c.Response()
	if informational(res.Status) {
		// settle leaves a 1xx committed only when a body went out
		// after it, under net/http's implicit 200.
		return http.StatusOK
	}
	if err == nil || res.Committed {
		return res.Status
	}
	// As Echo's DefaultHTTPErrorHandler decides it.
	if he, ok := err.(*echov4.HTTPError); ok {
		if in, ok := he.Internal.(*echov4.HTTPError); ok {
			return in.Code
		}
		return he.Code
	}
	return http.StatusInternalServerError
}

func writeProblem(c echov4.Context, rej shedhttp.Rejection) error {
	shedhttp.WriteProblem(c.Response(), c.Request(), rej)
	return nil
}

// Permit returns the permit of the request c serves, or nil when the
// request was skipped. The handler may read its class, cost and queue
// wait, Reconcile its cost, or Release it early (the middleware's own
// release then does nothing). Use it on the handler's goroutine, or
// synchronize: the middleware releases the permit when the handler
// returns. Code that only has the request context can use
// nethttp.Permit(c.Request().Context()), which is the same.
func Permit(c echov4.Context) *shed.Permit { return core.PermitFrom(c.Request().Context()) }

// Reconcile replaces the cost the request reserved with its actual cost
// (for example the tokens an LLM call really used). It returns
// shedhttp.ErrNoPermit when the request has no permit, shed.ErrReleased
// after the permit was released.
func Reconcile(c echov4.Context, actual int64) error {
	return core.Reconcile(c.Request().Context(), actual)
}
