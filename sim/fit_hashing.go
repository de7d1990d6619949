package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/shedkit/shedkit/shed"
)

// Keys hashed two ways (record.Header.KeyHashing: two salts, or salted
// and not) are two sets of names for the same tenants, which no fit can
// match up. A fit counts the tenants of the newest keyed record's hashing
// (files are read oldest first): that is the salt in effect now, whose
// tenants a quota tuned on the fit will meet. The hashing that covers the
// most records would give a steadier count, but of a configuration that
// is gone; when the salt changed lately, the note says how few records
// the count rests on. The records of the other hashings are left out and
// named in the notes; those of files that do not say (written before
// headers said) are counted with the newest, with a warning.

// maxOtherHashings bounds the hashings a fit names, whatever a damaged
// stream's headers hold.
const maxOtherHashings = 8

// maxKeptHashings bounds the hashings whose keys a fit keeps apart until
// it knows which is the newest: a recording that goes back to a salt
// after another one (a rollback) is counted whole, and memory stays
// bounded whatever a damaged stream holds. Beyond it, the keys of the
// hashing seen least recently are dropped, and their records left out.
const maxKeptHashings = 2

// keySet is the keys of the records hashed one way: how many records of
// each class carry each key.
type keySet struct {
	hashing        string // "": unknown
	file, lastFile string // the first and the last with its keyed records
	first, last    int    // the order of its first and last keyed record
	counts         [shed.MaxClasses]map[uint64]int
	records        [shed.MaxClasses]int // keyed records, kept or not
	truncated      [shed.MaxClasses]bool
	sources        keySources // of the files with its keyed records
}

// add counts n keyed records of class c with key. Beyond MaxKeys
// distinct keys in a class, new keys are not kept: memory stays bounded
// whatever the recording, and the scenario could not hold the count
// anyway.
func (s *keySet) add(c shed.Class, key uint64, n int) {
	s.records[c] += n
	m := s.counts[c]
	if m == nil {
		m = make(map[uint64]int)
		s.counts[c] = m
	}
	if _, ok := m[key]; !ok && len(m) >= MaxKeys {
		s.truncated[c] = true
		return
	}
	m[key] += n
}

// merged returns a new set that counts the keys of s and o together, as
// s's hashing. The keys of o join in order, so that which are kept beyond
// MaxKeys does not depend on map order.
func (s *keySet) merged(o *keySet) *keySet {
	m := *s
	for c := range m.counts {
		if o.records[c] == 0 {
			continue
		}
		m.counts[c] = maps.Clone(s.counts[c])
		kept := 0
		for _, k := range slices.Sorted(maps.Keys(o.counts[c])) {
			m.add(shed.Class(c), k, o.counts[c][k])
			kept += o.counts[c][k]
		}
		m.records[c] += o.records[c] - kept // those whose keys o did not keep
		m.truncated[c] = m.truncated[c] || o.truncated[c]
	}
	m.sources = s.sources.merged(&o.sources)
	return &m
}

// keyHashings follows how the keys of the records being added are hashed
// and keeps them apart by hashing (see above).
type keyHashings struct {
	file, cur string  // of the records being added ("": unknown)
	src       string  // where their keys came from ("": not said)
	curSet    *keySet // cur's, once a keyed record came under it
	seq       int     // keyed records so far
	unknown   *keySet // of the files that do not say
	sets      []*keySet
	// dropped are the sets dropped beyond maxKeptHashings, the first
	// maxOtherHashings of them by name, the records of the rest in
	// droppedMore.
	dropped     []otherHashing
	droppedMore [shed.MaxClasses]int
	keyed       [shed.MaxClasses]int
}

// otherHashing is a hashing whose keyed records are left out.
type otherHashing struct {
	hashing, file string
	first         int // order of its first keyed record, for the notes
	records       [shed.MaxClasses]int
}

// source starts the records of file (or "" for a stream) hashed as
// hashing, their keys taken from src (record.Header.KeySource).
func (h *keyHashings) source(file, hashing, src string) {
	h.file, h.cur, h.src, h.curSet = file, hashing, src, nil
}

// add counts a keyed record of class c.
func (h *keyHashings) add(c shed.Class, key uint64) {
	s := h.current()
	h.seq++
	if s.first == 0 {
		s.first = h.seq
	}
	s.last, s.lastFile = h.seq, h.label()
	h.keyed[c]++
	s.add(c, key, 1)
}

// current returns the set of the records being added, making it, and
// dropping the least recently seen set when maxKeptHashings are kept.
func (h *keyHashings) current() *keySet {
	if h.curSet != nil {
		return h.curSet
	}
	switch i := slices.IndexFunc(h.sets, func(s *keySet) bool { return s.hashing == h.cur }); {
	case h.cur == "":
		if h.unknown == nil {
			h.unknown = &keySet{file: h.label()}
		}
		h.curSet = h.unknown
	case i >= 0:
		h.curSet = h.sets[i]
	default:
		if len(h.sets) == maxKeptHashings {
			h.drop()
		}
		h.curSet = &keySet{hashing: h.cur, file: h.label()}
		h.sets = append(h.sets, h.curSet)
	}
	// Once per file (or header) with keyed records, not per record.
	h.curSet.sources.add(h.src, h.label())
	return h.curSet
}

// drop leaves out the keys of the set seen least recently, keeping the
// count of its records for the notes.
func (h *keyHashings) drop() {
	i := 0
	for j, s := range h.sets {
		if s.last < h.sets[i].last {
			i = j
		}
	}
	s := h.sets[i]
	h.sets = slices.Delete(h.sets, i, i+1)
	if len(h.dropped) == maxOtherHashings {
		for c, n := range s.records {
			h.droppedMore[c] += n
		}
		return
	}
	h.dropped = append(h.dropped, otherHashing{hashing: s.hashing, file: s.file, first: s.first, records: s.records})
}

func (h *keyHashings) label() string {
	if h.file == "" {
		return "the stream"
	}
	return h.file
}

// newest returns the set of the newest keyed record's hashing (not the
// unknown one), nil when no file said.
func (h *keyHashings) newest() *keySet {
	var n *keySet
	for _, s := range h.sets {
		if n == nil || s.last > n.last {
			n = s
		}
	}
	return n
}

// counted returns the keys the fit counts: the newest hashing's, and
// those of files that do not say (see above); nil when no record has a
// key. It changes nothing, so that Fit may be called again.
func (h *keyHashings) counted() *keySet {
	n := h.newest()
	switch {
	case n == nil:
		return h.unknown
	case h.unknown == nil:
		return n
	}
	return n.merged(h.unknown)
}

// leftOut returns the hashings whose keyed records are left out, in the
// order they first came, and the records left out beyond them (of
// hashings dropped beyond maxOtherHashings).
func (h *keyHashings) leftOut() ([]otherHashing, [shed.MaxClasses]int) {
	n := h.newest()
	out := slices.Clone(h.dropped)
	for _, s := range h.sets {
		if s != n {
			out = append(out, otherHashing{hashing: s.hashing, file: s.file, first: s.first, records: s.records})
		}
	}
	slices.SortFunc(out, func(a, b otherHashing) int { return cmp.Compare(a.first, b.first) })
	more := h.droppedMore
	if len(out) > maxOtherHashings {
		for _, o := range out[maxOtherHashings:] {
			for c, r := range o.records {
				more[c] += r
			}
		}
		out = out[:maxOtherHashings]
	}
	return out, more
}

// notes says which keys were left out or may be miscounted.
func (h *keyHashings) notes() []string {
	n := h.newest()
	if n == nil {
		return nil
	}
	var out []string
	others, more := h.leftOut()
	for _, o := range others {
		r := total(o.records)
		if o.hashing == n.hashing {
			out = append(out, fmt.Sprintf("keys: %d older keyed records hashed as %s, from %s, are left out: records under other hashings came between them and the newest, "+
				"and a fit keeps the keys of at most %d hashings apart", r, o.hashing, o.file, maxKeptHashings))
			continue
		}
		out = append(out, fmt.Sprintf("keys: %s hashes its keys as %s but the newest keyed records (%s) as %s (another salt, or none): a tenant cannot be matched across the two, "+
			"so the tenants are counted from the %d records hashed as %s, as the recorder hashes them now, and the %d keyed records hashed as %s are left out",
			o.file, o.hashing, n.lastFile, n.hashing, total(n.records), n.hashing, r, o.hashing))
	}
	if m := total(more); m > 0 {
		out = append(out, fmt.Sprintf("keys: %d more keyed records under yet other hashings are left out", m))
	}
	if u := h.unknown; u != nil {
		out = append(out, fmt.Sprintf("keys: %s does not say how its keys are hashed (written before recordings said) but %s hashes its keys as %s: "+
			"they are counted together, and if they were hashed differently every tenant counts twice: the tenant counts may be wrong",
			u.file, n.lastFile, n.hashing))
	}
	return out
}

// excluded returns how many keyed records of class c are left out.
func (h *keyHashings) excluded(c int) int {
	others, more := h.leftOut()
	n := more[c]
	for _, o := range others {
		n += o.records[c]
	}
	return n
}

func total(records [shed.MaxClasses]int) int {
	n := 0
	for _, r := range records {
		n += r
	}
	return n
}
