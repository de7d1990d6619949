package record

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf16"

	"github.com/shedkit/shedkit/shed"
)

// The encoders append JSON by hand: the writer goroutine encodes every
// record, and reflection would cost it several times more.

func appendHeader(b []byte, epoch int64, classes []string, tick time.Duration, keys, keysrc string) []byte {
	b = append(b, `{"k":"header","format":"`+FormatName+`","v":`...)
	b = strconv.AppendInt(b, FormatVersion, 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendQuote(b, time.Unix(0, epoch).UTC().Format(time.RFC3339Nano))
	b = append(b, `,"classes":[`...)
	for i, c := range classes {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, c)
	}
	b = append(b, `],"tick":`...)
	b = strconv.AppendInt(b, int64(tick), 10)
	if keys != "" {
		b = append(b, `,"keys":`...)
		b = appendJSONString(b, keys)
	}
	if keysrc != "" {
		b = append(b, `,"keysrc":`...)
		b = appendJSONString(b, keysrc)
	}
	return append(b, "}\n"...)
}

// appendJSONString quotes s for JSON: anything outside printable ASCII is
// escaped as \u, a rune outside the Basic Multilingual Plane as its UTF-16
// surrogate pair (as JSON spells it), so that every valid name reads back
// as it was; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			b = appendU(appendU(b, r1), r2)
		case r < 0x20 || r >= 0x7f:
			b = appendU(b, r)
		default:
			b = append(b, byte(r))
		}
	}
	return append(b, '"')
}

// appendU appends r (at most 0xffff) as a \u escape.
func appendU(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
}

func appendField(b []byte, name string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

func appendName(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

func appendEntry(b []byte, e *entry, epoch int64) []byte {
	if e.kind == KindStore {
		return appendStore(b, e, epoch)
	}
	b = append(b, `{"k":"`...)
	b = append(b, kindNames[e.kind]...)
	b = append(b, '"')
	b = appendField(b, "t", e.t-epoch)
	b = appendField(b, "c", int64(e.class))
	if e.kind == KindRequest {
		b = appendName(b, "d", Decision(e.decision).String())
	}
	if e.reason != 0 {
		b = appendName(b, "r", shed.Reason(e.reason).String())
	}
	if e.cost != 0 {
		b = appendField(b, "cost", e.cost)
	}
	if e.actual != 0 {
		b = appendField(b, "actual", e.actual)
	}
	if e.flags&flagQueued != 0 {
		b = append(b, `,"q":true`...)
	}
	if e.wait != 0 {
		b = appendField(b, "wait", e.wait)
	}
	if e.flags&flagTimed != 0 {
		b = appendField(b, "lat", e.lat)
	}
	if e.kind == KindReleased || (e.kind == KindRequest && Decision(e.decision) == Admitted) {
		b = appendName(b, "o", shed.Outcome(e.outcome).String())
	}
	if e.status != 0 {
		b = appendField(b, "st", int64(e.status))
	}
	b = appendField(b, "n", int64(e.inflight))
	if e.key != 0 {
		b = appendKey(b, e.key)
	}
	return append(b, "}\n"...)
}

// appendKey writes a key hash as 16 hex digits in a string: a JSON number
// above 2^53 loses its low bits in many readers (JavaScript, jq), and two
// tenants would merge.
func appendKey(b []byte, k uint64) []byte {
	const hex = "0123456789abcdef"
	b = append(b, `,"key":"`...)
	for s := 60; s >= 0; s -= 4 {
		b = append(b, hex[k>>s&15])
	}
	return append(b, '"')
}

func appendCounts(b []byte, name string, v []uint64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, n := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, n, 10)
	}
	return append(b, ']')
}

func appendTick(b []byte, te *tickEntry, epoch int64, classes int) []byte {
	b = append(b, `{"k":"tick"`...)
	b = appendField(b, "t", te.t-epoch)
	b = appendField(b, "limit", int64(te.limit))
	b = appendField(b, "n", int64(te.inflight))
	b = appendCounts(b, "arr", te.arr[:classes])
	b = appendCounts(b, "shed", te.shed[:classes])
	b = appendCounts(b, "done", te.done[:classes])
	if slices.ContainsFunc(te.ref[:classes], func(n uint64) bool { return n != 0 }) {
		// Only then: older readers skip the field, and the ticks of a
		// service that refuses nothing stay as they were.
		b = appendCounts(b, "ref", te.ref[:classes])
	}
	b = append(b, `,"lost":`...)
	b = strconv.AppendUint(b, te.lost, 10)
	b = append(b, `,"every":`...)
	b = strconv.AppendUint(b, te.sampleEach, 10)
	return append(b, "}\n"...)
}
