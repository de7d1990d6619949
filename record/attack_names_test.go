package record_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
)

// junkNames are class names that would change what a fit's report or
// scenario says when repeated there: line breaks, a NUL, a terminal
// escape, DEL, a C1 control, a right-to-left override, a zero-width
// space, a line separator.
var junkNames = []string{"inter\nactive", "a\r", "a\x00", "\x1b[31mred", "a\x7f", "a\u0085", "a\u202eb", "a\u200bb", "a\u2028b"}

// The Reader must refuse a header whose class name or key hashing holds
// a control character, with an error that names the field, and accept
// names that are merely unusual.
func TestReaderRefusesJunkInHeaderNames(t *testing.T) {
	header := func(classes, keys string) string {
		return `{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":` + classes +
			`,"tick":1000000000,"keys":` + keys + "}\n" + `{"k":"admit","t":1,"c":0}` + "\n"
	}
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for _, n := range junkNames {
		_, err := record.NewReader(strings.NewReader(header(`["ok",`+quote(n)+`]`, `"fnv1a"`))).Next()
		if !errors.Is(err, record.ErrFormat) || !strings.Contains(err.Error(), "header: class 1: name") {
			t.Errorf("class name %q: error %v, want an ErrFormat naming class 1", n, err)
		}
	}
	for _, keys := range []string{`"fnv1a\n"`, `"hmac-sha256:\u001b[0m"`, `"fnv 1a"`} {
		_, err := record.NewReader(strings.NewReader(header(`["a"]`, keys))).Next()
		if !errors.Is(err, record.ErrFormat) || !strings.Contains(err.Error(), "header: keys") {
			t.Errorf("keys %s: error %v, want an ErrFormat naming keys", keys, err)
		}
	}
	for _, n := range []string{"façade", "x😀", "two words", `"{}\`, "\uE000"} {
		r, err := record.NewReader(strings.NewReader(header(`[`+quote(n)+`]`, `"fnv1a"`))).Next()
		if err != nil || r.ClassName != n {
			t.Errorf("class name %q: read %q, %v", n, r.ClassName, err)
		}
	}
}

// Names the Reader refuses must never be written: New refuses them in
// Config.Classes, naming the field. (A watched limiter's are
// TestWatchedClassNamesTheFormatCannotHold's.)
func TestNewRefusesJunkClassNames(t *testing.T) {
	for _, n := range junkNames {
		_, err := record.New(record.Config{Writer: &bytes.Buffer{}, Classes: []string{"ok", n}})
		if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), "Classes: class 1: name") {
			t.Errorf("Classes %q: error %v, want an ErrInvalidConfig naming Classes", n, err)
		}
	}
}
