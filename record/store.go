package record

// StoreOp is the call to a shared store (Redis) a KindStore record
// times: which of shedredis's operations.
type StoreOp uint8

const (
	// StoreAllow is a rate-limit decision (shedredis.Store).
	StoreAllow StoreOp = iota + 1
	// StoreAcquire takes a concurrency lease (shedredis.Concurrency).
	StoreAcquire
	// StoreRelease removes a lease.
	StoreRelease
	// StoreRenew renews a replica's leases (off the request path).
	StoreRenew
	// StoreCleanup removes, after a renewal, the leases released while
	// it was out, which it may have written back: off the request path,
	// within the renewal's time budget, so that it is not a release.
	// Readers before it skip its lines (an operation they do not know).
	StoreCleanup
)

var storeOpNames = [...]string{"", "allow", "acquire", "release", "renew", "cleanup"}

// String returns the operation's name as written in the file ("allow",
// "acquire", "release", "renew", "cleanup").
func (o StoreOp) String() string {
	if o != 0 && int(o) < len(storeOpNames) {
		return storeOpNames[o]
	}
	return "unknown"
}

// StoreResult is how a call to the shared store ended.
type StoreResult uint8

const (
	// StoreOK: the store answered within the time budget.
	StoreOK StoreResult = iota
	// StoreTimeout: the time budget ran out (shedredis.CauseTimeout).
	StoreTimeout
	// StoreError: the call failed otherwise (shedredis.CauseError).
	StoreError
	// StoreBreakerOpen: the open breaker skipped the call, which took
	// no time (shedredis.CauseBreakerOpen).
	StoreBreakerOpen
	// StoreCanceled: the caller stopped waiting (its context ended),
	// which says nothing about the store: the duration is a lower bound.
	StoreCanceled
)

var storeResultNames = [...]string{"ok", "timeout", "error", "breaker_open", "canceled"}

// String returns the result's name as written in the file ("ok",
// "timeout", "error", "breaker_open", "canceled").
func (s StoreResult) String() string {
	if int(s) < len(storeResultNames) {
		return storeResultNames[s]
	}
	return "unknown"
}

// StoreCall counts a call to the shared store and reports whether to
// record it, sampled as the requests are: then the caller Adds a
// KindStore record of it. It costs one atomic add; a driver reads the
// clock for the call whether or not it is recorded (shedredis times
// every call for its duration metric), so the sampling saves only the
// hand-over.
func (r *Recorder) StoreCall() bool {
	return r.storeSeq.Add(1)&r.mask.Load() == 0
}

// storeFits reports whether the format can hold rec, a KindStore record.
func storeFits(rec *Record) bool {
	return rec.Op != 0 && int(rec.Op) < len(storeOpNames) && int(rec.Result) < len(storeResultNames) &&
		rec.Timed && rec.Latency >= 0 && rec.Class == 0 && rec.Key == 0
}

// addStore hands over rec, a KindStore record that fits. It moves no
// tick and not the recorder's time: the records of the requests the
// calls were made for do.
func (r *Recorder) addStore(rec *Record) {
	if !inUnixNano(rec.Time) {
		return
	}
	r.push(entry{kind: KindStore, t: rec.Time.UnixNano(), lat: int64(rec.Latency), op: uint8(rec.Op), res: uint8(rec.Result),
		flags: flagTimed})
}

// appendStore encodes a KindStore entry.
func appendStore(b []byte, e *entry, epoch int64) []byte {
	b = append(b, `{"k":"store"`...)
	b = appendField(b, "t", e.t-epoch)
	b = appendName(b, "op", StoreOp(e.op).String())
	b = appendField(b, "lat", e.lat)
	b = appendName(b, "res", StoreResult(e.res).String())
	return append(b, "}\n"...)
}
