package record

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ErrStopped is returned by Start once the recorder was stopped.
var ErrStopped = errors.New("record: recorder stopped")

// ErrRunning is returned by Start when the writer already runs.
var ErrRunning = errors.New("record: writer already running")

// Start starts the writer goroutine: it writes the records as they come
// and flushes every Config.FlushEvery. Stop ends it. A recorder that is
// never started writes only when Flush is called.
func (r *Recorder) Start() error {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	switch {
	case r.stopped:
		return ErrStopped
	case r.running:
		return ErrRunning
	}
	r.running = true
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go r.run(r.stop, r.done)
	return nil
}

// Stop ends the writer goroutine (if it runs), writes what is buffered,
// flushes and closes the current file (never a Config.Writer). Records
// that come afterwards are dropped and counted. It returns the first
// write error, and is idempotent. It waits for the output as long as it
// takes: a service's shutdown should use StopContext.
func (r *Recorder) Stop() error { return r.stopNow() }

// StopContext is Stop bounded by ctx: when ctx ends first (an output
// stuck in Write, a hung mount), it returns an error wrapping ctx's at
// once, and the recorder finishes stopping in the background if the
// output ever returns. Records that come after the call are dropped and
// counted either way.
func (r *Recorder) StopContext(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- r.stopNow() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("record: stop: the output did not finish: %w", ctx.Err())
	}
}

func (r *Recorder) stopNow() error {
	r.runMu.Lock()
	if !r.stopped {
		r.stopped = true
		r.ended.Store(true)
		if r.running {
			close(r.stop)
			<-r.done
			r.running = false
		}
	}
	r.runMu.Unlock()
	// A last tick closes the counts at the last time seen.
	if t := r.lastT.Load(); t != 0 {
		r.tick(t, 0, true)
	}
	err := r.Flush()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if cerr := r.out.close(); err == nil {
		err = cerr
	}
	r.out.final = true
	return err
}

// run is the writer goroutine.
func (r *Recorder) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(r.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case e := <-r.ch:
			r.wmu.Lock()
			r.writeEntry(&e)
			r.drainLocked(len(r.ch))
			r.wmu.Unlock()
		case <-t.C:
			r.Flush()
		case <-stop:
			return
		}
	}
}

// Flush writes the buffered records and ticks and flushes them to the
// file, on the caller's goroutine. Drivers that do not start the writer
// (simulators, tests) call it. It returns the first write error. With
// Config.Dir, a Flush after a write error (a directory removed, a disk
// full) writes again, in a new file.
func (r *Recorder) Flush() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.out.retry()
	r.drainLocked(len(r.ch))
	r.writeTicksLocked()
	r.out.flush()
	return r.out.first
}

// drainLocked writes up to n buffered records (n bounds the work when
// producers keep adding), then the pending ticks.
func (r *Recorder) drainLocked(n int) {
loop:
	for range n {
		select {
		case e := <-r.ch:
			r.writeEntry(&e)
		default:
			break loop
		}
	}
	r.writeTicksLocked()
}

func (r *Recorder) writeTicksLocked() {
	r.out.tickBuf = r.takeTicks(r.out.tickBuf)
	for i := range r.out.tickBuf {
		te := &r.out.tickBuf[i]
		r.out.line = appendTick(r.out.line[:0], te, r.out.epochFor(te.t), r.classCount(te))
		if !r.out.put(te.t, r) {
			r.lost.Add(1)
		}
	}
}

func (r *Recorder) writeEntry(e *entry) {
	r.out.line = appendEntry(r.out.line[:0], e, r.out.epochFor(e.t))
	if !r.out.put(e.t, r) {
		r.lost.Add(1)
	}
}

// classCount is how many per-class counters a tick writes: those of the
// named classes and of every class that counted something, at least one.
func (r *Recorder) classCount(te *tickEntry) int {
	n := max(len(r.classNames()), 1)
	for i := n; i < len(te.arr); i++ {
		if te.arr[i]|te.shed[i]|te.done[i]|te.ref[i] != 0 {
			n = i + 1
		}
	}
	return n
}

// sink is the writer's side: the current file or stream.
type sink struct {
	dir      string
	stream   io.Writer
	maxBytes int64
	maxFiles int
	f        *os.File
	bw       *bufio.Writer
	size     int64
	seq      int // number of the current file
	open     bool
	final    bool  // stopped: nothing more is written
	epoch    int64 // Unix ns that record times count from
	err      error // what stops the writing until retry clears it
	first    error // the first write error, which Flush and Stop return
	hdrBytes int64 // the current file's header
	// Published for Stats, which must not wait for a writer that is
	// stuck in a Write holding the writer's lock.
	files   atomic.Int64
	written atomic.Uint64
	bytes   atomic.Int64
	errp    atomic.Pointer[error]
	line    []byte // the line being written
	hdr     []byte // the current file's header
	tickBuf []tickEntry
}

func (s *sink) init(cfg *Config) error {
	s.dir, s.stream, s.maxBytes, s.maxFiles = cfg.Dir, cfg.Writer, cfg.MaxFileBytes, cfg.MaxFiles
	if s.dir == "" {
		s.bw = bufio.NewWriterSize(s.stream, 64<<10)
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return configError("Dir", "%v", err)
	}
	files, err := listFiles(s.dir)
	if err != nil {
		return configError("Dir", "%v", err)
	}
	if len(files) > 0 {
		s.seq = fileSeq(files[len(files)-1])
	}
	return nil
}

// epochFor returns the epoch a line dated t (Unix ns) is written
// against: the current file's, or the one ready gives the file it starts
// for that line.
func (s *sink) epochFor(t int64) int64 {
	if s.open {
		return s.epoch
	}
	return t - t%int64(time.Second)
}

// put writes s.line, a record dated t, in the current file, or in one it
// starts.
func (s *sink) put(t int64, r *Recorder) bool { return s.ready(t, r) && s.write(r) }

// ready makes sure a file (or the stream) is open with its header, the
// epoch taken from t (Unix ns), the time of s.line, the first record it
// will hold.
func (s *sink) ready(t int64, r *Recorder) bool {
	if s.err != nil || s.final {
		return false
	}
	if s.open {
		return true
	}
	s.hdr = appendHeader(s.hdr[:0], s.epochFor(t), r.classNames(), r.cfg.TickEvery, r.keys.Hashing(), r.keySourceNow())
	if int64(len(s.hdr)+len(s.line)) > s.maxBytes {
		// No file can hold the header and this line within MaxFileBytes:
		// the line is dropped and counted (Stats.Lost) rather than
		// written past the cap, and no file is started for a header
		// alone. The header's size is known only now (the limiter's
		// class names, the key source), so New cannot refuse the cap.
		return false
	}
	if s.dir != "" {
		if err := s.next(); err != nil {
			s.fail(err)
			return false
		}
	}
	s.epoch = s.epochFor(t)
	s.open = true
	s.files.Add(1)
	s.hdrBytes = int64(len(s.hdr))
	return s.writeBytes(s.hdr, false)
}

// write writes s.line, rotating first when it would pass the size cap;
// over the cap of a stream it drops the line. A line that would not fit
// in a new file either, after its header, is dropped too: rotating for it
// would start a file that holds a header alone.
func (s *sink) write(r *Recorder) bool {
	if s.size+int64(len(s.line)) > s.maxBytes {
		if s.dir == "" || s.hdrBytes+int64(len(s.line)) > s.maxBytes {
			return false
		}
		if err := s.rotate(); err != nil {
			s.fail(err)
			return false
		}
		// The same epoch: the line was encoded against it. ready checks
		// that a new header, longer after a key source was told, leaves
		// room for the line.
		if !s.ready(s.epoch, r) {
			return false
		}
	}
	return s.writeBytes(s.line, true)
}

// writeBytes writes b, a header or (record) a record's line.
func (s *sink) writeBytes(b []byte, record bool) bool {
	if _, err := s.bw.Write(b); err != nil {
		s.fail(err)
		return false
	}
	s.size += int64(len(b))
	s.bytes.Store(s.size)
	if record {
		s.written.Add(1)
	}
	return true
}

// rotate closes the current file; the next record opens another.
func (s *sink) rotate() error { return s.close() }

// next opens the next file of the directory and deletes the oldest ones
// beyond maxFiles.
func (s *sink) next() error {
	s.seq++
	name := filepath.Join(s.dir, fmt.Sprintf("record-%06d.jsonl", s.seq))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	s.f, s.size = f, 0
	s.bytes.Store(0)
	if s.bw == nil {
		s.bw = bufio.NewWriterSize(f, 64<<10)
	} else {
		s.bw.Reset(f)
	}
	files, err := listFiles(s.dir)
	if err != nil {
		return err
	}
	for len(files) > s.maxFiles {
		if err := os.Remove(filepath.Join(s.dir, files[0])); err != nil {
			return err
		}
		files = files[1:]
	}
	return nil
}

func (s *sink) flush() error {
	if s.err == nil && s.bw != nil && s.open {
		if err := s.bw.Flush(); err != nil {
			s.fail(err)
		}
	}
	return s.err
}

// fail stops the writing until retry, and keeps the first write error.
func (s *sink) fail(err error) {
	s.err = err
	if s.first == nil {
		s.first = err
		s.errp.Store(&err)
	}
}

// retry lets a directory's writing resume after an error, in a new file:
// a disk full or a directory removed for a while must not end the
// recording for the life of the process. It runs at each flush, which
// bounds the attempts to one per FlushEvery. The failed file is closed
// (a line it ends with, cut, readers skip) and deleted when no record
// reached it, so that a disk that stays full does not rotate the older
// files away with empty ones. A stream stays failed: what reached it of
// a line cannot be told, and the next line would be glued to it.
func (s *sink) retry() {
	if s.err == nil || s.dir == "" || s.final {
		return
	}
	if s.f != nil {
		name := s.f.Name()
		_ = s.f.Close() // it failed already
		s.f = nil
		if fi, err := os.Stat(name); err == nil && fi.Size() <= s.hdrBytes && os.Remove(name) == nil {
			s.seq-- // its number is free again
		}
	}
	s.open = false
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		s.err = err
		return
	}
	s.err = nil
}

// close flushes and closes the current file; a stream is only flushed.
func (s *sink) close() error {
	err := s.flush()
	s.open = false
	if s.f != nil {
		if cerr := s.f.Close(); err == nil && cerr != nil {
			err = cerr
			s.fail(cerr)
		}
		s.f = nil
	}
	return err
}

// listFiles returns the recording's file names in dir, oldest first.
func listFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && fileSeq(n) > 0 {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return fileSeq(a) - fileSeq(b) })
	return out, nil
}

// fileSeq returns the number of a file named record-NNNNNN.jsonl, or 0.
func fileSeq(name string) int {
	rest, ok := strings.CutPrefix(name, "record-")
	if !ok {
		return 0
	}
	num, ok := strings.CutSuffix(rest, ".jsonl")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
