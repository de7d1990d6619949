package core

import (
	"fmt"
	"net/http"
	"time"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// Recording is one request's part in the adapter's Config.Recorder: its
// class and estimated cost, and for a sampled request its arrival time
// and the hash of its rate-limit key. It is a value on the adapter's
// stack: an unsampled request allocates nothing for it.
type Recording struct {
	start time.Time // zero: not recorded (no recorder, or not sampled)
	class shed.Class
	cost  int64
	key   uint64
}

// SetRecorder makes e record a sample of its requests to rec (nil: none):
// rec watches the limiter, and is told where the keys come from (see
// KeySource). classify says that the adapter has a Classify function:
// the source then waits for the requests to show it (see Reclassified).
// The error, for a KeyHeader too long for a recording's header, names
// KeyHeader and wraps shedhttp.ErrInvalidConfig.
func (e *Engine) SetRecorder(rec *record.Recorder, classify bool) error {
	if rec == nil {
		return nil
	}
	src := e.KeySource(classify)
	if err := record.CheckKeySource(src); err != nil {
		return fmt.Errorf("%w: KeyHeader: %w: %w", shedhttp.ErrInvalidConfig, record.ErrInvalidConfig, err)
	}
	if src != "" && !classify {
		_ = rec.SetKeySource(src) // checked above
	}
	rec.Watch(e.lim)
	e.rec = rec
	return nil
}

// KeySource is where the middleware takes a request's rate-limit key
// from before any Classify function (classify: the adapter has one, and
// fills in the address for it), as a recording says it
// (record.Header.KeySource), "" when no request carries one.
func (e *Engine) KeySource(classify bool) string {
	switch {
	case e.keyHeader != "":
		// As the middleware reads it: canonical.
		return record.HeaderKeySource(e.keyHeader)
	case e.NeedsKey() || classify:
		return record.KeySourceAddr
	}
	return ""
}

// Reclassified takes the key a request had before the adapter's Classify
// function and the one after, and tells the recorder what the function
// did: kept (the header's or the address's key) or replaced
// (record.KeySourceClassify), the first time it does either. A function
// that sets only the class or the cost leaves the header's source, and
// shedsim tune its KeyHeader; one that does both makes the files that
// follow say no source, as for drivers that disagree.
func (e *Engine) Reclassified(before, after string) {
	if e.rec == nil {
		return
	}
	seen := reclassKept
	if before != after {
		seen = reclassReplaced
	}
	for s := e.reclassified.Load(); s&seen == 0; s = e.reclassified.Load() {
		if e.reclassified.CompareAndSwap(s, s|seen) {
			// Once for each: the source is built here, off the common path.
			src := record.KeySourceClassify
			if seen == reclassKept {
				src = e.KeySource(true)
			}
			_ = e.rec.SetKeySource(src) // checked by SetRecorder
			return
		}
	}
}

// What Reclassified has seen a Classify function do to keys.
const (
	reclassKept uint32 = 1 << iota
	reclassReplaced
)

// RecBegin counts a request that reaches admission, classified as cl,
// and, when the recorder samples it, reads the clock and hashes its key:
// only sampled requests pay for them.
func (e *Engine) RecBegin(cl shedhttp.Classification) Recording {
	if e.rec == nil {
		return Recording{}
	}
	rq := Recording{class: cl.Class, cost: max(cl.Cost, 1)}
	if e.rec.Arrive(cl.Class) {
		rq.start = e.clock()
		rq.key = e.rec.KeyHash(cl.Key) // salted when the recorder is; 0 when there is none
	}
	return rq
}

// RecRejected records a request that was not admitted (rej, as Admit or
// CheckBody returned it).
func (e *Engine) RecRejected(rq *Recording, rej shedhttp.Rejection) {
	if e.rec == nil {
		return
	}
	e.rec.Shed(rq.class)
	if rq.start.IsZero() {
		return
	}
	d := record.Rejected
	if rej.Reason == shed.ReasonNone && rej.Status == http.StatusServiceUnavailable {
		d = record.Cancelled // its context ended while it waited
	}
	e.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: d, Reason: rej.Reason,
		Cost: rq.cost, Status: rej.Status, InFlight: e.lim.InFlight(), Key: rq.key})
}

// recRefused records a request that was refused on sight with rej,
// before any classification or admission (a body over MaxBodyBytes), as
// record.KindRefused: a recording shows every request's decision, and a
// fit must not take it for work the service did or could have admitted.
// Its class is the middleware's own classification of r (route as for
// Classify): the adapter's Classify function does not run for it.
func (e *Engine) recRefused(r *http.Request, route string, rej shedhttp.Rejection) {
	if e.rec == nil {
		return
	}
	c := e.classOf(r, route)
	if e.rec.Refuse(c) {
		e.rec.Add(record.Record{Kind: record.KindRefused, Time: e.clock(), Class: c, Status: rej.Status, InFlight: e.lim.InFlight()})
	}
}

// RecDone records admitted work that ended with outcome o and the given
// status (0 when the handler panicked; see SentStatus), its actual cost
// read before the release. The latency runs from the admission (arrival
// + queue wait) to the handler's return, also when the handler released
// its permit early.
func (e *Engine) RecDone(rq *Recording, st *State, actual int64, o shed.Outcome, status int) {
	if e.rec == nil {
		return
	}
	e.rec.Done(rq.class)
	if rq.start.IsZero() {
		return
	}
	wait := st.Permit.Wait()
	lat := max(e.clock().Sub(rq.start)-wait, 0)
	e.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: record.Admitted,
		Reason: st.Permit.DryRun(), Cost: rq.cost, Actual: actual, Queued: wait > 0, Wait: wait, Latency: lat, Timed: true,
		Outcome: o, Status: status, InFlight: e.lim.InFlight(), Key: rq.key})
}

// SentStatus is the status net/http sent for a handler that wrote
// status: 200 when it wrote none.
func SentStatus(status int) int {
	if status == 0 {
		return http.StatusOK
	}
	return status
}
