package record_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// lineSizes returns the size of a recording's header and of its longest
// line but the header, as a recorder with room to spare writes them for
// the events of addEvents.
func lineSizes(t *testing.T) (header, longest int) {
	t.Helper()
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Classes: []string{"interactive", "batch"}})
	addEvents(rec, 1)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	for _, l := range lines[1:] {
		longest = max(longest, len(l))
	}
	return len(lines[0]), longest
}

// addEvents records n admissions a millisecond apart, flushing each.
func addEvents(rec *record.Recorder, n int) {
	for i := range n {
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * time.Millisecond), Cost: 1})
		_ = rec.Flush()
	}
}

// TestMaxFileBytesIsACap: no file of a recording, and no stream, passes
// Config.MaxFileBytes, however small it is. A cap below a header plus one
// record used to give files over it: the header was written whatever the
// cap, and a record that did not fit in a file rotated to a new one and
// was written there past the cap all the same, one file per record. Now
// a line that cannot fit in any file is dropped and counted (Stats.Lost),
// and no file is started for nothing but a header.
func TestMaxFileBytesIsACap(t *testing.T) {
	hdr, line := lineSizes(t)
	for _, tc := range []struct {
		name     string
		max      int
		someKept bool // some records are written
	}{
		{"below the header", hdr / 2, false},
		{"the header only", hdr + 10, false},
		{"the header and one record", hdr + line, true},
		{"room for a few", hdr + 4*line, true},
	} {
		for _, dir := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dir=%v", tc.name, dir), func(t *testing.T) {
				var buf bytes.Buffer
				cfg := record.Config{MaxFileBytes: int64(tc.max), MaxFiles: 1000, MaxRecordsPerSecond: -1, Classes: []string{"interactive", "batch"}}
				d := t.TempDir()
				if dir {
					cfg.Dir = d
				} else {
					cfg.Writer = &buf
				}
				rec := newRec(t, cfg)
				addEvents(rec, 20)
				if err := rec.Stop(); err != nil {
					t.Fatal(err)
				}
				sizes := []int{buf.Len()}
				if dir {
					sizes = fileSizes(t, d)
				}
				for i, n := range sizes {
					if n > tc.max {
						t.Errorf("file %d holds %d bytes, over MaxFileBytes %d (header %d, line %d)", i, n, tc.max, hdr, line)
					}
					if dir && n <= hdr {
						t.Errorf("file %d holds %d bytes: a header and no record", i, n)
					}
				}
				st := rec.Stats()
				if kept := st.Written > 0; kept != tc.someKept {
					t.Errorf("%d records written, want some: %v", st.Written, tc.someKept)
				}
				if st.Lost == 0 && tc.max < hdr+4*line {
					t.Errorf("nothing counted lost, with room for at most one record a file")
				}
			})
		}
	}
}

// fileSizes returns the sizes of the files in dir.
func fileSizes(t *testing.T, dir string) []int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int(fi.Size()))
	}
	return out
}
