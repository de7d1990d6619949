package nethttp

import (
	"context"
	"net/http"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Config configures the middleware. Only Limiter is required; zero fields
// take the documented defaults.
type Config struct {
	// Options holds the configuration every shedkit HTTP middleware
	// shares (Limiter, Routes, RateLimits, SkipPaths, Outcome...); its
	// fields are promoted: cfg.Limiter.
	shedhttp.Options

	// Classify, when set, refines the default classification (computed
	// from Routes, DefaultClass, ClassHeader and KeyHeader, passed as def):
	// for example it sets the cost from the request, or the key from an
	// authenticated identity. It runs on every request that is not
	// skipped, before rate limiting, and must be fast and safe for
	// concurrent use.
	Classify func(r *http.Request, def shedhttp.Classification) shedhttp.Classification
	// Skip, when set, bypasses the middleware for the requests it returns
	// true for, in addition to SkipPaths.
	Skip func(r *http.Request) bool
	// Reject writes the response to a rejected request, after the
	// middleware set Retry-After and the no-retry header. Default
	// shedhttp.WriteProblem: an RFC 9457 problem body, which the
	// middleware also writes when Reject wrote nothing (neither
	// WriteHeader nor Write), rather than let net/http answer 200.
	Reject shedhttp.RejectFunc

	// Recorder, when set, records a sample of the requests (class, cost,
	// decision, queue wait, latency, outcome, and the hash of the
	// rate-limit key when there is one, Recorder.KeyHash: salted when
	// record.Config.KeySalt is set, never the key itself) and the
	// limiter's limit over time, for shedsim fit. New makes it watch
	// Limiter and tells it where the keys come from
	// (Recorder.SetKeySource: KeyHeader, else the client's address; with
	// Classify, as the requests show it: those while it keeps the keys,
	// "classify" if it replaces them, none if it does both), so that
	// shedsim tune can set the same KeyHeader. Only sampled requests read the clock; the others
	// cost a few atomic adds. Start and Stop it yourself (see package
	// record). Off (nil) by default.
	Recorder *record.Recorder
}

// New returns the middleware for cfg, or an error naming the invalid field
// (wrapping shedhttp.ErrInvalidConfig).
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	e, err := core.New(cfg.Options)
	if err != nil {
		return nil, err
	}
	reject := cfg.Reject
	if reject == nil {
		reject = shedhttp.WriteProblem
	}
	if err := e.SetRecorder(cfg.Recorder, cfg.Classify != nil); err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			next = http.NotFoundHandler()
		}
		return &handler{
			e:            e,
			next:         next,
			classify:     cfg.Classify,
			skip:         cfg.Skip,
			reject:       reject,
			customReject: cfg.Reject != nil,
			needKey:      e.NeedsKey() || cfg.Classify != nil,
		}
	}, nil
}

type handler struct {
	e        *core.Engine
	next     http.Handler
	classify func(*http.Request, shedhttp.Classification) shedhttp.Classification
	skip     func(*http.Request) bool
	reject   shedhttp.RejectFunc
	// customReject: Reject is the user's, which may write nothing.
	customReject bool
	needKey      bool
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := h.e
	if e.Skip(r) || (h.skip != nil && h.skip(r)) {
		h.next.ServeHTTP(w, r)
		return
	}
	if rej, tooLarge := e.CheckBody(r, ""); tooLarge {
		h.rejectWith(w, r, rej)
		return
	}
	cl := e.Classify(r, "")
	if cl.Key == "" && h.needKey {
		cl.Key = e.AddrKey(core.RemoteHost(r.RemoteAddr))
	}
	if h.classify != nil {
		key := cl.Key
		cl = h.classify(r, cl)
		e.Reclassified(key, cl.Key)
	}
	rq := e.RecBegin(cl)
	st, rej := e.Admit(r, cl)
	if st == nil {
		e.RecRejected(&rq, rej)
		h.rejectWith(w, r, rej)
		return
	}

	r2 := r.WithContext(st)
	if r.Body != nil && r.Body != http.NoBody {
		body := r.Body
		if n := e.MaxBody(); n > 0 {
			body = http.MaxBytesReader(w, body, n)
		}
		// Time blocked reading the body is the client's, not the
		// service's: the release must not count it (see core.clientBound).
		r2.Body = st.WatchBody(body)
	}
	// The wrapper keeps every optional interface of w (Flusher, Hijacker,
	// ReaderFrom, ...) and Unwrap for http.ResponseController; it records
	// the final status and releases the permit at a hijack.
	ww := st.WrapWriter(w, true)
	// Release on every path. Without recover, a panic keeps its original
	// stack: the deferred call releases the permit and the panic goes on.
	returned := false
	defer func() {
		if !returned {
			actual := st.Permit.Cost()
			e.ReleasePanicked(st)
			e.RecDone(&rq, st, actual, shed.Ignored, 0)
		}
	}()
	h.next.ServeHTTP(ww, r2)
	returned = true
	actual := st.Permit.Cost()
	o := e.Release(st, r, st.Status)
	e.RecDone(&rq, st, actual, o, core.SentStatus(st.Status))
}

func (h *handler) rejectWith(w http.ResponseWriter, r *http.Request, rej shedhttp.Rejection) {
	h.e.SetRejectHeaders(w.Header(), rej)
	if !h.customReject {
		h.reject(w, r, rej)
		return
	}
	// A Reject that wrote nothing (one that only logs) would let net/http
	// answer an empty 200: a client must never read a success for work
	// that did not run.
	ww := &wroteWriter{ResponseWriter: w}
	h.reject(ww, r, rej)
	if !ww.wrote {
		shedhttp.WriteProblem(w, r, rej)
	}
}

// wroteWriter tells whether a custom Reject wrote a response.
type wroteWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *wroteWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *wroteWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *wroteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Permit returns the permit of the request that ctx belongs to, or nil
// when the request was skipped or ctx is not a request's. The handler may
// read its class, cost and queue wait, Reconcile its cost, or Release it
// early (the middleware's own release then does nothing). Use it on the
// handler's goroutine, or synchronize: the middleware releases the permit
// when the handler returns.
func Permit(ctx context.Context) *shed.Permit { return core.PermitFrom(ctx) }

// Reconcile replaces the cost the request reserved with its actual cost
// (for example the tokens an LLM call really used). It returns
// shedhttp.ErrNoPermit when ctx carries no permit, shed.ErrReleased after
// the permit was released.
func Reconcile(ctx context.Context, actual int64) error { return core.Reconcile(ctx, actual) }
