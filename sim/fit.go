package sim

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// FitOptions configures a Fitter. Zero fields take the defaults.
type FitOptions struct {
	// Name is the fitted scenario's name. Default "fitted".
	Name string
	// Interval is the resolution of the fit: rates, latencies and
	// saturation are judged per Interval, and the scenario's schedules
	// and series use it. Counts between ticks further apart are spread
	// evenly over the intervals between them. Default 1s.
	Interval time.Duration
	// MaxSteps bounds the rate changes in each class's schedule.
	// Default 20.
	MaxSteps int
	// Seed seeds the reservoir sampling of latencies and costs, so that
	// a fit is reproducible. Default 1.
	Seed uint64
	// Discipline is the fitted upstream's discipline (Upstream.Discipline):
	// a recording does not tell FIFO from PS, its owner may. Default FIFO.
	Discipline Discipline
}

// Reservoir sizes: enough samples for quantiles to 1%, bounded memory
// for a recording of any length.
const (
	fitLatencySamples = 200_000
	fitCostSamples    = 50_000
)

// Fitter builds a scenario from a recording (package record): feed it
// every record with Add (after Source, for each file), then call Fit. It keeps per-interval totals and
// bounded samples, so a recording of any length fits in little memory.
//
// It infers each class's arrival rate over time, 429s included (a request
// a rate limit refused was offered all the same), 413s not (a request
// refused on sight was no work, and never could be: ClassFit.Refused),
// its tenants (KeysFit,
// when the records carry keys), its costs, the
// upstream's service time and capacity, and, for a class whose records
// show at least FitMinRateLimited 429s, its rate limit (see
// RateLimitFit): without it the fitted scenario would send the limiter
// traffic the service never admitted. The 429s are in a recording made
// by a middleware's Recorder (net/http, Echo, gRPC), or through Observers when
// the recorder is both the limiter's and the middleware's
// (shedhttp.Options.Observer). From the calls to the shared store that
// shedredis records (record.KindStore) it infers the scenario's
// service.store (see StoreFit and FitMinStoreCalls). Store records have
// no class and place nothing on the timeline.
//
// Records come roughly in time order, but a few may be dated wrong (a
// caller's clock ahead, a bad timestamp), and counted where they say they
// came they would stretch the fitted timeline to their date. So: a record
// dated more than ten intervals (at least a minute) after the latest time
// the fit has taken, or a tick dated before the last tick taken whose
// counts go on from it, is held aside until the recording shows which
// way time went. A tick back near the fit's timeline, or the end of the
// recording, sets the held records aside (a note of the Fit counts them),
// while a second, later tick beyond it, or 1,024 records held, shows that
// time went on there, and they are taken.
//
// The first records have nothing before them to be judged against: the
// timeline starts at the median time of the first 16, and those far from
// it are set aside as well (see fitProbe).
//
// Once Source has given a header, classes are matched by name across
// files, and ranked as the headers rank them (see fit_classes.go; and
// ErrInvalidRecording for the recordings that cannot be).
type Fitter struct {
	opt   FitOptions
	dt    int64 // cell length, ns
	start int64 // Unix ns of cell 0
	began bool
	names [shed.MaxClasses]string
	cells fitCells
	prev  *fitTick
	ticks int
	rng   *rand.Rand

	lat     reservoir // latencies of timed successes, by cell
	cost    [shed.MaxClasses]reservoir
	actual  [shed.MaxClasses]reservoir
	ratio   [shed.MaxClasses]reservoir // actual / estimate, from whole requests
	records int
	lost    uint64
	every   uint64 // the sparsest sampling seen
	limits  [2]int // smallest and largest tick limit
	outside int    // records whose times fall outside the span
	shedBy  [shed.NumReasons]int

	// What the records tell about rate limits (see fit_ratelimit.go).
	rlRecords [shed.MaxClasses]int
	bursts    [shed.MaxClasses]*burstRing

	// The key hashes of the records of arrivals (see fit_keys.go).
	unkeyed  [shed.MaxClasses]int
	hashings keyHashings

	// Classes by name across files (see fit_classes.go): used marks the
	// classes records came for.
	classes fitClassMap
	used    [shed.MaxClasses]bool
	err     error // what stops the fit (ErrInvalidRecording)

	// Records dated far from the rest (see fit_skew.go).
	hold     fitHold
	timeline fitTimeline
	probe    fitProbeState // the first records (see fitProbe)

	// Refusals at a tenant's cap (see fit_keyconc.go).
	keyConc fitKeyConc

	// The calls to the shared store (see fit_store.go).
	store fitStoreCalls
}

// fitCells are the per-interval totals, one slice element per cell.
type fitCells struct {
	arr, shed, done [shed.MaxClasses][]float64
	expo            []float64 // seconds covered by ticks
	latSum, latN    []float64 // timed successes and drops
	inflSum, inflN  []float64 // tick samples of the work in flight
	// shedRec and rlRec count the sampled records of rejections (and
	// cancellations) and of 429s among them, by decision time;
	// tooLargeRec those for a cost too large (see fit_refused.go).
	shedRec, rlRec, tooLargeRec [shed.MaxClasses][]float64
	// ref counts the requests refused before admission (Tick.Refused).
	ref [shed.MaxClasses][]float64
	// partial marks the cells whose records are a sample, or lost some:
	// from a tick in them with SampleEvery > 1 or a higher Lost.
	partial []bool
}

type fitTick struct {
	t                    int64
	arr, shed, done, ref []uint64
	// from is the start of the span the tick closes, when closes: a
	// tick at the same instant adds its counts to that span.
	from   int64
	closes bool
}

// ErrInvalidConfig is wrapped by the errors NewFitter returns for invalid
// FitOptions.
var ErrInvalidConfig = errors.New("sim: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: FitOptions.%s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// NewFitter returns a Fitter, or an error naming the invalid option
// (wrapping ErrInvalidConfig).
func NewFitter(opt FitOptions) (*Fitter, error) {
	if opt.Name == "" {
		opt.Name = "fitted"
	}
	if opt.Interval < 0 {
		return nil, configError("Interval", "must be >= 0, got %v", opt.Interval)
	}
	if opt.Interval == 0 {
		opt.Interval = time.Second
	}
	if opt.MaxSteps < 0 || opt.MaxSteps > 1000 {
		return nil, configError("MaxSteps", "must be in [0, 1000], got %d", opt.MaxSteps)
	}
	if opt.MaxSteps == 0 {
		opt.MaxSteps = 20
	}
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	if int(opt.Discipline) >= len(disciplineNames) {
		return nil, configError("Discipline", "must be FIFO or PS, got %d", opt.Discipline)
	}
	f := &Fitter{opt: opt, dt: int64(opt.Interval), rng: newStream(opt.Seed, "fit"), limits: [2]int{math.MaxInt, 0}}
	f.lat.init(fitLatencySamples)
	for i := range f.cost {
		f.cost[i].init(fitCostSamples)
		f.actual[i].init(fitCostSamples)
		f.ratio[i].init(fitCostSamples)
	}
	return f, nil
}

// FitRecording reads every record of rd and fits a scenario to them.
func FitRecording(rd *record.Reader, opt FitOptions) (*Fit, error) {
	f, err := NewFitter(opt)
	if err != nil {
		return nil, err
	}
	var file, hashing, keysrc string
	var classes []string
	for n := 0; ; n++ {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h, _ := rd.Header(); n == 0 || rd.File() != file || h.KeyHashing != hashing || h.KeySource != keysrc || !slices.Equal(h.Classes, classes) {
			file, hashing, keysrc, classes = rd.File(), h.KeyHashing, h.KeySource, h.Classes
			f.Source(file, h)
			if f.err != nil {
				return nil, f.err
			}
		}
		f.Add(r)
	}
	return f.Fit()
}

// fitMaxCells bounds the span of a fit (12 days of 1 s intervals: fit
// longer recordings with a longer Interval), and its memory, whatever
// times a damaged recording holds.
const fitMaxCells = 1 << 20

// cell returns the cell of Unix time t (ns), growing the cells. Times
// within a cell before the first (records slightly out of order) go to
// it; times further out are not in the span (ok false), and counted.
func (f *Fitter) cell(t int64) (int, bool) {
	i, ok := f.index(t)
	if !ok {
		f.outside++
		return 0, false
	}
	f.cells.grow(i + 1)
	return i, true
}

// index returns the cell of Unix time t (ns), as cell does, without
// growing the cells or counting the times outside the span. It takes
// differences in uint64: a damaged recording's times may lie up to 2^64
// ns apart, which int64 wraps into negative cells.
func (f *Fitter) index(t int64) (int, bool) {
	if !f.began {
		f.start, f.began = t-t%f.dt, true
	}
	dt := uint64(f.dt)
	if t < f.start {
		return 0, uint64(f.start)-uint64(t) <= dt
	}
	i := (uint64(t) - uint64(f.start)) / dt
	if i >= fitMaxCells {
		return 0, false
	}
	return int(i), true
}

func (c *fitCells) grow(n int) {
	for len(c.expo) < n {
		c.expo = append(c.expo, 0)
		c.latSum, c.latN = append(c.latSum, 0), append(c.latN, 0)
		c.inflSum, c.inflN = append(c.inflSum, 0), append(c.inflN, 0)
		c.partial = append(c.partial, false)
	}
}

// Source tells the fit that the records added next come from file ("" for
// a stream) under header h, so that keys hashed differently
// (h.KeyHashing) are not counted as more tenants (see KeysFit.Excluded),
// and where their keys came from (h.KeySource, see Fit.KeySource).
// Without it, the keys are counted together, their hashing and source
// unknown, and the records' class indices are the fit's classes. With
// it, h.Classes names the indices of the records added next, and classes
// are matched by name across files; a header that names two classes
// alike makes Fit fail (ErrInvalidRecording).
func (f *Fitter) Source(file string, h record.Header) {
	// The records collected so far are the previous source's: their keys
	// count under its hashing.
	f.endProbe()
	f.store.source() // another replica's store calls, maybe
	f.hashings.source(file, h.KeyHashing, h.KeySource)
	f.sourceClasses(file, h)
}

// Add feeds one record to the fit. A record dated far from the rest may
// be held aside (see Fitter).
func (f *Fitter) Add(r record.Record) {
	if f.err != nil || r.Time.IsZero() || int(r.Class) >= shed.MaxClasses || (r.Kind == record.KindTick && r.Tick == nil) {
		return
	}
	f.records++
	if r.Kind == record.KindStore {
		f.storeRecord(&r) // no class, no request: nothing for the timeline
		return
	}
	if f.mapClass(&r) {
		f.admit(r)
	}
}

// add feeds a record other than a tick to the fit, its class the fit's.
func (f *Fitter) add(r *record.Record) {
	c := r.Class
	refused := f.refusedRecord(r)
	if r.Kind == record.KindRefused {
		f.keyConc.keyCapRecord(r)
		f.keyRecord(r) // a tenant's 429 counts among its requests
		return         // no work, no cost: the ticks count it (see withoutRefused)
	}
	if r.Cost > 0 && !refused {
		f.cost[c].add(f.rng, 0, float64(r.Cost))
	}
	if r.Actual > 0 {
		f.actual[c].add(f.rng, 0, float64(r.Actual))
	}
	if r.Kind == record.KindRequest && r.Cost > 0 && r.Actual > 0 {
		f.ratio[c].add(f.rng, 0, float64(r.Actual)/float64(r.Cost))
	}
	if r.Kind == record.KindRejected || (r.Kind == record.KindRequest && r.Decision == record.Rejected) {
		f.shedBy[r.Reason]++
	}
	f.rateRecord(r)
	f.keyRecord(r)
	admitted := r.Kind == record.KindReleased || (r.Kind == record.KindRequest && r.Decision == record.Admitted)
	if !admitted || !r.Timed || r.Outcome == shed.Ignored {
		return
	}
	end := r.Time
	if r.Kind == record.KindRequest {
		end = end.Add(r.Wait + r.Latency)
	}
	i, ok := f.cell(end.UnixNano())
	if !ok {
		return
	}
	v := float64(r.Latency)
	f.cells.latSum[i] += v
	f.cells.latN[i]++
	if r.Outcome == shed.Success {
		f.lat.add(f.rng, int32(i), v)
	}
}

// tick spreads the counts since the previous tick over the cells the span
// covers, in proportion to the overlap.
func (f *Fitter) tick(t int64, tk *record.Tick) {
	i, ok := f.cell(t)
	if !ok {
		return
	}
	f.ticks++
	if tk.SampleEvery > 1 || tk.Lost > f.lost {
		f.cells.partial[i] = true
	}
	f.lost = max(f.lost, tk.Lost)
	f.every = max(f.every, tk.SampleEvery)
	if tk.Limit > 0 {
		f.limits = [2]int{min(f.limits[0], tk.Limit), max(f.limits[1], tk.Limit)}
	}
	f.cells.inflSum[i] += float64(tk.InFlight)
	f.cells.inflN[i]++
	cur := &fitTick{t: t, arr: tk.Arrivals, shed: tk.Shed, done: tk.Done, ref: tk.Refused}
	p := f.prev
	f.prev = cur
	if p == nil || t < p.t || fell(p.arr, cur.arr) || fell(p.shed, cur.shed) || fell(p.done, cur.done) || fell(p.ref, cur.ref) {
		return // the first tick, or a restarted recorder: a new segment
	}
	if t == p.t {
		// A tick at the instant of the one before (a recorder's Stop
		// after a quiet spell) adds the counts since to the span that
		// tick closed, which covers their time already.
		if p.closes {
			cur.from, cur.closes = p.from, true
			f.spread(p.from, p, cur, false)
		}
		return
	}
	cur.from, cur.closes = p.t, true
	f.spread(p.t, p, cur, true)
}

// spread adds the counts from p to cur over the cells of the span from
// from to cur.t, in proportion to the overlap, and the span's time to
// the cells' exposure when expose says so.
func (f *Fitter) spread(from int64, p, cur *fitTick, expose bool) {
	t := cur.t
	a := max(from, f.start)
	first, _ := f.cell(a)
	last, _ := f.index(t)
	for j := first; j <= last; j++ {
		lo := f.start + int64(j)*f.dt
		hi := lo + min(f.dt, math.MaxInt64-lo) // the last cell of time ends there
		over := min(hi, t) - max(lo, a)
		if over <= 0 {
			continue
		}
		w := float64(over) / float64(t-from)
		if expose {
			f.cells.expo[j] += float64(over) / 1e9
		}
		for c := range shed.MaxClasses {
			f.addCount(&f.cells.arr[c], j, w*diff(p.arr, cur.arr, c))
			f.addCount(&f.cells.shed[c], j, w*diff(p.shed, cur.shed, c))
			f.addCount(&f.cells.done[c], j, w*diff(p.done, cur.done, c))
			f.addCount(&f.cells.ref[c], j, w*diff(p.ref, cur.ref, c))
		}
	}
}

func (f *Fitter) addCount(s *[]float64, j int, v float64) {
	if v == 0 && len(*s) == 0 {
		return // a class never seen keeps no cells
	}
	for len(*s) <= j {
		*s = append(*s, 0)
	}
	(*s)[j] += v
}

// fell reports whether a cumulative counter went down.
func fell(prev, cur []uint64) bool {
	for i := range min(len(prev), len(cur)) {
		if cur[i] < prev[i] {
			return true
		}
	}
	return len(cur) < len(prev)
}

func diff(prev, cur []uint64, c int) float64 {
	if c >= len(cur) {
		return 0
	}
	p := uint64(0)
	if c < len(prev) {
		p = prev[c]
	}
	return float64(cur[c] - p)
}

// reservoir keeps a uniform sample of at most cap values (Algorithm R),
// each with the cell it came from.
type reservoir struct {
	cap   int
	seen  int
	v     []float64
	cells []int32
}

func (r *reservoir) init(n int) { r.cap = n }

func (r *reservoir) add(rng *rand.Rand, cell int32, v float64) {
	r.seen++
	if len(r.v) < r.cap {
		r.v, r.cells = append(r.v, v), append(r.cells, cell)
		return
	}
	if j := rng.IntN(r.seen); j < r.cap {
		r.v[j], r.cells[j] = v, cell
	}
}

// values returns the sampled values (a copy), of the cells keep accepts.
func (r *reservoir) values(keep func(cell int) bool) []float64 {
	out := make([]float64, 0, len(r.v))
	for i, v := range r.v {
		if keep == nil || keep(int(r.cells[i])) {
			out = append(out, v)
		}
	}
	return out
}

// errShortRecording: nothing to fit.
var errShortRecording = errors.New("sim: fit: the recording is too short: it needs two ticks (a tick period apart) and some latencies")

// className returns class c's name, or "classN".
func (f *Fitter) className(c int) string {
	if f.names[c] != "" {
		return f.names[c]
	}
	return "class" + strconv.Itoa(c)
}

// classCount returns how many classes the recording shows.
func (f *Fitter) classCount() int {
	n := 0
	for c := range shed.MaxClasses {
		if len(f.cells.arr[c]) > 0 || f.used[c] || f.cost[c].seen > 0 {
			n = c + 1
		}
	}
	return n
}

func (f *Fitter) String() string {
	return fmt.Sprintf("Fitter{%d records, %d ticks, %d cells}", f.records, f.ticks, len(f.cells.expo))
}
