package core

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/felixge/httpsnoop"

	"github.com/shedkit/shedkit/shed"
)

// http1Writer is the method set of net/http's HTTP/1 ResponseWriter, the
// writer of nearly every request that can be hijacked.
type http1Writer interface {
	http.ResponseWriter
	http.Flusher
	FlushError() error
	//lint:ignore SA1019 deprecated, but net/http's writer has it and the wrapper keeps its method set
	http.CloseNotifier
	http.Hijacker
	io.ReaderFrom
	io.StringWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	EnableFullDuplex() error
}

// h1Writer wraps an http1Writer for an admitted request: it records the
// final status and sees the hijack. It lives inside the State, so wrapping
// allocates nothing (httpsnoop costs one allocation, and three for each
// hook on a method the writer has). It has exactly the methods of the
// writer it wraps, and Unwrap for http.ResponseController.
type h1Writer struct {
	w  http1Writer
	st *State
}

func (w *h1Writer) Header() http.Header                { return w.w.Header() }
func (w *h1Writer) SetReadDeadline(t time.Time) error  { return w.w.SetReadDeadline(t) }
func (w *h1Writer) SetWriteDeadline(t time.Time) error { return w.w.SetWriteDeadline(t) }
func (w *h1Writer) EnableFullDuplex() error            { return w.w.EnableFullDuplex() }
func (w *h1Writer) Unwrap() http.ResponseWriter        { return w.w }

// Write, WriteString, Flush and FlushError send the header, with an
// implicit 200 if none was written: see noteImplicitOK.
func (w *h1Writer) Write(b []byte) (int, error) {
	w.st.noteImplicitOK()
	return w.w.Write(b)
}

func (w *h1Writer) WriteString(s string) (int, error) {
	w.st.noteImplicitOK()
	return w.w.WriteString(s)
}

func (w *h1Writer) Flush() {
	w.st.noteImplicitOK()
	w.w.Flush()
}

func (w *h1Writer) FlushError() error {
	w.st.noteImplicitOK()
	return w.w.FlushError()
}

// ReadFrom sends the header only once it copied something: net/http sniffs
// the first bytes, and an empty src leaves the status unwritten.
func (w *h1Writer) ReadFrom(src io.Reader) (int64, error) {
	n, err := w.w.ReadFrom(src)
	if n > 0 {
		w.st.noteImplicitOK()
	}
	return n, err
}

// CloseNotify is part of the wrapped writer's method set.
func (w *h1Writer) CloseNotify() <-chan bool { return w.w.CloseNotify() }

func (w *h1Writer) WriteHeader(code int) {
	w.st.noteStatus(code)
	w.w.WriteHeader(code)
}

func (w *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := w.w.Hijack()
	if err == nil {
		w.st.noteHijack()
	}
	return c, rw, err
}

// http2Writer is the method set of net/http's HTTP/2 ResponseWriter
// (http2responseWriter in h2_bundle.go): it can push, and cannot be
// hijacked or read from.
type http2Writer interface {
	http.ResponseWriter
	http.Flusher
	FlushError() error
	//lint:ignore SA1019 deprecated, but net/http's writer has it and the wrapper keeps its method set
	http.CloseNotifier
	http.Pusher
	io.StringWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	EnableFullDuplex() error
}

// h2Writer is h1Writer for an http2Writer: it records the final status,
// lives inside the State so that wrapping allocates nothing, and has
// exactly the methods of the writer it wraps, and Unwrap.
type h2Writer struct {
	w  http2Writer
	st *State
}

func (w *h2Writer) Header() http.Header                           { return w.w.Header() }
func (w *h2Writer) SetReadDeadline(t time.Time) error             { return w.w.SetReadDeadline(t) }
func (w *h2Writer) SetWriteDeadline(t time.Time) error            { return w.w.SetWriteDeadline(t) }
func (w *h2Writer) EnableFullDuplex() error                       { return w.w.EnableFullDuplex() }
func (w *h2Writer) CloseNotify() <-chan bool                      { return w.w.CloseNotify() }
func (w *h2Writer) Push(target string, o *http.PushOptions) error { return w.w.Push(target, o) }
func (w *h2Writer) Unwrap() http.ResponseWriter                   { return w.w }

// Write, WriteString, Flush and FlushError send the header, with an
// implicit 200 if none was written: see noteImplicitOK.
func (w *h2Writer) Write(b []byte) (int, error) {
	w.st.noteImplicitOK()
	return w.w.Write(b)
}

func (w *h2Writer) WriteString(s string) (int, error) {
	w.st.noteImplicitOK()
	return w.w.WriteString(s)
}

func (w *h2Writer) Flush() {
	w.st.noteImplicitOK()
	w.w.Flush()
}

func (w *h2Writer) FlushError() error {
	w.st.noteImplicitOK()
	return w.w.FlushError()
}

func (w *h2Writer) WriteHeader(code int) {
	w.st.noteStatus(code)
	w.w.WriteHeader(code)
}

// noteStatus records the final status: the first one of 200 or more, or
// 101 (an upgrade); other 1xx are informational.
func (st *State) noteStatus(code int) {
	if st.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		st.Status = code
	}
}

// noteImplicitOK records the 200 that a write or flush before any
// WriteHeader sends. A WriteHeader after it is superfluous (net/http
// ignores it and the client gets the 200), so it must not become the
// status: a 503 there would release the permit as Dropped, cutting the
// limit for a request that succeeded.
func (st *State) noteImplicitOK() {
	if st.Status == 0 {
		st.Status = http.StatusOK
	}
}

// noteHijack marks the request hijacked and, unless the configuration
// holds hijacked permits, releases its permit: from now on the handler
// serves a connection, not a request, and that can last for hours (a
// WebSocket). The outcome is Ignored: the time to the hijack is an upgrade
// handshake, not the latency of the work the limit protects, and the
// connection's life is no latency at all (see shedhttp.DefaultOutcome).
func (st *State) noteHijack() {
	st.hijacked = true
	if !st.holdHijacked {
		st.Permit.Release(shed.Ignored)
	}
}

// WrapWriter returns the ResponseWriter the handler of st's request writes
// to. It has exactly the optional interfaces of w (Flusher, Hijacker,
// io.ReaderFrom, ... and Unwrap), except when http.ResponseController
// would find a Hijack or a flush only down w's Unwrap chain, past the
// wrapper: then it has a Hijack and a FlushError of its own (see
// withVia). It records the final status in st.Status when recordStatus is
// set, and always for writers through which a flush can send a header
// (net/http's HTTP/1 and HTTP/2 writers, which are wrapped without
// allocating, and any writer that can flush, itself or down its Unwrap
// chain): a caller that keeps its own record (Echo's Response) misses a
// header that a flush sent. It sees a hijack (see noteHijack). When
// there is nothing to see it is w itself; any other writer is wrapped
// with httpsnoop.
func (st *State) WrapWriter(w http.ResponseWriter, recordStatus bool) http.ResponseWriter {
	_, pusher := w.(http.Pusher)
	// A writer with the HTTP/1 method set and Push would lose Push in
	// h1Writer.
	if hw, ok := w.(http1Writer); ok && !pusher {
		st.h1 = h1Writer{w: hw, st: st}
		return &st.h1
	}
	rc := reachOf(w)
	// net/http's HTTP/2 writer (and x/net/http2's, which serves h2c) is
	// wrapped for the status even without recordStatus, as the HTTP/1
	// one is: it costs nothing. h2Writer has no Hijack (HTTP/2 cannot
	// hijack) nor ReadFrom: a writer with either is left to httpsnoop.
	if hw, ok := w.(http2Writer); ok && !rc.hijack && !rc.hijackBelow {
		if _, readerFrom := w.(io.ReaderFrom); !readerFrom {
			st.h2 = h2Writer{w: hw, st: st}
			return &st.h2
		}
	}
	// An outer writer in the Go 1.20 style forwards no optional interface
	// but Unwrap: http.ResponseController then hijacks or flushes the
	// writer under it, past ours, unless ours has a Hijack and a
	// FlushError of its own. A writer with Push keeps it, and a flush
	// that finds only a writer below it goes unseen, unless a writer
	// below can be hijacked: the connection is HTTP/1's, where Push can
	// only fail, and the wrapper with those methods drops it.
	via := rc.hijackBelow && !rc.hijack || rc.flushBelow && (!pusher || rc.hijackBelow)
	record := recordStatus || rc.flush || via && rc.flushBelow
	if !record && !rc.hijack && !via {
		return w
	}
	ww := w
	// withVia's Hijack sees a hijack of w as well as one below it.
	hookHijack := rc.hijack && !via
	if record || hookHijack {
		var hooks httpsnoop.Hooks
		if record {
			st.statusHooks(w, &hooks)
		}
		if hookHijack {
			hooks.Hijack = st.hijackHook
		}
		ww = httpsnoop.Wrap(w, hooks)
	}
	if via {
		ww = st.withVia(ww, rc)
	}
	return ww
}

// maxUnwrap bounds the walk down an Unwrap chain, which runs on every
// request: a writer that unwraps to itself must not hang them all.
const maxUnwrap = 32

// reach is what http.ResponseController finds on a writer: a Hijack and
// a flush (Flush or FlushError), on the writer itself (hijack, flush) or
// down its Unwrap chain: hijackBelow, a Hijack below it, whether it has
// one or not, down to the first writer that can flush; flushBelow, a
// flush only below it.
type reach struct {
	hijack, flush           bool
	hijackBelow, flushBelow bool
}

// reachOf walks w's Unwrap chain as http.ResponseController would, until
// it found a Hijack and a flush.
func reachOf(w http.ResponseWriter) reach {
	var rc reach
	_, rc.hijack = w.(http.Hijacker)
	rc.flush = canFlush(w)
	for range maxUnwrap {
		if (rc.hijack || rc.hijackBelow) && (rc.flush || rc.flushBelow) {
			break
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		if w = u.Unwrap(); w == nil {
			break
		}
		if _, ok := w.(http.Hijacker); ok {
			rc.hijackBelow = true
		}
		if !rc.flush && canFlush(w) {
			rc.flushBelow = true
		}
	}
	return rc
}

// canFlush reports whether w has a flush that http.ResponseController
// finds without unwrapping it.
func canFlush(w http.ResponseWriter) bool {
	switch w.(type) {
	case http.Flusher, interface{ FlushError() error }:
		return true
	}
	return false
}

// flushVia gives a writer a FlushError that the middleware sees, when
// http.ResponseController would otherwise find a flush only down its
// Unwrap chain, past the middleware's hooks.
type flushVia struct {
	http.ResponseWriter
	st *State
	// flushes: a flush reaches a writer that can flush (else FlushError
	// fails with http.ErrNotSupported and sends nothing).
	flushes bool
}

// FlushError flushes through http.ResponseController: that sends the
// header, with an implicit 200 if none was written (see noteImplicitOK),
// and returns the error of the FlushError it finds, if any.
func (f *flushVia) FlushError() error {
	if f.flushes {
		f.st.noteImplicitOK()
	}
	return http.NewResponseController(f.ResponseWriter).Flush()
}

func (f *flushVia) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// hijackVia is flushVia with a Hijack that the middleware sees, when w or
// a writer down its Unwrap chain can be hijacked. Its FlushError also
// serves a writer with Flush: it keeps the error of the writer's own
// FlushError, which a Flush alone would lose.
type hijackVia struct{ flushVia }

func (h *hijackVia) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err == nil {
		h.st.noteHijack()
	}
	return c, rw, err
}

// withVia returns w with Unwrap and the methods http.ResponseController
// would otherwise find past the middleware: Hijack when w or a writer
// below it can be hijacked (hijackVia), FlushError (flushVia). It keeps
// the optional interfaces of w that a handler reaches only by a type
// assertion: Flusher, CloseNotifier and io.ReaderFrom. The others are
// http.ResponseController methods (the deadlines, EnableFullDuplex),
// which it reaches through Unwrap, a fast path that io.WriteString does
// without (io.StringWriter), or Pusher: WrapWriter calls withVia for a
// Pusher only when a writer below it can be hijacked, an HTTP/1 one,
// which cannot push.
func (st *State) withVia(w http.ResponseWriter, rc reach) http.ResponseWriter {
	flushes := rc.flush || rc.flushBelow
	if rc.hijack || rc.hijackBelow {
		return withHijack(&hijackVia{flushVia{ResponseWriter: w, st: st, flushes: flushes}})
	}
	// WrapWriter calls withVia without a Hijack only for a flush below,
	// so w has no Flush.
	return withFlush(&flushVia{ResponseWriter: w, st: st, flushes: flushes})
}

// withFlush returns v with the CloseNotifier and io.ReaderFrom of the
// writer it wraps.
func withFlush(v *flushVia) http.ResponseWriter {
	//lint:ignore SA1019 a handler may still assert CloseNotifier; the wrapper must keep it
	c, isC := v.ResponseWriter.(http.CloseNotifier)
	r, isR := v.ResponseWriter.(io.ReaderFrom)
	switch {
	case isC && isR:
		return fvCR{v, c, r}
	case isC:
		return fvC{v, c}
	case isR:
		return fvR{v, r}
	}
	return v
}

// withHijack returns h with the Flusher, CloseNotifier and io.ReaderFrom
// of the writer it wraps.
func withHijack(h *hijackVia) http.ResponseWriter {
	//lint:ignore SA1019 a handler may still assert CloseNotifier; the wrapper must keep it
	c, isC := h.ResponseWriter.(http.CloseNotifier)
	r, isR := h.ResponseWriter.(io.ReaderFrom)
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		switch {
		case isC && isR:
			return hjFCR{h, f, c, r}
		case isC:
			return hjFC{h, f, c}
		case isR:
			return hjFR{h, f, r}
		}
		return hjF{h, f}
	}
	switch {
	case isC && isR:
		return hjCR{h, c, r}
	case isC:
		return hjC{h, c}
	case isR:
		return hjR{h, r}
	}
	return h
}

// The combinations of optional interfaces withVia keeps.
type (
	fvC struct {
		*flushVia
		http.CloseNotifier
	}
	fvR struct {
		*flushVia
		io.ReaderFrom
	}
	fvCR struct {
		*flushVia
		http.CloseNotifier
		io.ReaderFrom
	}
	hjC struct {
		*hijackVia
		http.CloseNotifier
	}
	hjR struct {
		*hijackVia
		io.ReaderFrom
	}
	hjCR struct {
		*hijackVia
		http.CloseNotifier
		io.ReaderFrom
	}
	hjF struct {
		*hijackVia
		http.Flusher
	}
	hjFC struct {
		*hijackVia
		http.Flusher
		http.CloseNotifier
	}
	hjFR struct {
		*hijackVia
		http.Flusher
		io.ReaderFrom
	}
	hjFCR struct {
		*hijackVia
		http.Flusher
		http.CloseNotifier
		io.ReaderFrom
	}
)

// statusHooks sets the hooks that record the status: on WriteHeader, and
// on the methods that send an implicit 200 (see noteImplicitOK). Each hook
// costs allocations, so only the methods w has get one.
func (st *State) statusHooks(w http.ResponseWriter, hooks *httpsnoop.Hooks) {
	hooks.WriteHeader = st.writeHeaderHook
	hooks.Write = st.writeHook
	if _, ok := w.(io.StringWriter); ok {
		hooks.WriteString = st.writeStringHook
	}
	if _, ok := w.(io.ReaderFrom); ok {
		hooks.ReadFrom = st.readFromHook
	}
	if _, ok := w.(http.Flusher); ok {
		hooks.Flush = st.flushHook
	}
	if _, ok := w.(interface{ FlushError() error }); ok {
		hooks.FlushError = st.flushErrorHook
	}
}

func (st *State) writeHeaderHook(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
	return func(code int) {
		st.noteStatus(code)
		next(code)
	}
}

func (st *State) writeHook(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
	return func(b []byte) (int, error) {
		st.noteImplicitOK()
		return next(b)
	}
}

func (st *State) writeStringHook(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
	return func(s string) (int, error) {
		st.noteImplicitOK()
		return next(s)
	}
}

func (st *State) readFromHook(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
	return func(src io.Reader) (int64, error) {
		n, err := next(src)
		if n > 0 {
			st.noteImplicitOK()
		}
		return n, err
	}
}

func (st *State) flushHook(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
	return func() {
		st.noteImplicitOK()
		next()
	}
}

func (st *State) flushErrorHook(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
	return func() error {
		st.noteImplicitOK()
		return next()
	}
}

func (st *State) hijackHook(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
	return func() (net.Conn, *bufio.ReadWriter, error) {
		c, rw, err := next()
		if err == nil {
			st.noteHijack()
		}
		return c, rw, err
	}
}
