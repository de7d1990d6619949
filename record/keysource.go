package record

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shedkit/shedkit/internal/httpname"
)

// Header.KeySource values: where the driver took the tenant (rate-limit)
// keys from, so that a configuration fitted to the recording takes them
// from the same place.
const (
	// KeySourceAddr: the client's address (the net/http middleware
	// without shedhttp.Options.KeyHeader).
	KeySourceAddr = "addr"
	// KeySourceClassify: a function of the service's own replaced the
	// middleware's keys (the Classify of the net/http and Echo
	// middleware and of the gRPC interceptors).
	KeySourceClassify = "classify"
	// KeySourceHeaderPrefix is followed by the name of a trusted request
	// header (shedhttp.Options.KeyHeader): the key is its value, or the
	// client's address when a request carries none or several.
	KeySourceHeaderPrefix = "header:"
)

// MaxKeySourceBytes bounds a key source (Header.KeySource): enough for
// any header name a proxy sets, little for a report to repeat.
const MaxKeySourceBytes = 128

// HeaderKeySource returns the key source of keys taken from the request
// header name: KeySourceHeaderPrefix and name, as given (the middleware
// passes it canonical, as it reads it).
func HeaderKeySource(name string) string { return KeySourceHeaderPrefix + name }

// KeySourceHeader returns the header that the key source src names, and
// whether src is one with a valid header name (an RFC 9110 token).
func KeySourceHeader(src string) (name string, ok bool) {
	name, ok = strings.CutPrefix(src, KeySourceHeaderPrefix)
	return name, ok && httpname.Valid(name)
}

// CheckKeySource returns an error when src cannot be a recording's key
// source: longer than MaxKeySourceBytes, with a byte outside visible
// ASCII (0x21 to 0x7e: a source ends up in reports and in the comments
// of a fitted scenario, where a line break or a control character would
// change what they say), or KeySourceHeaderPrefix followed by something
// other than a header name, which a fitted configuration would set as
// its KeyHeader. Sources other than the ones this package names are accepted as
// they are, so that a driver may name its own and a newer writer's stay
// readable; "" is none.
func CheckKeySource(src string) error {
	if err := visibleASCII(src, MaxKeySourceBytes); err != nil {
		return err
	}
	if strings.HasPrefix(src, KeySourceHeaderPrefix) {
		if _, ok := KeySourceHeader(src); !ok {
			//lint:ignore ST1005 the message ends with the prefix "header:", not with punctuation
			return errors.New("not a header name after " + KeySourceHeaderPrefix)
		}
	}
	return nil
}

// keySource is where the keys given to a Recorder come from, as its
// drivers said (SetKeySource).
type keySource struct {
	src   string
	set   bool
	mixed bool // two drivers said different things: none is written
}

// SetKeySource says where the keys given to the recorder (Add,
// ObserveKeyed) come from, for the headers of the files started from then
// on (Header.KeySource): KeySourceAddr, KeySourceClassify,
// HeaderKeySource(name), a source of the driver's own (see
// CheckKeySource), or "" for none. The net/http middleware calls it
// itself (nethttp.New). Call it before the first record, as Watch: a file
// already started keeps its header.
//
// Keys from two sources cannot be told apart in the records, so drivers
// that disagree make it unknown: once a call gives a source other than
// an earlier one, headers say none for the recorder's life. A source that
// CheckKeySource refuses is an error wrapping ErrInvalidConfig, naming
// KeySource, and changes nothing.
func (r *Recorder) SetKeySource(src string) error {
	if err := CheckKeySource(src); err != nil {
		return configError("KeySource", "%.40q: %v", src, err)
	}
	r.srcMu.Lock()
	defer r.srcMu.Unlock()
	ks := &r.keySrc
	if ks.set && ks.src != src {
		ks.mixed = true
	}
	ks.src, ks.set = src, true
	return nil
}

// keySourceNow returns the key source a new file's header says.
func (r *Recorder) keySourceNow() string {
	r.srcMu.Lock()
	defer r.srcMu.Unlock()
	if r.keySrc.mixed {
		return ""
	}
	return r.keySrc.src
}

// visibleASCII returns an error when s is longer than maxBytes or holds a
// byte outside visible ASCII (0x21 to 0x7e): the header's names that are
// not the service's own (a key source, a key hashing) need nothing else,
// and reports repeat them as they are.
func visibleASCII(s string, maxBytes int) error {
	if len(s) > maxBytes {
		return fmt.Errorf("%d bytes, at most %d", len(s), maxBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("byte %#02x at %d: only visible ASCII", c, i)
		}
	}
	return nil
}
