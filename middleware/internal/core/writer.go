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
	http.CloseNotifier // deprecated, but part of the method set to keep
	http.Hijacker
	io.ReaderFrom
	io.StringWriter
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	EnableFullDuplex() error
}

// h1Writer wraps an http1Writer for an admitted request: it records the
// final status and sees the hijack. It lives inside the State, so wrapping
// allocates nothing (httpsnoop's hooks cost four allocations, seven with
// a Hijack hook). It has exactly the methods of the writer it wraps, and
// Unwrap for http.ResponseController.
type h1Writer struct {
	w  http1Writer
	st *State
}

func (w *h1Writer) Header() http.Header                   { return w.w.Header() }
func (w *h1Writer) Write(b []byte) (int, error)           { return w.w.Write(b) }
func (w *h1Writer) WriteString(s string) (int, error)     { return w.w.WriteString(s) }
func (w *h1Writer) ReadFrom(src io.Reader) (int64, error) { return w.w.ReadFrom(src) }
func (w *h1Writer) Flush()                                { w.w.Flush() }
func (w *h1Writer) FlushError() error                     { return w.w.FlushError() }
func (w *h1Writer) SetReadDeadline(t time.Time) error     { return w.w.SetReadDeadline(t) }
func (w *h1Writer) SetWriteDeadline(t time.Time) error    { return w.w.SetWriteDeadline(t) }
func (w *h1Writer) EnableFullDuplex() error               { return w.w.EnableFullDuplex() }
func (w *h1Writer) Unwrap() http.ResponseWriter           { return w.w }

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

// noteStatus records the final status: the first one of 200 or more, or
// 101 (an upgrade); other 1xx are informational.
func (st *State) noteStatus(code int) {
	if st.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		st.Status = code
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
// io.ReaderFrom, ... and Unwrap), records the final status in st.Status
// when recordStatus is set, and sees a hijack (see noteHijack). When there
// is nothing to see (recordStatus is false and w cannot be hijacked) it is
// w itself. net/http's HTTP/1 writer is wrapped without allocating; any
// other is wrapped with httpsnoop.
func (st *State) WrapWriter(w http.ResponseWriter, recordStatus bool) http.ResponseWriter {
	if hw, ok := w.(http1Writer); ok {
		if _, push := w.(http.Pusher); !push {
			st.w = h1Writer{w: hw, st: st}
			return &st.w
		}
	}
	_, hijacker := w.(http.Hijacker)
	if !recordStatus && !hijacker {
		return w
	}
	var hooks httpsnoop.Hooks
	if recordStatus {
		hooks.WriteHeader = st.writeHeaderHook
	}
	if hijacker {
		hooks.Hijack = st.hijackHook
	}
	return httpsnoop.Wrap(w, hooks)
}

func (st *State) writeHeaderHook(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
	return func(code int) {
		st.noteStatus(code)
		next(code)
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
