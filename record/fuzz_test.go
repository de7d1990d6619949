package record_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// sample returns a small recording with every kind of line.
func sample(tb testing.TB) []byte {
	var buf bytes.Buffer
	rec, err := record.New(record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"interactive", "batch"}})
	if err != nil {
		tb.Fatal(err)
	}
	for i, ev := range []shed.Event{
		{Kind: shed.EventAdmitted, Cost: 5, InFlight: 1},
		{Kind: shed.EventRejected, Class: 1, Reason: shed.ReasonQueueTimeout, Queued: true, Wait: time.Second},
		{Kind: shed.EventCancelled, Class: 1, Queued: true, Wait: time.Millisecond},
		{Kind: shed.EventReleased, Outcome: shed.Dropped, Timed: true, Latency: time.Second, Cost: 3},
	} {
		ev.Time = t0.Add(time.Duration(i) * 700 * time.Millisecond)
		rec.Observe(ev)
	}
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Decision: record.Admitted, Cost: 2, Actual: 1,
		Timed: true, Latency: time.Millisecond, Status: 200, Reason: shed.ReasonLimit, Key: record.KeyHash("tenant")})
	rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: t0, Class: 1, Cost: 1}, record.KeyHash("other"))
	rec.Add(record.Record{Kind: record.KindStore, Time: t0, Op: record.StoreAcquire, Result: record.StoreTimeout, Timed: true, Latency: 5 * time.Millisecond})
	if err := rec.Stop(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzReader: no input makes the reader panic or loop, every error is
// ErrFormat (or an I/O error, which a bytes.Reader never gives), and what
// it accepts has sane values.
func FuzzReader(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1}` + "\n" +
		`{"k":"tick","t":-5,"arr":[1,2],"every":0}` + "\n" + `{"k":"future","x":1}` + "\n" + `{"k":"req","t":1,"c":20}`))
	f.Add([]byte(`{"k":"req","t":1,"c":0}`))
	// Keys (optional in version 1): well formed, and not.
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1}` + "\n" +
		`{"k":"req","t":1,"c":0,"d":"admit","key":"85944171f73967e8"}` + "\n" + `{"k":"tick","t":2,"key":"1"}` + "\n" +
		`{"k":"reject","t":3,"c":0,"key":"0"}` + "\n" + `{"k":"cancel","t":4,"c":0,"key":"-1"}`))
	// The header's key hashing (optional in version 1), per file of a
	// stream: salted, unsalted, unknown, malformed.
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keys":"hmac-sha256:f15086f611419a12"}` + "\n" +
		`{"k":"req","t":1,"c":0,"d":"admit","key":"85944171f73967e8"}` + "\n" +
		`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keys":"fnv1a"}` + "\n" +
		`{"k":"admit","t":2,"c":0,"key":"1"}` + "\n" +
		`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keys":7}`))
	// The header's key source (optional in version 1), per file of a
	// stream: a header, the address, a newer writer's, and malformed
	// ones: a line break, not visible ASCII, no header name, too long.
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keys":"fnv1a","keysrc":"header:X-Tenant"}` + "\n" +
		`{"k":"req","t":1,"c":0,"d":"admit","key":"85944171f73967e8"}` + "\n" +
		`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keysrc":"addr"}` + "\n" +
		`{"k":"admit","t":2,"c":0,"key":"1"}` + "\n" +
		`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keysrc":"jwt:sub"}` + "\n" +
		`{"k":"admit","t":3,"c":0,"key":"2"}` + "\n" +
		`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keysrc":"header:X\nTenant"}`))
	for _, bad := range []string{`"header:"`, `"header:X Tenant"`, `"addr\u00e9"`, `"addr\r"`, `7`, `"` + strings.Repeat("x", 129) + `"`} {
		f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keysrc":` + bad + `}` + "\n" +
			`{"k":"admit","t":1,"c":0,"key":"1"}`))
	}
	// Class names and key hashings with control and format characters,
	// escaped and raw, and invalid UTF-8, which the reader refuses.
	for _, bad := range []string{`["a\nb"]`, `["a","\u001b[2J"]`, `["\u202e"]`, `["a\u2028"]`, "[\"a\x00\"]", "[\"\xff\"]", `["\ud800"]`} {
		f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":` + bad + `,"tick":1}` + "\n" +
			`{"k":"admit","t":1,"c":0}`))
	}
	for _, bad := range []string{`"fnv1a\n"`, `"hmac-sha256:\u0007"`, "\"fnv1a\x7f\""} {
		f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1,"keys":` + bad + `}` + "\n" +
			`{"k":"admit","t":1,"c":0}`))
	}
	// Refusals (optional in version 1): a refuse line, ticks' ref, and
	// malformed ones.
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a","b"],"tick":1}` + "\n" +
		`{"k":"refuse","t":1,"c":1,"st":413,"n":2}` + "\n" + `{"k":"tick","t":2,"arr":[1,0],"ref":[0,1]}` + "\n" +
		`{"k":"refuse","t":3}` + "\n" + `{"k":"refuse","t":3,"c":0,"r":"key_concurrency","st":429,"n":4,"key":"00000000000000ab"}` + "\n" + `{"k":"tick","t":4,"ref":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]}` + "\n" + `{"k":"refuse","t":5,"c":0,"st":-1}`))
	// Store calls (optional in version 1): well formed, of a newer
	// writer's operation or result (skipped), and malformed ones.
	f.Add([]byte(`{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1}` + "\n" +
		`{"k":"store","t":1,"op":"allow","lat":600000,"res":"ok"}` + "\n" + `{"k":"store","t":2,"op":"acquire","lat":5000000,"res":"timeout","c":3,"key":"1"}` + "\n" +
		`{"k":"store","t":3,"op":"scan","lat":1,"res":"ok"}` + "\n" + `{"k":"store","t":4,"op":"renew","lat":0,"res":"breaker_open"}` + "\n" +
		`{"k":"store","t":5,"op":"release","lat":-1,"res":"error"}` + "\n" + `{"k":"store","t":6,"op":"allow","res":"ok"}`))
	// Each malformed store line alone (a reader stops at the first
	// error), a store line before the header, and extreme durations.
	const storeHeader = `{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1}` + "\n"
	for _, l := range []string{`{"k":"store","op":"allow","lat":1,"res":"ok"}`, `{"k":"store","t":1,"op":"allow","res":"ok"}`,
		`{"k":"store","t":1,"lat":1,"res":"ok"}`, `{"k":"store","t":1,"op":"allow","lat":1}`, `{"k":"store","t":1,"op":"allow","lat":1e30,"res":"ok"}`,
		`{"k":"store","t":-9223372036854775808,"op":"allow","lat":9223372036854775807,"res":"timeout"}`} {
		f.Add([]byte(storeHeader + l + "\n"))
	}
	f.Add([]byte(`{"k":"store","t":1,"op":"allow","lat":1,"res":"ok"}` + "\n" + storeHeader))
	// The cleanup after a renewal (added later in version 1).
	f.Add([]byte(storeHeader + `{"k":"store","t":7,"op":"cleanup","lat":3,"res":"timeout","n":2}` + "\n" + `{"k":"store","t":8,"op":"cleanup","res":"ok"}` + "\n"))
	f.Add([]byte("\n\n{}\n[1]\nnot json"))
	// Cut last lines (a writer killed mid-line): in a record, in the
	// header of a second file of a stream, after a carriage return.
	s := sample(f)
	f.Add(s[:len(s)-10])
	f.Add(append(slices.Clone(s), s[:20]...))
	f.Add(append(slices.Clone(s), "{\"k\":\"req\",\"t\":1,\"c\r"...))
	f.Fuzz(readChecked)
}

// readChecked reads data to its end or its first error, and fails on a
// record or header the reader should have refused.
func readChecked(t *testing.T, data []byte) {
	rd := record.NewReader(bytes.NewReader(data))
	for n := 0; ; n++ {
		if n > len(data) {
			t.Fatalf("more records (%d) than bytes", n)
		}
		rec, err := rd.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			if !errors.Is(err, record.ErrFormat) {
				t.Fatalf("error %v does not match ErrFormat", err)
			}
			return
		}
		classless := rec.Kind == record.KindTick || rec.Kind == record.KindStore
		if rec.Cost < 0 || rec.Actual < 0 || rec.Wait < 0 || rec.Latency < 0 || int(rec.Class) >= shed.MaxClasses || (rec.ClassName == "") != classless {
			t.Fatalf("accepted %+v", rec)
		}
		if h, ok := rd.Header(); !ok || !visibleASCII(h.KeyHashing, 128) || record.CheckKeySource(h.KeySource) != nil || !namesOK(h.Classes) {
			t.Fatalf("record %+v under header %+v (read: %v)", rec, h, ok)
		}
		if rec.Kind == record.KindStore && (!rec.Timed || rec.Op.String() == "unknown" || rec.Result.String() == "unknown" || rec.Key != 0) {
			t.Fatalf("store call %+v", rec)
		}
		if !classless && record.CheckClassName(rec.ClassName) != nil {
			t.Fatalf("class name %q accepted", rec.ClassName)
		}
		if (rec.Kind == record.KindTick) != (rec.Tick != nil) || (rec.Tick != nil && (rec.Tick.SampleEvery < 1 || rec.Key != 0 || len(rec.Tick.Refused) > shed.MaxClasses)) {
			t.Fatalf("tick %+v", rec)
		}
	}
}

// visibleASCII reports whether s is at most n bytes of visible ASCII.
func visibleASCII(s string, n int) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return len(s) <= n
}

// namesOK reports whether a header's class names are ones a writer of
// the package writes.
func namesOK(names []string) bool {
	for _, n := range names {
		if record.CheckClassName(n) != nil {
			return false
		}
	}
	return true
}
