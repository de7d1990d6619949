package mwtest

import (
	"bufio"
	"net"
	"net/http"
)

// UnwrapOnly returns w behind an outer middleware's writer in the Go 1.20
// style: it forwards no optional interface, only Unwrap, through which
// http.ResponseController reaches w.
func UnwrapOnly(w http.ResponseWriter) http.ResponseWriter { return unwrapOnly{w} }

// UnwrapHijacker returns w behind a writer that forwards Hijack and Unwrap
// but not Flush: an outer writer made for WebSockets that forgot
// streaming.
func UnwrapHijacker(w http.ResponseWriter) http.ResponseWriter { return unwrapHijacker{unwrapOnly{w}} }

// UnwrapHijackPusher returns w behind a writer that forwards Hijack, Push
// and Unwrap but not Flush, whatever the protocol: over HTTP/1 its Push
// can only fail.
func UnwrapHijackPusher(w http.ResponseWriter) http.ResponseWriter {
	return unwrapHijackPusher{unwrapHijacker{unwrapOnly{w}}}
}

type unwrapOnly struct{ http.ResponseWriter }

func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.ResponseWriter }

type unwrapHijacker struct{ unwrapOnly }

func (u unwrapHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(u.ResponseWriter).Hijack()
}

type unwrapHijackPusher struct{ unwrapHijacker }

func (u unwrapHijackPusher) Push(target string, opts *http.PushOptions) error {
	if p, ok := u.ResponseWriter.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}
