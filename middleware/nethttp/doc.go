// Package nethttp is shedkit's load-shedding middleware for net/http: one
// line in front of a handler rate limits each client per priority class
// (429, for the classes RateLimits names), admits the rest through a
// shed.Limiter (503 when it is full), and releases each permit exactly once
// when the handler is done.
//
//	gradient, _ := limits.NewGradient(limits.GradientConfig{})
//	lim, _ := shed.New(shed.Config{Source: gradient, Classes: ...})
//	mw, err := nethttp.New(nethttp.Config{Options: shedhttp.Options{
//		Limiter: lim,
//		Routes:  map[string]string{"/api/": "interactive"},
//	}})
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
// as Dropped when the request context's deadline passed (Ignored when it
// passed only because the client sent its body slowly); and as Ignored
// when the handler panics, before the panic continues unchanged (the
// middleware does not recover it, so its stack is kept). When the handler
// hijacks the connection, the permit is released at the hijack, as
// Ignored.
//
// The handler's ResponseWriter is wrapped to see the status and the
// hijack: it implements exactly the optional interfaces of the server's
// writer (http.Flusher, http.Hijacker, io.ReaderFrom, ...) and Unwrap, so
// http.ResponseController works through it. net/http's HTTP/1 and HTTP/2
// writers get a wrapper kept in the request state; any other writer (one
// another middleware wrapped, or another server's) is wrapped with
// github.com/felixge/httpsnoop. When that writer has no Flush (or no
// Hijack) and http.ResponseController would flush (or hijack) a writer
// down its Unwrap chain, past the middleware (an outer writer in the Go
// 1.20 style, with Unwrap alone), the handler's writer gets a FlushError
// (and a Hijack) of its own: the 200 such a flush sends is the status,
// and a WriteHeader(503) after it does not release the permit as
// Dropped. That FlushError returns the error of the writer's own, if it
// has one; over HTTP/1, where Push can only fail, the wrapper drops the
// writer's Push. Not seen: such a flush past an outer writer that has
// Push, over HTTP/2, which the wrapper keeps.
//
// # Long-lived requests
//
// A permit is taken when the request headers have arrived and covers the
// request's work until the handler returns, hijacks the connection, or
// releases the permit itself (Permit(r.Context()).Release; the
// middleware's release then does nothing). What that means for requests
// that last:
//
//   - Streaming responses (large downloads, flushed output): the permit is
//     held until the handler returns, including the time spent writing to
//     a client that reads slowly, and that time is part of the latency
//     sample. Bound it with http.Server.WriteTimeout or, per request,
//     http.ResponseController.SetWriteDeadline. A handler whose costly
//     part ends before it streams can release early:
//     Permit(r.Context()).Release(shed.Success) once the data is ready.
//   - Server-sent events and other endless streams: the handler returns
//     when the client leaves, so the permit would be held for the
//     stream's life, and that duration is no latency. Release it once the
//     stream is set up, with Permit(r.Context()).Release(shed.Ignored), so
//     that the limit bounds the set-up and open streams take no slot; or
//     skip the endpoint (SkipPaths, Skip) and bound streams otherwise.
//   - WebSockets and other hijacked connections: the permit covers the
//     request up to the upgrade and is released, as Ignored, when the
//     handler hijacks the connection (through the ResponseWriter or
//     http.ResponseController), so idle connections hold no slot.
//     Config.HoldHijacked keeps it until the handler returns, for the
//     connection's life, when the limit should bound open connections;
//     size the limit (or a class) for them then. A hijack is seen when it
//     goes through the writer the middleware gave the handler, not when
//     code reaches the connection through another path. WebSockets over
//     HTTP/2 (extended CONNECT) are not hijacked: treat them as streams.
//   - Slow uploads: the permit covers reading the request body, so a
//     client that sends slowly holds a slot while it does. Bound that
//     with http.Server.ReadTimeout (or ReadHeaderTimeout plus a
//     per-request http.ResponseController.SetReadDeadline) and
//     MaxBodyBytes. The time the handler spends blocked reading the body
//     is measured and does not count against the adaptive limit: a
//     request that missed its deadline only because its body came slowly,
//     or that spent at least half of its time waiting for it, is released
//     Ignored (see package shedhttp, Outcomes).
//
// The fault tests (fault_test.go) show a stalled upload, a slow reader,
// connection resets and a graceful shutdown each releasing their permit;
// the tests shared with the Echo middleware (internal/mwtest) show a
// stream that releases early, idle hijacked connections, and slow uploads
// behind a request timeout that leave a Gradient limit where it was.
//
// # Handler context
//
// The handler reaches its permit with Permit(r.Context()) (class, cost,
// queue wait) and corrects its cost with Reconcile, for example with the
// tokens an LLM call really used.
//
// # Recording
//
// Config.Recorder (package record) records a sample of the requests, with
// their class, estimated and actual cost, decision, queue wait, latency,
// outcome and status, and the limit over time, for shedsim fit. It is off
// by default. Only sampled requests read the clock (twice) and hand a
// record to the recorder's writer, which never blocks them: when it falls
// behind, records are dropped and counted. BenchmarkRecorderOverhead
// alternates the middleware with and without it in one run: on a 2-core
// machine a recorded request cost about 250 ns more (1.5 times an
// admitted request's 500 ns, twice a rejected one's 160 ns), a request
// only counted within a few percent of none, and no allocation. A sampled request
// also carries the hash of its rate-limit key, never the key; set
// record.Config.KeySalt to salt it (HMAC-SHA256, about 170 ns more per
// sampled request, still no allocation) when the recording leaves the
// host. The recording's header says where the keys came from (KeyHeader,
// the client's address, or Classify when it replaces the keys: see
// record.Header.KeySource), so that shedsim tune's snippet sets the same
// KeyHeader; a Classify that sets only the class or the cost leaves the
// source as it was.
//
// # Cost
//
// An admitted request served by net/http's HTTP/1 or HTTP/2 writer costs
// about 0.7 us (1.1 us with a small body, whose reads are timed) and 2
// allocations on top of the handler (bench_test.go, BenchmarkOverheadHTTP1
// and BenchmarkOverheadHTTP2): the request state, which is also the
// handler's context and holds the writer wrapper (1), and the request copy
// that carries it (http.Request.WithContext, 1). Other writers add the
// httpsnoop wrapper (1) with its status hooks (3 for each of WriteHeader
// and the methods the writer has that can send an implicit 200: Write,
// WriteString, ReadFrom, Flush, FlushError; 9 for BenchmarkOverhead's
// writer), and its hijack hook (3) when they can be hijacked; a writer
// that only unwraps to one that can flush or be hijacked adds the
// middleware's own FlushError and Hijack (1 or 2). Rejections
// allocate nothing. A request that carries a trusted deadline header
// (Config.DeadlineHeader) adds about 1 us and 4 allocations, those of Go's
// context.WithDeadline for the handler's context (BenchmarkOverheadDeadline);
// an untrusted one adds nothing. See the benchmarks for the current
// figures.
package nethttp
