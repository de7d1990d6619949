package retrybudget

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
)

// errKind sorts the transport error of an attempt by what it says, for
// the retry rule and the breaker alike.
type errKind uint8

const (
	// errRequest: the error speaks of the request only (its body failed
	// to read, as an upload its client aborted through a gateway), or the
	// base broke the RoundTripper contract. Retrying it would fail the
	// same way, and counting it against the host would let whoever can
	// send a bad request cut the host off: not retried, not counted by
	// the breaker.
	errRequest errKind = iota
	// errOther: an error of a kind not known here (an HTTP/2 stream reset
	// or GOAWAY, a proxy's error, or net/http refusing a header value,
	// which it reports as plain text). Retried, as a transport error
	// always was, but not counted by the breaker, which hears only what
	// is known to be the host's.
	errOther
	// errTimeout: the attempt timed out. Retried; not counted by the
	// breaker (a slow host is not a down one).
	errTimeout
	// errHost: the host or the connection to it failed (dial, read or
	// write error, reset, refused, response cut short, TLS failure).
	// Retried, and a failure for the breaker.
	errHost
)

// classifyError returns the kind of a non-nil attempt error.
func classifyError(err error) errKind {
	var rb *requestBodyError
	if errors.As(err, &rb) || errors.Is(err, errNilResponse) { // before the rest: a body may fail with a *net.OpError
		return errRequest
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return errTimeout
	}
	var (
		op  *net.OpError
		rh  tls.RecordHeaderError
		al  tls.AlertError
		cve *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &op), errors.As(err, &rh), errors.As(err, &al), errors.As(err, &cve),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return errHost
	}
	return errOther
}

// requestBodyError marks an error that reading the request body returned,
// such as an upload its client aborted, reaching a gateway that proxies
// it: the request failed, not the host.
type requestBodyError struct{ err error }

func (e *requestBodyError) Error() string { return e.err.Error() }
func (e *requestBodyError) Unwrap() error { return e.err }

// markedBody marks the read errors of a request body as requestBodyError,
// so that they can be told from the errors of the connection once the
// base transport returns them. io.EOF passes unchanged, as readers must.
type markedBody struct{ io.ReadCloser }

func (b markedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &requestBodyError{err: err}
	}
	return n, err
}

// markBody returns body with its read errors marked, or body itself when
// it is empty.
func markBody(body io.ReadCloser) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	return markedBody{body}
}
