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
// not counted together: those of the files hashed as the first keyed one
// are, the others are left out and a note names both files and
// hashings; files that do not say are counted with a warning.
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
			[][]string{{"%1 hashes its keys as " + h1, "but %2 as " + h2, "the 300 keyed records hashed as " + h2 + " are left out"}}},
		{"salted, then unsalted", []hashedFile{{salt: testSalt1}, {}}, 10, 300,
			[][]string{{"%1 hashes its keys as " + h1, "but %2 as " + fnv, "left out"}}},
		{"three salts", []hashedFile{{}, {salt: testSalt1}, {salt: testSalt2}}, 10, 600,
			[][]string{{"%1 hashes its keys as " + fnv, "but %2 as " + h1}, {"%1 hashes its keys as " + fnv, "but %3 as " + h2}}},
		{"the first keyless", []hashedFile{{keyless: true}, {salt: testSalt1}}, 10, 0, nil},
		{"salted and older", []hashedFile{{salt: testSalt1}, {older: true}}, 20, 0,
			[][]string{{"%2 does not say how its keys are hashed", "but %1 hashes its keys as " + h1, "may be wrong"}}},
		{"older and salted", []hashedFile{{older: true}, {salt: testSalt2}}, 20, 0,
			[][]string{{"%1 does not say", "but %2 hashes its keys as " + h2}}},
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
			var got []string
			for _, n := range fit.Notes {
				if strings.HasPrefix(n, "keys: ") {
					got = append(got, n)
				}
			}
			if len(got) != len(c.notes) {
				t.Fatalf("key notes %q, want %d", got, len(c.notes))
			}
			for i, words := range c.notes {
				for _, w := range words {
					for j, name := range names {
						w = strings.ReplaceAll(w, fmt.Sprintf("%%%d", j+1), name)
					}
					if !strings.Contains(got[i], w) {
						t.Errorf("note %q lacks %q", got[i], w)
					}
				}
			}
		})
	}
}

// TestFitKeyHashingsBounded: a stream whose headers change the hashing at
// every line names a few of them, not all.
func TestFitKeyHashingsBounded(t *testing.T) {
	var h keyHashings
	for i := range 100 {
		h.cur = fmt.Sprintf("scheme-%d", i)
		if h.accept() != (i == 0) {
			t.Fatalf("hashing %d: accepted %v", i, !(i == 0))
		}
	}
	notes := h.notes()
	if len(notes) != maxOtherHashings+1 || !strings.Contains(notes[maxOtherHashings], "91 more keyed records") ||
		!strings.Contains(notes[0], "the stream hashes its keys as scheme-0 but the stream as scheme-1") {
		t.Errorf("notes %q", notes)
	}
}
