package record_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestHeaderKeySource: a recorder writes the key source its driver gave
// in every header (every file of a directory), none when it was given
// none, and the reader gives it back.
func TestHeaderKeySource(t *testing.T) {
	for _, c := range []struct {
		name string
		set  []string // SetKeySource calls, in order
		want string
	}{
		{"not said", nil, ""},
		{"address", []string{record.KeySourceAddr}, "addr"},
		{"classify", []string{record.KeySourceClassify}, "classify"},
		{"header", []string{record.HeaderKeySource("X-Tenant")}, "header:X-Tenant"},
		{"a driver's own", []string{"grpc-metadata:x-tenant"}, "grpc-metadata:x-tenant"},
		{"said twice alike", []string{"addr", "addr"}, "addr"},
	} {
		t.Run(c.name+"/stream", func(t *testing.T) {
			var buf bytes.Buffer
			rec := newKeyed(t, record.Config{Writer: &buf})
			setKeySources(t, rec, c.set)
			rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1}, rec.KeyHash("tenant"))
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(buf.String(), "\n")
			if has := strings.Contains(first, `"keysrc"`); has != (c.want != "") || !strings.HasSuffix(first, keySrcSuffix(c.want)) {
				t.Errorf("header %s, want it to end in %s", first, keySrcSuffix(c.want))
			}
			rd := record.NewReader(&buf)
			if _, err := rd.Next(); err != nil {
				t.Fatal(err)
			}
			if h, _ := rd.Header(); h.KeySource != c.want {
				t.Errorf("KeySource %q, want %q", h.KeySource, c.want)
			}
		})
		t.Run(c.name+"/dir", func(t *testing.T) {
			dir := t.TempDir()
			rec := newKeyed(t, record.Config{Dir: dir, MaxFileBytes: 300})
			setKeySources(t, rec, c.set)
			for f, h := range rotatedHeaders(t, rec, dir) {
				if h.KeySource != c.want {
					t.Errorf("%s: KeySource %q, want %q", f, h.KeySource, c.want)
				}
			}
		})
	}
}

func setKeySources(t *testing.T, rec *record.Recorder, srcs []string) {
	t.Helper()
	for _, s := range srcs {
		if err := rec.SetKeySource(s); err != nil {
			t.Fatal(err)
		}
	}
}

// keySrcSuffix is how a header with the key source src ends.
func keySrcSuffix(src string) string {
	if src == "" {
		return `"keys":"fnv1a"}`
	}
	return `,"keysrc":"` + src + `"}`
}

// TestSetKeySourceDisagree: drivers that give a recorder different
// sources make its headers say none, for good; the same source twice is
// no disagreement.
func TestSetKeySourceDisagree(t *testing.T) {
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{"one", []string{"header:X-Tenant"}, "header:X-Tenant"},
		{"the same twice", []string{"header:X-Tenant", "header:X-Tenant"}, "header:X-Tenant"},
		{"two", []string{"header:X-Tenant", "addr"}, ""},
		{"two, then the first again", []string{"header:X-Tenant", "addr", "header:X-Tenant"}, ""},
		{"none, then one", []string{"", "addr"}, ""},
		{"header names differ", []string{"header:X-Tenant", "header:X-Api-Key"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := headerKeySource(t, c.set); got != c.want {
				t.Errorf("KeySource %q, want %q", got, c.want)
			}
		})
	}
}

// headerKeySource returns the key source of the header a recorder given
// srcs writes.
func headerKeySource(t *testing.T, srcs []string) string {
	t.Helper()
	var buf bytes.Buffer
	rec := newKeyed(t, record.Config{Writer: &buf})
	setKeySources(t, rec, srcs)
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	rd := record.NewReader(&buf)
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	h, _ := rd.Header()
	return h.KeySource
}

// invalidKeySources are sources no recording may hold, each with the
// JSON string that spells it in a header.
var invalidKeySources = []struct{ name, src, json string }{
	{"too long", strings.Repeat("x", record.MaxKeySourceBytes+1), `"` + strings.Repeat("x", record.MaxKeySourceBytes+1) + `"`},
	{"a line break", "addr\nname: x", `"addr\nname: x"`},
	{"a carriage return", "addr\r# x", `"addr\r# x"`},
	{"a space", "header:X Tenant", `"header:X Tenant"`},
	{"not ASCII", "header:X-T\u00e9nant", `"header:X-T\u00e9nant"`},
	{"no header name", "header:", `"header:"`},
	{"not a header name", `header:X"Tenant`, `"header:X\"Tenant"`},
	{"a NUL", "addr\x00", `"addr\u0000"`},
}

// TestSetKeySourceInvalid: a source no reader would take is a config
// error naming KeySource, and leaves the recorder's source as it was.
func TestSetKeySourceInvalid(t *testing.T) {
	for _, c := range invalidKeySources {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec := newKeyed(t, record.Config{Writer: &buf})
			if err := rec.SetKeySource("addr"); err != nil {
				t.Fatal(err)
			}
			err := rec.SetKeySource(c.src)
			if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), "KeySource") {
				t.Errorf("SetKeySource(%q): %v, want an ErrInvalidConfig naming KeySource", c.src, err)
			}
			if record.CheckKeySource(c.src) == nil {
				t.Errorf("CheckKeySource(%q) accepts it", c.src)
			}
			rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1})
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(buf.String(), "\n"); !strings.HasSuffix(first, `,"keysrc":"addr"}`) {
				t.Errorf("header %s: the refused source changed the one set before", first)
			}
		})
	}
}

// TestReaderKeySource: a header without "keysrc" (older, or a driver
// that did not say) reads as none, a source the reader does not know is
// kept as it is, and one no writer may write is an error on the header's
// line.
func TestReaderKeySource(t *testing.T) {
	head := strings.TrimSuffix(v1Header, "}\n")
	type tc struct {
		name, header, want string
		err                bool
	}
	cases := []tc{
		{"older v1, no field", v1Header, "", false},
		{"header", head + `,"keys":"fnv1a","keysrc":"header:X-Tenant"}` + "\n", "header:X-Tenant", false},
		{"address", head + `,"keysrc":"addr"}` + "\n", "addr", false},
		{"a newer source", head + `,"keysrc":"jwt:sub"}` + "\n", "jwt:sub", false},
		{"empty means none", head + `,"keysrc":""}` + "\n", "", false},
		{"the longest", head + `,"keysrc":"header:` + strings.Repeat("x", record.MaxKeySourceBytes-7) + `"}` + "\n",
			"header:" + strings.Repeat("x", record.MaxKeySourceBytes-7), false},
		{"not a string", head + `,"keysrc":1}` + "\n", "", true},
	}
	for _, c := range invalidKeySources {
		cases = append(cases, tc{c.name, head + `,"keysrc":` + c.json + "}\n", "", true})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := record.NewReader(strings.NewReader(c.header + `{"k":"admit","t":1,"c":0,"key":"00000000000000ff"}` + "\n"))
			r, err := rd.Next()
			if c.err {
				var fe *record.FormatError
				if !errors.As(err, &fe) || fe.Line != 1 {
					t.Fatalf("got %v, want an ErrFormat on line 1", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h, _ := rd.Header(); h.KeySource != c.want || r.Key != 0xff {
				t.Errorf("KeySource %q, key %#x; want %q, 0xff", h.KeySource, r.Key, c.want)
			}
		})
	}
}

// TestKeySourceHeader: only "header:" and a header name names a header.
func TestKeySourceHeader(t *testing.T) {
	for _, c := range []struct {
		src, name string
		ok        bool
	}{
		{"header:X-Tenant", "X-Tenant", true},
		{record.HeaderKeySource("Authorization"), "Authorization", true},
		{"header:", "", false},
		{"header:X Tenant", "X Tenant", false},
		{"Header:X-Tenant", "", false},
		{"addr", "", false},
		{"classify", "", false},
		{"", "", false},
	} {
		name, ok := record.KeySourceHeader(c.src)
		if ok != c.ok || (ok && name != c.name) {
			t.Errorf("KeySourceHeader(%q) = %q, %v; want %q, %v", c.src, name, ok, c.name, c.ok)
		}
	}
}
