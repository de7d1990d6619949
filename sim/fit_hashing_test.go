package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

var (
	testSalt1 = []byte("0123456789abcdef")
	testSalt2 = []byte("fedcba9876543210")
)

// hashedFile is one file of a test recording: how its keys are hashed.
type hashedFile struct {
	salt    []byte // nil: unsalted
	older   bool   // its header does not say (written before it could)
	keyless bool   // no keys at all
	src     string // where its keys came from (record.Header.KeySource)
}

// writeHashed records 3 s of traffic of 10 tenants per file into dir,
// one recorder (and file) after the other, and returns the files.
func writeHashed(t *testing.T, dir string, files []hashedFile) []string {
	t.Helper()
	var names []string
	for i, hf := range files {
		rec, err := record.New(record.Config{Dir: dir, MaxRecordsPerSecond: -1, Classes: []string{"api"}, KeySalt: hf.salt})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.SetKeySource(hf.src); err != nil {
			t.Fatal(err)
		}
		start := time.Date(2025, 1, 1, 0, 0, 5*i, 0, time.UTC)
		for j := range 300 {
			at := start.Add(time.Duration(j) * 10 * time.Millisecond)
			key := rec.KeyHash(fmt.Sprint("tenant", j%10))
			if hf.keyless {
				key = 0
			}
			rec.ObserveKeyed(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1, InFlight: 1}, key)
			rec.Observe(shed.Event{Kind: shed.EventReleased, Time: at.Add(5 * time.Millisecond), Cost: 1,
				Timed: true, Latency: 5 * time.Millisecond, Outcome: shed.Success})
		}
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, fmt.Sprintf("record-%06d.jsonl", i+1))
		if hf.older {
			stripKeyHashing(t, name)
		}
		names = append(names, name)
	}
	return names
}

var keysField = regexp.MustCompile(`,"keys":"[^"]*"`)

// stripKeyHashing makes name's header one written before headers said
// how keys are hashed.
func stripKeyHashing(t *testing.T, name string) {
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, _ := strings.Cut(string(b), "\n")
	if err := os.WriteFile(name, []byte(keysField.ReplaceAllString(head, "")+"\n"+rest), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFitKeyHashings: keys hashed two ways (salts, or salted and not) are
// not counted together: those of the files hashed as the newest keyed
// records are, the others are left out and a note names both files and
// hashings; files that do not say are counted with a warning. A salt
// rolled back to is counted whole, also past a third one.
func TestFitKeyHashings(t *testing.T) {
	const (
		h1  = "hmac-sha256:f15086f611419a12" // testSalt1's
		h2  = "hmac-sha256:ee4b47ff25030fe3"
		fnv = record.KeyHashingFNV1a
	)
	for _, c := range []struct {
		name     string
		files    []hashedFile
		seen     int
		excluded int
		notes    [][]string // each note's words, %d the file number
	}{
		{"one salt, two files", []hashedFile{{salt: testSalt1}, {salt: testSalt1}}, 10, 0, nil},
		{"two salts", []hashedFile{{salt: testSalt1}, {salt: testSalt2}}, 10, 300,
			[][]string{{"%1 hashes its keys as " + h1, "but the newest keyed records (%2) as " + h2,
				"counted from the 300 records hashed as " + h2, "the 300 keyed records hashed as " + h1 + " are left out"}}},
		{"salted, then unsalted", []hashedFile{{salt: testSalt1}, {}}, 10, 300,
			[][]string{{"%1 hashes its keys as " + h1, "but the newest keyed records (%2) as " + fnv, "left out"}}},
		{"three salts", []hashedFile{{}, {salt: testSalt1}, {salt: testSalt2}}, 10, 600,
			[][]string{{"%1 hashes its keys as " + fnv, "newest keyed records (%3) as " + h2}, {"%2 hashes its keys as " + h1, "newest keyed records (%3) as " + h2}}},
		{"a salt rolled back to", []hashedFile{{salt: testSalt1}, {salt: testSalt2}, {salt: testSalt1}}, 10, 300,
			[][]string{{"%2 hashes its keys as " + h2, "newest keyed records (%3) as " + h1, "counted from the 600 records hashed as " + h1}}},
		{"rolled back past a third", []hashedFile{{salt: testSalt1}, {salt: testSalt2}, {}, {salt: testSalt1}}, 10, 900,
			[][]string{{"300 older keyed records hashed as " + h1 + ", from %1, are left out"},
				{"%2 hashes its keys as " + h2, "newest keyed records (%4) as " + h1}, {"%3 hashes its keys as " + fnv}}},
		{"the last keyless", []hashedFile{{salt: testSalt1}, {salt: testSalt2, keyless: true}}, 10, 0, nil},
		{"the first keyless", []hashedFile{{keyless: true}, {salt: testSalt1}}, 10, 0, nil},
		{"salted and older", []hashedFile{{salt: testSalt1}, {older: true}}, 20, 0,
			[][]string{{"%2 does not say how its keys are hashed", "but %1 hashes its keys as " + h1, "may be wrong"}}},
		{"older and salted", []hashedFile{{older: true}, {salt: testSalt2}}, 20, 0,
			[][]string{{"%1 does not say", "but %2 hashes its keys as " + h2}}},
		{"older, then two salts", []hashedFile{{older: true}, {salt: testSalt1}, {salt: testSalt2}}, 20, 300,
			[][]string{{"%2 hashes its keys as " + h1, "newest keyed records (%3) as " + h2}, {"%1 does not say", "but %3 hashes its keys as " + h2}}},
		{"older only", []hashedFile{{older: true}, {older: true}}, 10, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			names := writeHashed(t, dir, c.files)
			rd, err := record.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			fit, err := FitRecording(rd, FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if kf := fit.Classes[0].Keys; kf.Seen != c.seen || kf.Excluded != c.excluded {
				t.Errorf("%d keys seen, %d records left out; want %d and %d", kf.Seen, kf.Excluded, c.seen, c.excluded)
			}
			checkNotes(t, "key notes", fit.Notes, func(n string) bool { return strings.HasPrefix(n, "keys: ") }, c.notes, names)
		})
	}
}

// TestFitKeyHashingsBounded: a stream whose headers change the hashing at
// every line keeps the keys of a few hashings, counts the newest and
// names a few of the others, not all.
func TestFitKeyHashingsBounded(t *testing.T) {
	var h keyHashings
	for i := range 100 {
		h.source("", fmt.Sprintf("scheme-%d", i), "")
		h.add(0, uint64(i+1))
		if len(h.sets) > maxKeptHashings || len(h.dropped) > maxOtherHashings {
			t.Fatalf("hashing %d: %d sets kept, %d dropped by name", i, len(h.sets), len(h.dropped))
		}
	}
	if n := h.counted(); n == nil || n.hashing != "scheme-99" || len(n.counts[0]) != 1 {
		t.Fatalf("counted %+v, want scheme-99's one key", n)
	}
	notes := h.notes()
	if len(notes) != maxOtherHashings+1 || !strings.Contains(notes[maxOtherHashings], "91 more keyed records") ||
		!strings.Contains(notes[0], "the stream hashes its keys as scheme-0 but the newest keyed records (the stream) as scheme-99") || h.excluded(0) != 99 {
		t.Errorf("notes %q, %d left out", notes, h.excluded(0))
	}
}

// TestKeySetMerged: the keys of files that do not say join the newest
// hashing's in a new set, counts added, MaxKeys kept, the sets merged
// left as they were (a second Fit counts the same).
func TestKeySetMerged(t *testing.T) {
	full := &keySet{hashing: "fnv1a"}
	for k := range uint64(MaxKeys) {
		full.add(0, k+1, 1)
	}
	for _, c := range []struct {
		name      string
		s, o      *keySet
		want      map[uint64]int // some of the merged counts
		keys      int
		records   int
		truncated bool
	}{
		{"overlapping", keySetOf(map[uint64]int{1: 2, 2: 1}), keySetOf(map[uint64]int{2: 3, 3: 1}), map[uint64]int{1: 2, 2: 4, 3: 1}, 3, 7, false},
		{"the unknown only", keySetOf(nil), keySetOf(map[uint64]int{5: 2}), map[uint64]int{5: 2}, 1, 2, false},
		{"past MaxKeys", full, keySetOf(map[uint64]int{1: 1, MaxKeys + 7: 4}), map[uint64]int{1: 2, MaxKeys + 7: 0}, MaxKeys, MaxKeys + 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, beforeRecords := len(c.s.counts[0]), c.s.records[0]
			m := c.s.merged(c.o)
			for k, n := range c.want {
				if m.counts[0][k] != n {
					t.Errorf("key %d: %d records, want %d", k, m.counts[0][k], n)
				}
			}
			if len(m.counts[0]) != c.keys || m.records[0] != c.records || m.truncated[0] != c.truncated || m.hashing != c.s.hashing {
				t.Errorf("%d keys, %d records, truncated %v, hashing %q; want %d, %d, %v, %q",
					len(m.counts[0]), m.records[0], m.truncated[0], m.hashing, c.keys, c.records, c.truncated, c.s.hashing)
			}
			if len(c.s.counts[0]) != before || c.s.records[0] != beforeRecords {
				t.Errorf("merging changed the newest set: %d keys, %d records", len(c.s.counts[0]), c.s.records[0])
			}
		})
	}
}

func keySetOf(counts map[uint64]int) *keySet {
	s := &keySet{hashing: "fnv1a"}
	for k, n := range counts {
		s.add(0, k, n)
	}
	return s
}

// checkNotes checks the notes that keep selects against want, one list of
// words per note, in order; %1, %2, ... in a word stand for names[0],
// names[1], ... (file names known only at run time).
func checkNotes(t *testing.T, what string, notes []string, keep func(string) bool, want [][]string, names []string) {
	t.Helper()
	var got []string
	for _, n := range notes {
		if keep(n) {
			got = append(got, n)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s %q, want %d", what, got, len(want))
	}
	for i, words := range want {
		for _, w := range words {
			for j, name := range names {
				w = strings.ReplaceAll(w, fmt.Sprintf("%%%d", j+1), name)
			}
			if !strings.Contains(got[i], w) {
				t.Errorf("note %q lacks %q", got[i], w)
			}
		}
	}
}
