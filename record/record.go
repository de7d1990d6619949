package record

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// Kind says what a Record describes.
type Kind uint8

const (
	// KindRequest is a whole request seen by a driver that sees both ends
	// of it (the net/http middleware): arrival, decision, queue wait,
	// latency, outcome, estimated and actual cost.
	KindRequest Kind = iota + 1
	// KindAdmitted, KindRejected and KindCancelled are a limiter's
	// decisions, recorded through [shed.Observer]: an admission (at once,
	// or after waiting when Queued), a rejection, a queued request that
	// gave up. Time is the decision's; the arrival is Time - Wait.
	KindAdmitted
	KindRejected
	KindCancelled
	// KindReleased is a limiter's release of a permit (through
	// shed.Observer): Time is the release, Latency how long the permit
	// was held when Timed, Actual the cost after any reconciliation.
	KindReleased
	// KindTick is a periodic sample: the limit, the work in flight and
	// the recorder's exact per-class counters (see Tick).
	KindTick
	// KindRefused is a request its driver refused on sight, before
	// admission, for a reason the limiter never saw: the middleware's 413
	// for a body larger than shedhttp.Options.MaxBodyBytes (Reason
	// none), or shedredis.ConcurrencyMiddleware's 429 for a tenant at its
	// cap of requests in flight (Reason shed.ReasonKeyConcurrency, Key
	// the tenant's, InFlight the tenant's requests in flight counted: its
	// cap). Time is its arrival (and the refusal), Status the response,
	// Class the one the driver's own classification gave it (no Classify
	// function runs for it). Ticks count these apart (Tick.Refused), not
	// among the arrivals: they never reached admission, and were no work.
	KindRefused
	// KindStore times one call to a shared store (Redis) of the
	// service's shared limits, as shedredis makes it (with
	// Config.Recorder): Time is the call's start, Latency (Timed) how
	// long it took, Op which call, Result how it ended. It has no class
	// and no key, counts in no tick and moves none: it is no request.
	KindStore
)

var kindNames = [...]string{"", "req", "admit", "reject", "cancel", "release", "tick", "refuse", "store"}

// String returns the kind's name as written in the file ("req", "admit",
// "reject", "cancel", "release", "tick", "refuse", "store").
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Decision is the admission decision of a KindRequest record.
type Decision uint8

const (
	// Admitted: the request got a permit (at once or after waiting).
	Admitted Decision = iota
	// Rejected: the limiter or the rate limit turned it away (Reason).
	Rejected
	// Cancelled: its context ended while it waited in the queue.
	Cancelled
)

var decisionNames = [...]string{"admit", "reject", "cancel"}

// String returns "admit", "reject" or "cancel".
func (d Decision) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "unknown"
}

// Record is one line of a recording. Which fields are set depends on Kind;
// zero means unknown for the costs.
type Record struct {
	Kind Kind
	// Time is the request's arrival (KindRequest, KindRefused), the
	// decision (KindAdmitted, KindRejected, KindCancelled), the release
	// (KindReleased), the sample (KindTick) or the call's start
	// (KindStore).
	Time time.Time
	// Class is the request's class; ClassName its name, from the file's
	// header (the Reader fills it in).
	Class     shed.Class
	ClassName string
	// Decision is the admission decision of a KindRequest record.
	Decision Decision
	// Reason is why a request was rejected or, on an admission, why a
	// dry run would have rejected it.
	Reason shed.Reason
	// Cost is the cost the request reserved (its estimate); Actual the
	// cost it reported when it ended (after Permit.Reconcile).
	Cost, Actual int64
	// Queued reports that the request waited in the queue, for Wait.
	Queued bool
	Wait   time.Duration
	// Latency is how long the admitted work ran (held its permit), or a
	// KindStore call took, valid when Timed.
	Latency time.Duration
	Timed   bool
	// Outcome is how admitted work ended (KindRequest admitted,
	// KindReleased).
	Outcome shed.Outcome
	// Status is the HTTP status of a KindRequest or KindRefused record,
	// 0 when none (the gRPC interceptors record a call's code as the
	// HTTP status it maps to).
	Status int
	// InFlight is the limiter's work in flight after the decision or
	// release, when known.
	InFlight int
	// Key is the hash of the request's tenant (rate-limit) key, 0 for
	// none: KeyHash, or salted with Config.KeySalt (Recorder.KeyHash).
	// Recorders write it on the records of arrivals (KindRequest,
	// KindAdmitted, KindRejected, KindCancelled) and of refusals at a
	// tenant's cap (KindRefused), so that a fit can count the tenants and
	// their shares of the traffic; never the key itself.
	Key uint64
	// Op and Result are a KindStore record's call and how it ended.
	Op     StoreOp
	Result StoreResult
	// Tick is set on KindTick records.
	Tick *Tick
}

// Tick is a periodic sample. The counters are cumulative since the
// recorder's first tick, exact (neither sampled nor dropped), per class:
// the rates of arrival and completion over any span are differences
// between two ticks. The first tick, at the first time the recorder
// sees, counts nothing (what it had counted by then is in the next), so
// that the differences from it count every request. A recorder
// restarted from zero shows as counters that go down; readers start a
// new segment there.
type Tick struct {
	// Limit and InFlight are the watched limiter's, 0 when none is watched
	// (InFlight then comes from the event that triggered the tick).
	Limit, InFlight int
	// Arrivals counts requests that reached admission, Shed those
	// rejected or cancelled, Done admitted work that ended.
	Arrivals, Shed, Done []uint64
	// Refused counts requests refused on sight, before admission
	// (KindRefused), which Arrivals and Shed do not count; nil when none
	// was (the field is written only then).
	Refused []uint64
	// Lost counts records that were not written: dropped while the
	// writer was behind, over the size cap, or after a write error.
	Lost uint64
	// SampleEvery is the sampling in force from this tick on: one request
	// (or limiter event) in SampleEvery is recorded.
	SampleEvery uint64
}

// Header starts every file (and every stream) of a recording.
type Header struct {
	// Version of the format, 1.
	Version int
	// Epoch is the instant record times are counted from.
	Epoch time.Time
	// Classes names the classes by index.
	Classes []string
	// TickEvery is the period of the tick records.
	TickEvery time.Duration
	// KeyHashing is how the keys of the records (Record.Key) are hashed:
	// KeyHashingFNV1a (KeyHash), KeyHashingHMACPrefix and the salt's
	// fingerprint (KeyHasher), "" when the file does not say (written
	// before it could). Keys are comparable across files only when
	// their KeyHashing is the same. A Recorder writes its own
	// (Recorder.KeyHash's); keys passed to it hashed otherwise make it
	// wrong.
	KeyHashing string
	// KeySource is where the driver took the keys from, when it said
	// (Recorder.SetKeySource): KeySourceAddr, KeySourceClassify,
	// KeySourceHeaderPrefix and a header name, or a source of the
	// driver's own; "" when the file does not say (a driver that did not
	// tell, drivers that disagreed, or written before it could).
	KeySource string
}

// FormatName identifies a recording in its header line.
const FormatName = "shedkit-record"

// FormatVersion is the version of the file format this package writes.
const FormatVersion = 1

// Defaults applied to zero fields of Config.
const (
	// DefaultMaxFileBytes rotates (or, with Config.Writer, caps) a
	// recording at 64 MiB: about 500,000 records.
	DefaultMaxFileBytes = 64 << 20
	// DefaultMaxFiles keeps the ten newest files of a directory.
	DefaultMaxFiles = 10
	// DefaultBuffer holds this many records for the writer: a second of
	// records at the default sampling, eight times over.
	DefaultBuffer = 8192
	// DefaultMaxRecordsPerSecond records every request up to 1,000 per
	// second and every 2^k-th above: enough for distributions, cheap at
	// any rate.
	DefaultMaxRecordsPerSecond = 1000
	// DefaultTickEvery samples the limit and the counters every second,
	// the resolution of shedsim's schedules.
	DefaultTickEvery = time.Second
	// DefaultFlushEvery is how often the writer goroutine hands its buffer
	// to the file.
	DefaultFlushEvery = time.Second
)

// Config configures a Recorder. Exactly one of Dir and Writer is required;
// zero fields take the documented defaults.
type Config struct {
	// Dir is the directory of a recording on disk: files named
	// record-NNNNNN.jsonl, a new one started when the current one would
	// pass MaxFileBytes, the oldest deleted beyond MaxFiles. A recorder
	// continues the numbering of the files already there.
	Dir string
	// Writer receives the recording as one stream (tests, simulators,
	// pipes). Past MaxFileBytes, records are dropped and counted. The
	// recorder never closes it.
	Writer io.Writer
	// MaxFileBytes caps each file (or the Writer's stream). Default
	// DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxFiles is how many files of Dir are kept. Default DefaultMaxFiles.
	MaxFiles int
	// Buffer is how many records wait for the writer; when it is full,
	// new records are dropped and counted. Default DefaultBuffer.
	Buffer int
	// MaxRecordsPerSecond caps the records: above it, every 2^k-th
	// request (or limiter event, or store call) is recorded, with k
	// re-chosen at every tick from the rate of arrivals and store calls. Negative records everything (for
	// simulators). Default DefaultMaxRecordsPerSecond.
	MaxRecordsPerSecond float64
	// TickEvery is the period of the tick records, in the time of the
	// records themselves (the recorder has no clock). Default
	// DefaultTickEvery.
	TickEvery time.Duration
	// FlushEvery is how often the writer goroutine flushes to the file.
	// Default DefaultFlushEvery.
	FlushEvery time.Duration
	// Classes names the classes by index when no limiter is watched (see
	// Recorder.Watch): distinct names that CheckClassName accepts.
	Classes []string
	// KeySalt, when set, salts the hashes of tenant keys (see KeyHasher):
	// Recorder.KeyHash, which the net/http middleware uses, then returns
	// HMAC-SHA256(KeySalt, key) truncated to 64 bits, so that a recording
	// shipped off the host cannot be reversed without the salt. At least
	// MinKeySaltBytes; a non-nil shorter one (an empty secret) is an
	// error. Keep it secret and the same for as long as a recording is
	// fitted as one: a new salt counts every tenant anew. Default nil:
	// unsalted, KeyHash.
	KeySalt []byte
}

// MaxClassNameBytes bounds a class name in a header, so that a header of
// MaxClasses names, escaped, fits in a line (MaxLineBytes).
const MaxClassNameBytes = 512

// CheckClassName returns an error when name cannot name a class in a
// recording's header: when shed.CheckClassName refuses it (a line break,
// a terminal escape or a bidirectional override would change what fit
// reports, scenarios and tuned configurations say), or when it is longer
// than MaxClassNameBytes. The Reader refuses a header with such a name,
// so New refuses it in Config.Classes and Watch leaves a limiter's
// classes unnamed.
func CheckClassName(name string) error {
	if len(name) > MaxClassNameBytes {
		return fmt.Errorf("%d bytes, at most %d", len(name), MaxClassNameBytes)
	}
	return shed.CheckClassName(name)
}

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("record: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// validate checks c and returns a copy with the defaults filled in.
func (c Config) validate() (Config, error) {
	switch {
	case c.Dir == "" && c.Writer == nil:
		return c, configError("Dir", "one of Dir and Writer is required")
	case c.Dir != "" && c.Writer != nil:
		return c, configError("Writer", "set Dir or Writer, not both")
	}
	if c.MaxFileBytes < 0 {
		return c, configError("MaxFileBytes", "must be >= 0, got %d", c.MaxFileBytes)
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxFiles < 0 {
		return c, configError("MaxFiles", "must be >= 0, got %d", c.MaxFiles)
	}
	if c.MaxFiles == 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.Buffer < 0 || c.Buffer > 1<<24 {
		return c, configError("Buffer", "must be in [0, %d], got %d", 1<<24, c.Buffer)
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if math.IsNaN(c.MaxRecordsPerSecond) {
		return c, configError("MaxRecordsPerSecond", "must be a number")
	}
	if c.MaxRecordsPerSecond == 0 {
		c.MaxRecordsPerSecond = DefaultMaxRecordsPerSecond
	}
	if c.TickEvery < 0 {
		return c, configError("TickEvery", "must be >= 0, got %v", c.TickEvery)
	}
	if c.TickEvery == 0 {
		c.TickEvery = DefaultTickEvery
	}
	if c.FlushEvery < 0 {
		return c, configError("FlushEvery", "must be >= 0, got %v", c.FlushEvery)
	}
	if c.FlushEvery == 0 {
		c.FlushEvery = DefaultFlushEvery
	}
	if len(c.Classes) > shed.MaxClasses {
		return c, configError("Classes", "at most %d classes, got %d", shed.MaxClasses, len(c.Classes))
	}
	for i, n := range c.Classes {
		// The Reader refuses a header with such names: the whole
		// recording would be unreadable.
		if slices.Contains(c.Classes[:i], n) {
			return c, configError("Classes", "class %d: repeated name %q", i, n)
		}
		if err := CheckClassName(n); err != nil {
			return c, configError("Classes", "class %d: name %.40q: %v", i, n, err)
		}
	}
	c.Classes = append([]string(nil), c.Classes...)
	if c.KeySalt != nil {
		if err := checkSalt("KeySalt", c.KeySalt); err != nil {
			return c, err
		}
	}
	return c, nil
}

// KeyHash returns what a recording stores for the tenant key key: its
// 64-bit FNV-1a hash, 1 in place of 0 (which means no key), 0 for "". It
// is stable (the same key hashes the same in every process and release),
// so that a fit can count distinct tenants across a recording's files,
// and it allocates nothing. It pseudonymizes, it does not anonymize: a
// key drawn from a small space (an IPv4 address) is found again by
// hashing every candidate, so treat a recording as the logs it is, or
// salt it: Config.KeySalt (or a KeyHasher) hashes keys with a secret
// salt instead, and without it a key is not found again.
func KeyHash(key string) uint64 {
	if key == "" {
		return 0
	}
	// FNV-1a rather than a cryptographic hash: it costs about a
	// nanosecond a byte on the request path, and collisions only merge
	// two tenants' counts, 1 in 2^64 a pair.
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	return max(h, 1)
}
