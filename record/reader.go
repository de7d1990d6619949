package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// ErrFormat is matched (errors.Is) by every error about a malformed
// recording.
var ErrFormat = errors.New("record: malformed recording")

// FormatError reports a malformed line of a recording.
type FormatError struct {
	File string // "" for a stream
	Line int
	Msg  string
}

// Error formats the error as file:line: message.
func (e *FormatError) Error() string {
	s := "record: "
	if e.File != "" {
		s += e.File + ":"
	}
	return s + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Is makes errors.Is(err, ErrFormat) true.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// MaxLineBytes bounds one line of a recording; longer lines are errors.
const MaxLineBytes = 64 << 10

// maxKeyHashingBytes bounds a header's key hashing (of visible ASCII, as
// a key source), which fits and their reports repeat.
const maxKeyHashingBytes = 128

// Reader reads a recording: one stream (NewReader), or a file or a
// recording's directory (Open), whose files it reads oldest first (a file
// deleted since Open, as a live writer deletes the oldest, is skipped). Each
// file starts with a header; lines of unknown kinds are skipped, so that
// newer writers stay readable, and so is a malformed last line without its
// newline: the unfinished end of a file whose writer was killed, or is
// still writing.
type Reader struct {
	files  []string // left to open, for Open on a directory
	dir    bool     // files were listed from a directory
	cur    io.Reader
	closer io.Closer
	sc     *bufio.Scanner
	name   string
	line   int
	header Header
	has    bool
	// cut: the line just scanned ended the input without a newline.
	cut bool
}

// NewReader returns a Reader of the recording in rd.
func NewReader(rd io.Reader) *Reader {
	r := &Reader{}
	r.reset(rd, "")
	return r
}

// Open returns a Reader of a recording file or of a directory written with
// Config.Dir. Close it when done.
func Open(path string) (*Reader, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	r := &Reader{}
	if !fi.IsDir() {
		r.files = []string{path}
	} else {
		names, err := listFiles(path)
		if err != nil {
			return nil, err
		}
		r.dir = true
		if len(names) == 0 {
			return nil, fmt.Errorf("record: no record-NNNNNN.jsonl files in %s", path)
		}
		for _, n := range names {
			if name := filepath.Join(path, n); regular(name) {
				r.files = append(r.files, name)
			}
		}
		if len(r.files) == 0 {
			return nil, fmt.Errorf("record: no regular record-NNNNNN.jsonl files in %s", path)
		}
	}
	if err := r.openNext(); err != nil {
		return nil, err
	}
	return r, nil
}

// regular reports whether name is a regular file, or a link to one: a
// named pipe with a recording's name would block the Reader's open until
// something writes to it, which may be never.
func regular(name string) bool {
	fi, err := os.Stat(name)
	return err != nil || fi.Mode().IsRegular() // one deleted since: openNext skips it
}

func (r *Reader) reset(rd io.Reader, name string) {
	r.cur, r.name, r.line, r.has = rd, name, 0, false
	r.sc = bufio.NewScanner(rd)
	r.sc.Buffer(make([]byte, 0, 4096), MaxLineBytes)
	r.sc.Split(r.splitLines)
}

// splitLines is bufio.ScanLines, noting a last line without its newline:
// a writer killed mid-line, or one still writing, leaves one.
func (r *Reader) splitLines(data []byte, atEOF bool) (int, []byte, error) {
	adv, tok, err := bufio.ScanLines(data, atEOF)
	r.cut = atEOF && tok != nil && adv == len(data) && bytes.IndexByte(data, '\n') < 0
	return adv, tok, err
}

func (r *Reader) openNext() error {
	for {
		f, err := os.Open(r.files[0])
		if err != nil && r.dir && len(r.files) > 1 && errors.Is(err, fs.ErrNotExist) {
			// A live writer deleted it (the oldest beyond MaxFiles)
			// since Open listed the directory: newer files follow.
			r.files = r.files[1:]
			continue
		}
		if err != nil {
			return err
		}
		r.reset(f, r.files[0])
		r.closer = f
		r.files = r.files[1:]
		return nil
	}
}

// Close closes the file being read, if any.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// Header returns the header of the file being read, and whether one was
// read yet.
func (r *Reader) Header() (Header, bool) { return r.header, r.has }

// File returns the name of the file being read, "" for a stream, so that
// what is said of its header can name it.
func (r *Reader) File() string { return r.name }

// Next returns the next record, io.EOF at the end, or an error (matching
// ErrFormat for a malformed line, with its file and line number).
func (r *Reader) Next() (Record, error) {
	for {
		if !r.sc.Scan() {
			if err := r.sc.Err(); err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					return Record{}, r.errf("line longer than %d bytes", MaxLineBytes)
				}
				return Record{}, err
			}
			if len(r.files) == 0 {
				return Record{}, io.EOF
			}
			r.Close()
			if err := r.openNext(); err != nil {
				return Record{}, err
			}
			continue
		}
		r.line++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, ok, err := r.parse(b)
		if err != nil && r.cut {
			continue // the unfinished end of a file, not a malformed line
		}
		if err != nil || ok {
			return rec, err
		}
	}
}

// ReadAll reads every record of the recording at path (see Open).
func ReadAll(path string) ([]Record, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

func (r *Reader) errf(format string, args ...any) error {
	return &FormatError{File: r.name, Line: r.line, Msg: fmt.Sprintf(format, args...)}
}

// line is one line of the file as JSON.
type line struct {
	K       string   `json:"k"`
	T       *int64   `json:"t"`
	C       *int     `json:"c"`
	D       string   `json:"d"`
	R       string   `json:"r"`
	Cost    int64    `json:"cost"`
	Actual  int64    `json:"actual"`
	Q       bool     `json:"q"`
	Wait    int64    `json:"wait"`
	Lat     *int64   `json:"lat"`
	O       string   `json:"o"`
	St      int      `json:"st"`
	N       int      `json:"n"`
	Key     string   `json:"key"`
	Limit   int      `json:"limit"`
	Arr     []uint64 `json:"arr"`
	Shed    []uint64 `json:"shed"`
	Done    []uint64 `json:"done"`
	Ref     []uint64 `json:"ref"`
	Lost    uint64   `json:"lost"`
	Every   uint64   `json:"every"`
	Format  string   `json:"format"`
	V       int      `json:"v"`
	Epoch   string   `json:"epoch"`
	Classes []string `json:"classes"`
	Tick    int64    `json:"tick"`
	Keys    string   `json:"keys"`
	KeySrc  string   `json:"keysrc"`
	Op      string   `json:"op"`
	Res     string   `json:"res"`
}

// parse decodes one line: a record (ok), a header or an unknown kind
// (skipped), or an error.
func (r *Reader) parse(b []byte) (Record, bool, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Record{}, false, r.errf("not a JSON object: %v", err)
	}
	if l.K == "header" {
		return Record{}, false, r.parseHeader(&l)
	}
	kind := Kind(0)
	for i, n := range kindNames {
		if n == l.K && i > 0 {
			kind = Kind(i)
		}
	}
	if kind == 0 {
		return Record{}, false, nil // a kind of a newer writer
	}
	if !r.has {
		return Record{}, false, r.errf("record before the header")
	}
	if kind == KindStore {
		return r.store(&l)
	}
	if kind == KindRefused && l.R != "" && !knownReason(l.R) {
		// A refusal of a kind a newer writer added: a count this reader
		// cannot place, as a line of an unknown kind. Other lines need
		// their reason to mean anything, and refuse an unknown one.
		return Record{}, false, nil
	}
	rec, err := r.record(kind, &l)
	return rec, err == nil, err
}

func (r *Reader) parseHeader(l *line) error {
	if l.Format != FormatName {
		return r.errf("header: format %q, want %q", l.Format, FormatName)
	}
	if l.V < 1 || l.V > FormatVersion {
		return r.errf("header: version %d, this reader knows 1 to %d", l.V, FormatVersion)
	}
	epoch, err := time.Parse(time.RFC3339Nano, l.Epoch)
	if err != nil {
		return r.errf("header: epoch %q: want an RFC 3339 time", l.Epoch)
	}
	if len(l.Classes) > shed.MaxClasses {
		return r.errf("header: %d classes, at most %d", len(l.Classes), shed.MaxClasses)
	}
	for i, c := range l.Classes {
		if slices.Contains(l.Classes[:i], c) {
			return r.errf("header: class %d: repeated name %q", i, c)
		}
		// Fits repeat the names in their reports and scenarios.
		if err := CheckClassName(c); err != nil {
			return r.errf("header: class %d: name %.40q: %v", i, c, err)
		}
	}
	if l.Tick < 0 {
		return r.errf("header: negative tick %d", l.Tick)
	}
	if err := visibleASCII(l.Keys, maxKeyHashingBytes); err != nil {
		// Fits name the hashings they exclude in their reports.
		return r.errf("header: keys %.40q: %v", l.Keys, err)
	}
	// Any other hashing is kept as it is, unknown: compared, never
	// interpreted, so that a newer writer's scheme stays readable.
	if err := CheckKeySource(l.KeySrc); err != nil {
		// A fit repeats the source in its report and the scenario's
		// comments, and a configuration may set it as its KeyHeader.
		return r.errf("header: keysrc %.40q: %v", l.KeySrc, err)
	}
	r.header = Header{Version: l.V, Epoch: epoch, Classes: l.Classes, TickEvery: time.Duration(l.Tick), KeyHashing: l.Keys,
		KeySource: l.KeySrc}
	r.has = true
	return nil
}

// record builds the Record of a line of a known kind.
func (r *Reader) record(kind Kind, l *line) (Record, error) {
	switch {
	case l.T == nil:
		return Record{}, r.errf("%s: no time (t)", kind)
	case l.C == nil && kind != KindTick:
		return Record{}, r.errf("%s: no class (c)", kind)
	case l.Cost < 0 || l.Actual < 0 || l.Wait < 0 || (l.Lat != nil && *l.Lat < 0):
		return Record{}, r.errf("%s: negative cost, wait or latency", kind)
	case l.N < 0 || l.N > math.MaxInt32 || l.St < 0 || l.St > 999:
		return Record{}, r.errf("%s: in-flight count or status out of range", kind)
	}
	rec := Record{Kind: kind, Time: r.header.Epoch.Add(time.Duration(*l.T)), Cost: l.Cost, Actual: l.Actual,
		Queued: l.Q, Wait: time.Duration(l.Wait), Status: l.St, InFlight: l.N}
	if l.C != nil && kind != KindTick {
		if *l.C < 0 || *l.C >= shed.MaxClasses {
			return Record{}, r.errf("%s: class %d outside [0, %d)", kind, *l.C, shed.MaxClasses)
		}
		rec.Class = shed.Class(*l.C)
		rec.ClassName = "class" + strconv.Itoa(*l.C)
		if *l.C < len(r.header.Classes) {
			rec.ClassName = r.header.Classes[*l.C]
		}
	}
	if l.Lat != nil {
		rec.Latency, rec.Timed = time.Duration(*l.Lat), true
	}
	if l.Key != "" && kind != KindTick {
		k, err := strconv.ParseUint(l.Key, 16, 64)
		if err != nil || k == 0 || len(l.Key) > 16 {
			return Record{}, r.errf("%s: key %q: want 1 to 16 hex digits, not all zero", kind, l.Key)
		}
		rec.Key = k
	}
	if err := r.names(&rec, l); err != nil {
		return Record{}, err
	}
	if kind == KindTick {
		return rec, r.tick(&rec, l)
	}
	return rec, nil
}

// store builds the Record of a store line, or skips a line of an
// operation or result a newer writer added, as a line of an unknown kind.
func (r *Reader) store(l *line) (Record, bool, error) {
	switch {
	case l.T == nil:
		return Record{}, false, r.errf("store: no time (t)")
	case l.Lat == nil || *l.Lat < 0:
		return Record{}, false, r.errf("store: no duration (lat), or a negative one")
	case l.Op == "" || l.Res == "":
		return Record{}, false, r.errf("store: no operation (op) or result (res)")
	}
	op, okOp := lookup(storeOpNames[1:], l.Op)
	res, okRes := lookup(storeResultNames[:], l.Res)
	if !okOp || !okRes {
		return Record{}, false, nil
	}
	return Record{Kind: KindStore, Time: r.header.Epoch.Add(time.Duration(*l.T)), Latency: time.Duration(*l.Lat), Timed: true,
		Op: StoreOp(op + 1), Result: StoreResult(res)}, true, nil
}

// reasonIndex returns the shed.Reason named name, or shed.NumReasons.
func reasonIndex(name string) int {
	i := 0
	for ; i < shed.NumReasons && shed.Reason(i).String() != name; i++ {
	}
	return i
}

func knownReason(name string) bool { return reasonIndex(name) < shed.NumReasons }

// names decodes the decision, reason and outcome names.
func (r *Reader) names(rec *Record, l *line) error {
	if l.D != "" {
		d, ok := lookup(decisionNames[:], l.D)
		if !ok {
			return r.errf("%s: unknown decision %q", rec.Kind, l.D)
		}
		rec.Decision = Decision(d)
	}
	if l.R != "" {
		i := reasonIndex(l.R)
		if i == shed.NumReasons {
			return r.errf("%s: unknown reason %q", rec.Kind, l.R)
		}
		rec.Reason = shed.Reason(i)
	}
	if l.O != "" {
		o, ok := lookup([]string{"success", "dropped", "ignored"}, l.O)
		if !ok {
			return r.errf("%s: unknown outcome %q", rec.Kind, l.O)
		}
		rec.Outcome = shed.Outcome(o)
	}
	return nil
}

func lookup(names []string, s string) (int, bool) {
	for i, n := range names {
		if n == s {
			return i, true
		}
	}
	return 0, false
}

func (r *Reader) tick(rec *Record, l *line) error {
	if len(l.Arr) > shed.MaxClasses || len(l.Shed) > shed.MaxClasses || len(l.Done) > shed.MaxClasses || len(l.Ref) > shed.MaxClasses {
		return r.errf("tick: more than %d classes", shed.MaxClasses)
	}
	if l.Limit < 0 || l.Limit > math.MaxInt32 {
		return r.errf("tick: limit %d out of range", l.Limit)
	}
	rec.Tick = &Tick{Limit: l.Limit, InFlight: l.N, Arrivals: l.Arr, Shed: l.Shed, Done: l.Done, Refused: l.Ref, Lost: l.Lost,
		SampleEvery: max(l.Every, 1)}
	return nil
}
