// Package nethttp is shedkit's load-shedding middleware for net/http: one
// line in front of a handler rate limits each client per priority class
// (429), admits the rest through a shed.Limiter (503 when it is full), and
// releases each permit exactly once when the handler is done.
//
//	gradient, _ := limits.NewGradient(limits.GradientConfig{})
//	lim, _ := shed.New(shed.Config{Source: gradient, Classes: ...})
//	mw, err := nethttp.New(nethttp.Config{Limiter: lim, Routes: map[string]string{"/api/": "interactive"}})
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw(mux))
//
// The order of checks, the trust rules for headers, the responses and the
// mapping from response status to permit outcome are shared with the Echo
// middleware and documented in package shedhttp.
//
// # Permit lifecycle
//
// The permit is released when the handler returns, with the outcome of the
// final response status (shedhttp.DefaultOutcome, or Config.Outcome); as
// Ignored when the client went away (the request context was cancelled);
// as Dropped when the request context's deadline passed; and as Ignored
// when the handler panics, before the panic continues unchanged (the
// middleware does not recover it, so its stack is kept). A streaming
// response holds its permit until the handler returns. When the handler
// hijacks the connection (a WebSocket upgrade), the permit is released at
// the hijack, as Ignored, unless Config.HoldHijacked keeps it until the
// handler returns; see Long-lived requests.
//
// Admission happens when the request headers have arrived, so the permit
// also covers reading the request body and writing the response: a client
// that uploads or reads slowly holds a permit for as long as it does. Bound
// that time with http.Server's ReadTimeout (or ReadHeaderTimeout plus a
// per-handler read deadline through http.ResponseController) and
// WriteTimeout; the fault tests (fault_test.go) show a stalled upload, a
// slow reader and connection resets each releasing their permit.
//
// The handler's ResponseWriter is wrapped to see the status and the
// hijack: it implements exactly the optional interfaces of the server's
// writer (http.Flusher, http.Hijacker, io.ReaderFrom, ...) and Unwrap, so
// http.ResponseController works through it. net/http's HTTP/1 writer gets
// a wrapper kept in the request state; any other writer (HTTP/2, or one
// another middleware wrapped) is wrapped with github.com/felixge/httpsnoop.
//
// # Handler context
//
// The handler reaches its permit with Permit(r.Context()) (class, cost,
// queue wait) and corrects its cost with Reconcile, for example with the
// tokens an LLM call really used.
//
// # Cost
//
// An admitted HTTP/1 request costs under 1 us and 2 allocations on top of
// the handler (bench_test.go, BenchmarkOverheadHTTP1): the request state,
// which is also the handler's context and holds the writer wrapper (1),
// and the request copy that carries it (http.Request.WithContext, 1).
// Other writers (HTTP/2) add the httpsnoop wrapper with its status hook
// (4), and its hijack hook (3) when they can be hijacked. Rejections
// allocate nothing. See the benchmarks for the current figures.
package nethttp
