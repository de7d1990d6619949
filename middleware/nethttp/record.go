package nethttp

import (
	"net/http"
	"time"

	"github.com/shedkit/shedkit/middleware/internal/core"
	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// recording is one request's part in Config.Recorder: its class and
// estimated cost, and for a sampled request its arrival time and the hash
// of its rate-limit key.
type recording struct {
	start time.Time // zero: not recorded (no recorder, or not sampled)
	class shed.Class
	cost  int64
	key   uint64
}

// keySource is where the middleware takes a request's rate-limit key
// from, as a recording says it (record.Header.KeySource), "" when no
// request carries one. A Classify function has the last word on the key,
// and what it did with it no configuration shows: the recording says so
// rather than claim the header or the address.
func keySource(cfg *Config, e *core.Engine) string {
	switch {
	case cfg.Classify != nil:
		return record.KeySourceClassify
	case cfg.KeyHeader != "":
		// As the middleware reads it (core canonicalizes it too).
		return record.HeaderKeySource(http.CanonicalHeaderKey(cfg.KeyHeader))
	case e.NeedsKey():
		return record.KeySourceAddr
	}
	return ""
}

// recBegin counts a request that reaches admission and, when the
// recorder samples it, reads the clock and hashes its key: only sampled
// requests pay for them.
func (h *handler) recBegin(cl shedhttp.Classification) recording {
	if h.rec == nil {
		return recording{}
	}
	rq := recording{class: cl.Class, cost: max(cl.Cost, 1)}
	if h.rec.Arrive(cl.Class) {
		rq.start = h.clock()
		rq.key = h.rec.KeyHash(cl.Key) // salted when the recorder is; 0 when there is none
	}
	return rq
}

// recRejected records a request that was not admitted.
func (h *handler) recRejected(rq *recording, rej shedhttp.Rejection) {
	if h.rec == nil {
		return
	}
	h.rec.Shed(rq.class)
	if rq.start.IsZero() {
		return
	}
	d := record.Rejected
	if rej.Reason == shed.ReasonNone && rej.Status == http.StatusServiceUnavailable {
		d = record.Cancelled // its context ended while it waited
	}
	h.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: d, Reason: rej.Reason,
		Cost: rq.cost, Status: rej.Status, InFlight: h.lim.InFlight(), Key: rq.key})
}

// recDone records admitted work that ended with outcome o and the given
// status (0 when the handler panicked). The latency
// runs from the admission (arrival + queue wait) to the handler's return,
// also when the handler released its permit early.
func (h *handler) recDone(rq *recording, st *core.State, actual int64, o shed.Outcome, status int) {
	if h.rec == nil {
		return
	}
	h.rec.Done(rq.class)
	if rq.start.IsZero() {
		return
	}
	wait := st.Permit.Wait()
	lat := max(h.clock().Sub(rq.start)-wait, 0)
	h.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: record.Admitted,
		Reason: st.Permit.DryRun(), Cost: rq.cost, Actual: actual, Queued: wait > 0, Wait: wait, Latency: lat, Timed: true,
		Outcome: o, Status: status, InFlight: h.lim.InFlight(), Key: rq.key})
}

// sentStatus is the status net/http sent: 200 when the handler wrote none.
func sentStatus(status int) int {
	if status == 0 {
		return http.StatusOK
	}
	return status
}
