package record

import (
	"encoding/json"
	"slices"
	"testing"
)

// Readers before the store kind skip store lines: they decode every line
// into their line struct (the fields of this one but op and res, which
// encoding/json then ignores) and skip a kind they do not know, and
// "store" is none of theirs. So a recording with store calls stays
// readable by them, with format version 1.
func TestOlderReadersSkipStoreLines(t *testing.T) {
	e := entry{kind: KindStore, t: 5_000_000, lat: 700_000, op: uint8(StoreAcquire), res: uint8(StoreError), flags: flagTimed}
	b := appendEntry(nil, &e, 0)
	var older struct {
		K   string `json:"k"`
		T   *int64 `json:"t"`
		Lat *int64 `json:"lat"`
	}
	if err := json.Unmarshal(b, &older); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var l line
	if err := json.Unmarshal(b, &l); err != nil || l.Op != "acquire" || l.Res != "error" || *l.Lat != 700_000 {
		t.Fatalf("%s read as %+v, %v", b, l, err)
	}
	olderKinds := kindNames[:KindStore]
	if slices.Contains(olderKinds[:], older.K) {
		t.Errorf("kind %q is one older readers know: they would not skip it", older.K)
	}
}
