package retrybudget

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
)

// errKind sorts the transport error of an attempt by what it says, for
// the retry rule and the breaker alike.
type errKind uint8

const (
	// errRequest: the error speaks of the request only (its body failed
	// to read, as an upload its client aborted through a gateway, or it
	// carries a header field that HTTP forbids), or the base broke the
	// RoundTripper contract. Retrying it would fail the
	// same way, and counting it against the host would let whoever can
	// send a bad request cut the host off: not retried, not counted by
	// the breaker.
	errRequest errKind = iota
	// errOther: an error of a kind not known here (an HTTP/2 stream reset
	// or GOAWAY, a proxy's error). Retried, as a transport error
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
	var rb *requestError
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

// requestError marks an error of the request itself: one that reading
// its body returned, such as an upload its client aborted reaching a
// gateway that proxies it, or a base's refusal of a header field that
// HTTP forbids. The request failed, not the host.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// markedBody marks the read errors of a request body as requestError,
// so that they can be told from the errors of the connection once the
// base transport returns them. io.EOF passes unchanged, as readers must.
type markedBody struct{ io.ReadCloser }

func (b markedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &requestError{err: err}
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

// forbiddenFields reports whether h holds a field that no HTTP transport
// may send: a name that is not a token, or a value with a control
// character other than a tab. net/http refuses such a request before it
// dials, with an error of plain text that only this check can tell from
// a host's; golang.org/x/net/http/httpguts has the same test, but would
// be this module's only dependency on x/net.
func forbiddenFields(h http.Header) bool {
	for k, vv := range h {
		if !validFieldName(k) {
			return true
		}
		for _, v := range vv {
			if !validFieldValue(v) {
				return true
			}
		}
	}
	return false
}

// validFieldName reports whether name is an RFC 9110 token.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validFieldValue reports whether v holds no control character but tabs
// (bytes of 0x80 and above are obsolete text that net/http lets through).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
