package record_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

func TestKeyHash(t *testing.T) {
	for _, c := range []struct {
		key  string
		want uint64
	}{
		{"", 0},
		// The published FNV-1a test vectors: the hash is stable across
		// releases, so recordings made by different versions count the
		// same tenant once.
		{"a", 0xaf63dc4c8601ec8c},
		{"foobar", 0x85944171f73967e8},
	} {
		if got := record.KeyHash(c.key); got != c.want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", c.key, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { record.KeyHash("tenant-42") }); n != 0 {
		t.Errorf("KeyHash allocates %v times", n)
	}
}

// TestKeyRoundTrip: the key hash goes on the records of arrivals, from Add
// and from ObserveKeyed, and never on releases or records without one.
func TestKeyRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"a"}})
	k := record.KeyHash("tenant-1")
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Decision: record.Rejected, Reason: shed.ReasonRateLimited, Status: 429, Key: k})
	rec.Add(record.Record{Kind: record.KindRequest, Time: t0, Decision: record.Admitted, Timed: true, Status: 200})
	rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Millisecond), Cost: 1}, k)
	rec.ObserveKeyed(shed.Event{Kind: shed.EventReleased, Time: t0.Add(2 * time.Millisecond)}, k)
	rec.Observe(shed.Event{Kind: shed.EventRejected, Time: t0.Add(3 * time.Millisecond), Reason: shed.ReasonLimit})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"key":"`) || strings.Count(buf.String(), `"key":"`) != 2 {
		t.Fatalf("want two records with a key:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "tenant-1") {
		t.Fatalf("the raw key was written:\n%s", buf.String())
	}
	var keys []uint64
	for _, r := range readAll(t, buf.Bytes()) {
		if r.Kind != record.KindTick {
			keys = append(keys, r.Key)
		}
	}
	want := []uint64{k, 0, k, 0, 0}
	if len(keys) != len(want) {
		t.Fatalf("keys %x, want %x", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Errorf("record %d: key %#x, want %#x", i, keys[i], want[i])
		}
	}
}

const v1Header = `{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["a"],"tick":1000000000}` + "\n"

// TestReaderKeys: files written before keys existed (version 1 without
// the field) read as records without a key; keys are read in any case;
// a malformed key is an error that names its line.
func TestReaderKeys(t *testing.T) {
	for _, c := range []struct {
		name, line string
		want       uint64
		err        bool
	}{
		{"no key (older v1 writers)", `{"k":"req","t":1,"c":0,"d":"admit","o":"success","n":1}`, 0, false},
		{"key", `{"k":"req","t":1,"c":0,"d":"admit","o":"success","n":1,"key":"00000000000000ff"}`, 0xff, false},
		{"short and upper case", `{"k":"admit","t":1,"c":0,"key":"AF63DC4C8601EC8C"}`, 0xaf63dc4c8601ec8c, false},
		{"empty means none", `{"k":"reject","t":1,"c":0,"r":"limit_exceeded","key":""}`, 0, false},
		{"zero", `{"k":"req","t":1,"c":0,"d":"reject","key":"0000000000000000"}`, 0, true},
		{"not hex", `{"k":"req","t":1,"c":0,"d":"reject","key":"tenant-1"}`, 0, true},
		{"too long", `{"k":"req","t":1,"c":0,"d":"reject","key":"000000000000000001"}`, 0, true},
		{"a prefix", `{"k":"req","t":1,"c":0,"d":"reject","key":"0x1"}`, 0, true},
		{"a number", `{"k":"req","t":1,"c":0,"d":"reject","key":255}`, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := record.NewReader(strings.NewReader(v1Header + c.line + "\n"))
			r, err := rd.Next()
			if c.err {
				var fe *record.FormatError
				if !errors.Is(err, record.ErrFormat) || !errors.As(err, &fe) || fe.Line != 2 {
					t.Fatalf("got %v, want an ErrFormat on line 2", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Key != c.want {
				t.Errorf("key %#x, want %#x", r.Key, c.want)
			}
		})
	}
}
