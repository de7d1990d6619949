package grpc

import (
	"fmt"
	"net/textproto"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shedkit/shedkit/middleware/shedhttp"
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// recording is one unit of work's part in ServerConfig.Recorder (a call,
// or a message of a stream admitted per message): its class and
// estimated cost, and for a sampled one its arrival time and the hash of
// its rate-limit key. It lives in the call's state: recording allocates
// nothing.
type recording struct {
	start time.Time // zero: not recorded (no recorder, or not sampled)
	class shed.Class
	cost  int64
	key   uint64
	live  bool // admitted, and not yet recorded as done
}

// setRecorder makes s record to cfg.Recorder (nil: none): the recorder
// watches the limiter and is told where the keys come from, at once or,
// with a Classify function, once calls show it (see reclassified).
func (s *Server) setRecorder(cfg *ServerConfig) error {
	rec := cfg.Recorder
	if rec == nil {
		return nil
	}
	src := s.keySource()
	if err := record.CheckKeySource(src); err != nil {
		// Only a KeyMetadata too long for a recording's header.
		return fmt.Errorf("%w: KeyMetadata: %w: %w", ErrInvalidConfig, record.ErrInvalidConfig, err)
	}
	if src != "" && s.classify == nil {
		_ = rec.SetKeySource(src) // checked above
	}
	rec.Watch(s.lim)
	s.rec = rec
	return nil
}

// keySource is where the interceptors take a call's rate-limit key from
// before any Classify function, as a recording says it
// (record.Header.KeySource), "" when no call carries one. KeyMetadata is
// a header: gRPC sends metadata as HTTP/2 header fields, so a proxy that
// sets x-tenant for HTTP requests sets it for gRPC calls too, and the
// recording names it as the HTTP middleware names its KeyHeader
// (canonical, "X-Tenant"), with the same meaning (the peer's address when
// a call carries none or several): recordings of both fit as one, and
// shedsim tune's KeyHeader is the KeyMetadata to set. Else the key is the
// peer's address (record.KeySourceAddr), when rate limits, fair shares or
// a Classify function need one. What Classify does with the key no
// configuration shows: reclassified tells the recorder what it did.
func (s *Server) keySource() string {
	switch {
	case s.keyMD != "":
		return record.HeaderKeySource(textproto.CanonicalMIMEHeaderKey(s.keyMD))
	case s.needPeerKey:
		return record.KeySourceAddr
	}
	return ""
}

// reclassified takes a call's key before Classify and after it, and
// tells the recorder what the function did, the first time it does
// either: kept the key (keySource's) or replaced it
// (record.KeySourceClassify), as the HTTP middleware do
// (core.Engine.Reclassified).
func (s *Server) reclassified(before, after string) {
	if s.rec == nil {
		return
	}
	seen := reclassKept
	if before != after {
		seen = reclassReplaced
	}
	for v := s.reclass.Load(); v&seen == 0; v = s.reclass.Load() {
		if s.reclass.CompareAndSwap(v, v|seen) {
			// Once for each: the source is built here, off the common path.
			src := record.KeySourceClassify
			if seen == reclassKept {
				src = s.keySource()
			}
			_ = s.rec.SetKeySource(src) // checked by setRecorder
			return
		}
	}
}

// What reclassified has seen a Classify function do to keys.
const (
	reclassKept uint32 = 1 << iota
	reclassReplaced
)

// recBegin counts a unit of work that reaches admission and, when the
// recorder samples it, reads the clock and hashes its key: only sampled
// ones pay for them.
func (s *Server) recBegin(cl *shedhttp.Classification) recording {
	if s.rec == nil {
		return recording{}
	}
	rq := recording{class: cl.Class, cost: max(cl.Cost, 1)}
	if s.rec.Arrive(cl.Class) {
		rq.start = s.clock()
		rq.key = s.rec.KeyHash(cl.Key)
	}
	return rq
}

// recRejected records a unit of work that was not admitted.
func (s *Server) recRejected(rq *recording, rej *rejection) {
	if s.rec == nil {
		return
	}
	s.rec.Shed(rq.class)
	if rq.start.IsZero() {
		return
	}
	d := record.Rejected
	if rej.cancelled {
		d = record.Cancelled
	}
	s.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: d, Reason: rej.reason,
		Cost: rq.cost, Status: httpStatus(rej.code), InFlight: s.lim.InFlight(), Key: rq.key})
}

// recDone records admitted work, whose permit is p, that ended with
// outcome o, its actual cost read before the release. herr is what the
// handler returned; panicked says that it returned nothing (the record
// then has no status). The latency runs from the admission (arrival +
// queue wait) to the handler's return (or, per message, to the next
// receive), also when the handler released its permit early.
func (s *Server) recDone(rq *recording, p *shed.Permit, actual int64, o shed.Outcome, herr error, panicked bool) {
	if s.rec == nil || !rq.live {
		return
	}
	rq.live = false
	s.rec.Done(rq.class)
	if rq.start.IsZero() {
		return
	}
	status := 0
	if !panicked {
		status = httpStatus(codeOf(herr))
	}
	wait := p.Wait()
	lat := max(s.clock().Sub(rq.start)-wait, 0)
	s.rec.Add(record.Record{Kind: record.KindRequest, Time: rq.start, Class: rq.class, Decision: record.Admitted,
		Reason: p.DryRun(), Cost: rq.cost, Actual: actual, Queued: wait > 0, Wait: wait, Latency: lat, Timed: true,
		Outcome: o, Status: status, InFlight: s.lim.InFlight(), Key: rq.key})
}

// httpStatuses maps gRPC codes to HTTP statuses as google.rpc.Code
// documents it (the mapping gRPC-HTTP gateways use).
var httpStatuses = [...]int{
	codes.OK:                 200,
	codes.Canceled:           499, // client closed request
	codes.Unknown:            500,
	codes.InvalidArgument:    400,
	codes.DeadlineExceeded:   504,
	codes.NotFound:           404,
	codes.AlreadyExists:      409,
	codes.PermissionDenied:   403,
	codes.ResourceExhausted:  429,
	codes.FailedPrecondition: 400,
	codes.Aborted:            409,
	codes.OutOfRange:         400,
	codes.Unimplemented:      501,
	codes.Internal:           500,
	codes.Unavailable:        503,
	codes.DataLoss:           500,
	codes.Unauthenticated:    401,
}

// httpStatus returns the HTTP status that the gRPC code c maps to, as
// google.rpc.Code documents it: 200 for OK, 499 for Canceled, 429 for
// ResourceExhausted, 503 for Unavailable, 504 for DeadlineExceeded, and
// so on; 500 for a code it does not name. A recording (ServerConfig.Recorder)
// holds a call's status this way (record.Record.Status is an HTTP
// status), so that its records read as the HTTP middleware's do: 2xx
// served, 4xx the client's, 429 and 503 shed, 5xx failed. Codes that share
// a status (InvalidArgument, FailedPrecondition and OutOfRange are 400)
// are not told apart in a recording; the permit's outcome is.
func httpStatus(c codes.Code) int {
	if int(c) < len(httpStatuses) {
		return httpStatuses[c]
	}
	return 500
}
