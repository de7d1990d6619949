package sim

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// ErrInvalidRecording is wrapped by the errors a fit returns for a
// recording it cannot fit without guessing, naming the file and the
// field: a header that gives one name to two classes, or files that name
// more classes between them than a limiter holds (shed.MaxClasses).
var ErrInvalidRecording = errors.New("sim: invalid recording")

func recordingError(file, field, format string, args ...any) error {
	if file == "" {
		file = "the recording"
	}
	return fmt.Errorf("%w: %s: record.Header.%s: %s", ErrInvalidRecording, file, field, fmt.Sprintf(format, args...))
}

// Records name their class by index in their file's header, and a
// service redeployed may list its classes in another order, or more of
// them. So once Source gave a header, the fit matches classes by name:
// each name is one class of the fit. Without a header, an index is a
// class, as the records name it.
//
// The scenario's order of classes is its priority, and a header lists
// its classes in the limiter's order, so the fit ranks them as the
// headers do (rank). The classes already known keep their order: where
// files disagree (a redeploy that reordered them), the first ranking
// stays and a note says that a file ranks them otherwise. A class new to
// the fit goes where the file that first names it puts it: right below
// the lowest-ranked of the known classes that file lists above it, so
// that every class the recording shows above it stays above; when it
// lists none above it, right above the highest-ranked of those it lists
// below it; when it lists no known class at all, last, as nothing ranks
// it. (Ranking newcomers last whatever their file said put a class a
// redeploy added between interactive and batch below batch.)

// fitClassMap maps the class indices of the records being added to the
// fit's classes.
type fitClassMap struct {
	named  bool                  // a Source gave a header
	file   string                // its file
	header []string              // its class names
	to     [shed.MaxClasses]int8 // the fit's class of each index, -1 unknown yet
	n      int                   // the fit's classes so far, when named
	rank   []int                 // the fit's classes, highest priority first
	notes  []string              // files that rank the classes otherwise (the first few)
	others int                   // and how many more
}

// maxClassNotes bounds the notes on class order.
const maxClassNotes = 3

// sourceClasses starts the class indices of the file whose header is h.
// A header that names two classes alike is ambiguous: the fit refuses it.
func (f *Fitter) sourceClasses(file string, h record.Header) {
	m := &f.classes
	if !m.named {
		m.named, m.n = true, f.classCount()
		for c := range m.n { // classes of records added before any header
			m.rank = append(m.rank, c)
		}
	}
	m.file, m.header = file, h.Classes
	for i := range m.to {
		m.to[i] = -1
	}
	for i, name := range h.Classes {
		for j := range i {
			if h.Classes[j] == name {
				f.fail(recordingError(file, "Classes["+strconv.Itoa(i)+"]", "%q names class %d too: records of either cannot be told apart", name, j))
				return
			}
		}
		if _, ok := f.classIndex(i); !ok {
			return
		}
	}
	prev, ordered := -1, true
	for i := range h.Classes {
		p := slices.Index(m.rank, int(m.to[i]))
		ordered = ordered && p > prev
		prev = p
	}
	if !ordered {
		f.orderNote(file, h.Classes)
	}
}

// classIndex returns the fit's class of index i of the current file,
// making it if its name is new.
func (f *Fitter) classIndex(i int) (int, bool) {
	m := &f.classes
	if !m.named {
		return i, true
	}
	if c := m.to[i]; c >= 0 {
		return int(c), true
	}
	name := "class" + strconv.Itoa(i) // as the reader names a class the header does not
	if i < len(m.header) {
		name = m.header[i]
	}
	c := 0
	for c < m.n && f.names[c] != name {
		c++
	}
	if c == m.n {
		if m.n == shed.MaxClasses {
			f.fail(recordingError(m.file, "Classes["+strconv.Itoa(i)+"]", "%q would be class %d of the fit, which holds %d: fit the files apart",
				name, m.n+1, shed.MaxClasses))
			return 0, false
		}
		f.names[c] = name
		m.n++
		m.rank = slices.Insert(m.rank, f.rankOfNew(i), c)
	}
	m.to[i] = int8(c)
	return c, true
}

// rankOfNew returns where in the ranking a class new to the fit, index i
// of the current file, goes (see the rule above).
func (f *Fitter) rankOfNew(i int) int {
	m := &f.classes
	below, above := -1, len(m.rank)
	for j, name := range m.header {
		k := f.knownClass(name)
		if j == i || k < 0 {
			continue
		}
		p := slices.Index(m.rank, k)
		if p < 0 {
			continue // the new class itself, named again further on (an error)
		}
		if j < i || i >= len(m.header) {
			below = max(below, p)
		} else {
			above = min(above, p)
		}
	}
	if below >= 0 {
		return below + 1
	}
	return above
}

// knownClass returns the fit's class named name, -1 when none is.
func (f *Fitter) knownClass(name string) int {
	for c := range f.classes.n {
		if f.names[c] == name {
			return c
		}
	}
	return -1
}

// rankClasses puts fit.Classes in the order of the ranking (see the rule
// above), once everything that indexes them by the fit's class is done.
func (f *Fitter) rankClasses(fit *Fit) {
	if !f.classes.named {
		return
	}
	out := make([]ClassFit, 0, len(fit.Classes))
	for _, c := range f.classes.rank {
		if c < len(fit.Classes) {
			out = append(out, fit.Classes[c])
		}
	}
	fit.Classes = out
}

// mapClass rewrites r's class, and a tick's counts, to the fit's classes.
// It reports false when r cannot be fitted.
func (f *Fitter) mapClass(r *record.Record) bool {
	if !f.classes.named {
		if r.Kind != record.KindTick && r.ClassName != "" {
			f.names[r.Class], f.used[r.Class] = r.ClassName, true
		}
		return true
	}
	if r.Kind == record.KindTick {
		tk := *r.Tick // the caller's counts stay as they were
		var ok bool
		for _, s := range []*[]uint64{&tk.Arrivals, &tk.Shed, &tk.Done, &tk.Refused} {
			if *s, ok = f.mapCounts(*s); !ok {
				return false
			}
		}
		r.Tick = &tk
		return true
	}
	c, ok := f.classIndex(int(r.Class))
	if !ok {
		return false
	}
	r.Class = shed.Class(c)
	f.used[c] = true
	return true
}

// mapCounts returns a tick's counts by index as counts by the fit's
// class, as many as the fit has classes (so that a file listing fewer
// classes does not look like a restarted recorder, see fell).
func (f *Fitter) mapCounts(counts []uint64) ([]uint64, bool) {
	if counts == nil {
		return nil, true
	}
	out := make([]uint64, 0, shed.MaxClasses)
	for i, v := range counts[:min(len(counts), shed.MaxClasses)] {
		if v == 0 && f.classes.to[i] < 0 {
			continue // no class made for a count of nothing
		}
		c, ok := f.classIndex(i)
		if !ok {
			return nil, false
		}
		for len(out) <= c {
			out = append(out, 0)
		}
		out[c] = v
	}
	for len(out) < f.classes.n {
		out = append(out, 0)
	}
	return out, true
}

// orderNote notes that file ranks the classes otherwise than the fit.
func (f *Fitter) orderNote(file string, classes []string) {
	m := &f.classes
	if len(m.notes) == maxClassNotes {
		m.others++
		return
	}
	if file == "" {
		file = "a header of the stream"
	}
	m.notes = append(m.notes, fmt.Sprintf("classes: %s ranks its classes %q, the fit ranks them %q, as they first came: each class is fitted by name, "+
		"and the scenario's order is its priority", file, classes, f.rankedNames()))
}

// rankedNames returns the fit's class names in the order of the ranking.
func (f *Fitter) rankedNames() []string {
	out := make([]string, 0, len(f.classes.rank))
	for _, c := range f.classes.rank {
		out = append(out, f.names[c])
	}
	return out
}

// classNotes returns the notes on class order.
func (f *Fitter) classNotes() []string {
	notes := f.classes.notes
	if f.classes.others > 0 {
		notes = append(notes, fmt.Sprintf("classes: %d more files rank the classes otherwise too", f.classes.others))
	}
	return notes
}

// fail keeps the first error that stops the fit.
func (f *Fitter) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}
