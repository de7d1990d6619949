package echo

import (
	"bufio"
	"net"
	"net/http"

	echov4 "github.com/labstack/echo/v4"

	"github.com/shedkit/shedkit/middleware/shedhttp"
)

// rejectWriter is the writer a custom RejectHandler finds under
// c.Response(). It sees what the handler sends past Echo's Response
// (through c.Response().Writer, or Response.Flush, which leaves the
// Response uncommitted), so that nothing is written on top of it, and it
// sends the rejection's status where net/http would send an implicit 200:
// a rejected request did no work, and its client must not read a success
// the handler did not ask for.
type rejectWriter struct {
	http.ResponseWriter
	// status is the rejection's; sent is the final status that went out,
	// 0 until one did.
	status, sent int
}

// WriteHeader sends code; 1xx other than 101 are informational, and the
// final status is still to come.
func (w *rejectWriter) WriteHeader(code int) {
	if w.sent == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.sent = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// sendStatus sends the rejection's status before a write or flush that
// would send net/http's implicit 200.
func (w *rejectWriter) sendStatus() {
	if w.sent == 0 {
		w.WriteHeader(w.status)
	}
}

func (w *rejectWriter) Write(b []byte) (int, error) {
	w.sendStatus()
	return w.ResponseWriter.Write(b)
}

// Flush and FlushError flush through http.ResponseController, which
// reports a writer that cannot flush (Echo's Response.Flush panics then).
func (w *rejectWriter) Flush() { _ = w.FlushError() }

func (w *rejectWriter) FlushError() error {
	w.sendStatus()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hijacks the connection under w, if it can be: nothing may be
// written after it.
func (w *rejectWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.sent == 0 {
		w.sent = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap gives http.ResponseController the writer's other methods
// (deadlines, full duplex).
func (w *rejectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rejectWith answers the rejected request c serves: the protocol headers,
// then the RejectHandler, and the default response if it wrote nothing.
func (m *mw) rejectWith(c echov4.Context, rej shedhttp.Rejection) error {
	res := c.Response()
	m.e.SetRejectHeaders(res.Header(), rej)
	if m.reject == nil {
		return writeProblem(c, rej)
	}
	// A body written through the Response without a status goes out with
	// the rejection's, not Echo's default 200.
	res.Status = rej.Status
	w := res.Writer
	rw := &rejectWriter{ResponseWriter: w, status: rej.Status}
	res.Writer = rw
	err := m.reject(c, rej)
	// Echo's record follows what went out through rw: a header sent past
	// the Response (its Writer, Flush) commits it, so that neither the
	// default response below nor Echo's error handler writes on top, and
	// outer middlewares (a logger) read the status; an informational
	// 1xx alone, which Echo counts as committed, does not, so that a
	// final status still goes out instead of net/http's implicit 200.
	res.Committed = rw.sent != 0
	if rw.sent != 0 {
		res.Status = rw.sent
	} else if err == nil {
		// A RejectHandler that wrote nothing (one that only logs) would
		// let Echo send an empty 200: a client must never read a
		// success for work that did not run.
		err = writeProblem(c, rej)
	}
	res.Writer = w
	return err
}
