// Package echo is shedkit's load-shedding middleware for Echo v4: it rate
// limits each client per priority class (429, for the classes RateLimits
// names), admits the rest through a shed.Limiter (503 when it is full), and
// releases each permit exactly once when the handler is done. Its package
// name clashes with Echo's, so import it under another name:
//
//	import shedecho "github.com/shedkit/shedkit/middleware/echo"
//
//	mw, err := shedecho.New(shedecho.Config{Options: shedhttp.Options{
//		Limiter: lim,
//		Routes:  map[string]string{"/users/:id": "interactive"},
//	}})
//	if err != nil { ... }
//	e.Use(mw)
//
// It behaves like the net/http middleware (package nethttp): both are
// built on the same core and pass the same table of tests. The order of
// checks, the trust rules for headers, the responses and the mapping from
// response status to permit outcome are documented in package shedhttp.
//
// # Echo specifics
//
//   - Config.Skipper follows Echo's convention; SkipPaths is a shortcut for
//     health and metrics endpoints.
//   - A request holds one permit of a limiter: mounted twice on a route
//     for the same limiter (Echo.Use, and again on a group or the route),
//     the inner middleware skips an admitted request (see package
//     shedhttp, Order of checks).
//   - Requests Echo routes to no handler (404, and 405 for a known path
//     with another method) pass through the middleware added with
//     Echo.Use like any other: they are rate limited and admitted, and
//     their 4xx releases the permit as Ignored. A 405's Context.Path is
//     the pattern of the route its path matched, so it takes that route's
//     class. A Skipper that skips an empty Context.Path (no route
//     matched the path at all) keeps the 404s out.
//   - Routes match the route pattern (Context.Path, for example
//     "/users/:id") when the middleware runs after routing (Echo.Use, or a
//     group), then path prefixes. Prefixes and SkipPaths match the path
//     Echo's router matches (echo.GetPath: the raw path when the client
//     percent-encoded it), so that /%68ealthz, which Echo does not route
//     to /healthz, is not skipped as /healthz.
//   - The default rate-limit key is Context.RealIP, which honours
//     Echo.IPExtractor: configure it to trust your proxies' forwarding
//     headers, not the client's.
//   - When the handler returns an error without writing a response, the
//     outcome is decided from the status Echo's default error handler will
//     write (the *echo.HTTPError's code, else 500). A header that went
//     out without Echo's Response committing it (Response.Flush before
//     any write sends net/http's implicit 200) keeps the status the
//     client got, over HTTP/1, HTTP/2 and h2c (Echo.StartH2CServer): an
//     error returned after it (or a panic) can no longer change the
//     response, nor the outcome, and the middleware marks the Response
//     committed so that Echo's error handler writes nothing after it.
//     The same holds under a writer that an outer middleware put in
//     place of net/http's, registered with Echo.Use before this one:
//     Echo's Gzip (or any writer with Flush that buffers, whose header
//     the middleware records as the handler sends it through), or a
//     writer without Flush that unwraps to one that can flush (the Go
//     1.20 style: Unwrap alone, or with Hijack, ReadFrom...).
//     Registered inside this middleware, Gzip writes to the writer the
//     middleware wraps, which sees the header go out. Either way, when
//     the handler flushed before writing any body, Gzip leaves the gzip
//     stream unfinished: the client reads the 200, then a body that ends
//     early. Not seen: a flush down the Unwrap chain of an outer writer
//     that has Push but no Flush, over HTTP/2 (the middleware keeps its
//     Push); and writes to c.Response().Writer, past Echo's Response,
//     when that is neither net/http's writer nor one that can flush
//     (itself or down its Unwrap chain): the returned error decides then.
//   - An informational status (103 Early Hints) is not a final one. Echo's
//     Response marks itself committed when it sends one; when the
//     handler then returns an error (or panics) without writing, the
//     middleware undoes that, so that Echo's error handler sends the
//     error's status, and the permit is released with it, instead of
//     net/http's implicit 200. Echo also refuses a final status written
//     through its Response after a 1xx (c.JSON(404, ...) after
//     c.Response().WriteHeader(103) goes out as 200, and the permit
//     follows that 200): send the 1xx past the Response,
//     c.Response().Writer.WriteHeader(http.StatusEarlyHints), and the
//     final status goes out.
//   - A panic releases the permit (Ignored) and goes on to Echo's Recover
//     middleware, if any, with its stack unchanged.
//   - Bound a request's time with Echo's ContextTimeout (or
//     DeadlineHeader), not the deprecated Timeout middleware: mounted
//     inside this one, Timeout answers 503 and returns while the handler
//     goes on in its goroutine, so the permit is released (Dropped) and
//     the work it bounded runs on unbounded; outside it, the permit is
//     held until the handler really returns.
//   - The permit also covers reading the request body and writing the
//     response: bound slow clients with the http.Server's ReadTimeout and
//     WriteTimeout (Echo.Server). See Long-lived requests.
//   - Rejections are written directly (RFC 9457 problem body) and the
//     middleware returns nil; RejectHandler may instead return an error for
//     Echo's error handler, which then writes nothing on top of a
//     response the RejectHandler wrote, even past c.Response() (to its
//     Writer).
//
// # Long-lived requests
//
// A permit is taken when the request headers have arrived and covers the
// request's work until the handler returns, hijacks the connection, or
// releases the permit itself (Permit(c).Release; the middleware's release
// then does nothing). What that means for requests that last:
//
//   - Streaming responses (c.Stream, large downloads, Response.Flush):
//     the permit is held until the handler returns, including the time
//     spent writing to a client that reads slowly, and that time is part
//     of the latency sample. Bound it with Echo.Server.WriteTimeout or,
//     per request, http.ResponseController.SetWriteDeadline. A handler
//     whose costly part ends before it streams can release early:
//     Permit(c).Release(shed.Success) once the data is ready.
//   - Server-sent events and other endless streams: the handler returns
//     when the client leaves, so the permit would be held for the
//     stream's life, and that duration is no latency. Release it once the
//     stream is set up, with Permit(c).Release(shed.Ignored), so that the
//     limit bounds the set-up and open streams take no slot; or skip the
//     route (Skipper, SkipPaths) and bound streams otherwise.
//   - WebSockets and other hijacked connections: the permit covers the
//     request up to the upgrade and is released, as Ignored, when the
//     handler hijacks the connection (c.Response().Hijack, or
//     http.ResponseController on the Response or its Writer, as
//     gorilla/websocket and coder/websocket do), so idle connections hold
//     no slot. Config.HoldHijacked keeps it until the handler returns, for
//     the connection's life, when the limit should bound open
//     connections; size the limit (or a class) for them then. WebSockets
//     over HTTP/2 (extended CONNECT) are not hijacked: treat them as
//     streams.
//   - Slow uploads: the permit covers reading the request body, so a
//     client that sends slowly holds a slot while it does. Bound that
//     with Echo.Server.ReadTimeout and MaxBodyBytes. The time the handler
//     spends blocked reading the body is measured and does not count
//     against the adaptive limit: a request that missed its deadline only
//     because its body came slowly, or that spent at least half of its
//     time waiting for it, is released Ignored (see package shedhttp,
//     Outcomes).
//
// # Handler context
//
// The handler reaches its permit with Permit(c) (class, cost, queue wait)
// and corrects its cost with Reconcile(c, actual). The permit is also in
// c.Request().Context(), for code that only sees the context.
//
// # Recording
//
// Config.Recorder (package record) records a sample of the requests for
// shedsim fit, as the net/http middleware's does and with the same
// records: class, estimated and actual cost, decision, queue wait,
// latency, outcome, the status Echo sends (for a returned error, the one
// its default error handler writes; none after a panic), and the hash of
// the rate-limit key. The recording's header says where the keys came
// from: KeyHeader, the client's address (Context.RealIP), or Classify
// when it replaces the keys.
// Only sampled requests read the clock; the others cost a few atomic adds
// and no allocation (BenchmarkRecorderOverhead reports the ratio to the
// same middleware without a recorder).
//
// # Cost
//
// An admitted request costs about 0.7 us and 3 allocations on top of the
// handler (bench_test.go): the request state, which is also the request's
// context (1), the request copy that carries it (1), and the closure that
// Echo builds for every middleware added with Echo.Use on every request
// (1). Echo's Response already records the status; to see a hijack, and
// a header that Response.Flush sent, the middleware wraps Response.Writer
// for the request's duration, with a wrapper kept in the request state
// for net/http's HTTP/1 and HTTP/2 writers (no allocation), with
// github.com/felixge/httpsnoop for any other writer that can be hijacked
// or flushed (an outer Gzip's: 9 allocations more than its own, for the
// hooks that record the status), and with a Hijack or a FlushError of its
// own (1 or 2 allocations) for a writer that only unwraps to one that
// can. Rejections allocate nothing but Echo's
// middleware closure, and, with a RejectHandler, the writer that sees
// what it writes (1).
package echo
