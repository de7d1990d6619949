// Package record records a service's traffic and its admission control,
// cheaply enough to leave on in production, so that the simulator can be
// fitted to it (shedsim fit): arrivals per class, estimated and actual
// costs, admission decisions and queue waits, latencies and outcomes, and
// the limit over time.
//
// # Two ways in
//
// The middleware records whole requests: set nethttp.Config.Recorder,
// echo.Config.Recorder (middleware/echo) or, for gRPC calls,
// grpc.ServerConfig.Recorder (middleware/grpc, which records a call's
// code as the HTTP status it maps to: Record.Status is an HTTP status).
// They record the hash of a sampled request's rate-limit key too (see
// Record.Key), when it has one. Anything else that drives a shed.Limiter
// (the simulator, middleware of your own) can record the limiter's
// decisions instead: the Recorder is a shed.Observer.
//
//	rec, err := record.New(record.Config{Dir: "/var/lib/svc/recording"})
//	lim, err := shed.New(shed.Config{..., Observer: rec})
//	rec.Watch(lim)     // ticks sample its limit and in-flight work
//	rec.Start()        // the writer goroutine
//	defer rec.Stop()   // drain, flush, close
//
// Use one or the other for a limiter, not both: each counts arrivals. A
// driver that knows which request an event is about (the simulator) can
// pass its tenant's hash (Recorder.KeyHash) with Recorder.ObserveKeyed.
//
// A driver of a shared store records its calls there too
// (shedredis.Config.Recorder, the same Recorder): a sample of the calls'
// round trips and outcomes (KindStore, Recorder.StoreCall), from which a
// fit infers the store.
//
// # Tenant keys
//
// A key's hash is unsalted by default ([KeyHash], 64-bit FNV-1a): it
// pseudonymizes, and a key from a small space (an IPv4 address, a user
// id) is found again by hashing every candidate. To ship recordings off
// the host, set Config.KeySalt to a secret of at least MinKeySaltBytes
// (32 random bytes): keys are then hashed with HMAC-SHA256 under it
// ([KeyHasher]), which without the salt cannot be reversed. The same key
// hashes the same under the same salt, so a fit counts tenants across the
// files of a recording; keep the salt for as long as a recording is
// fitted as one (across restarts too), since a new salt counts every
// tenant anew. Each file's header says how its keys are hashed ("keys",
// Header.KeyHashing), so that a fit does not count one tenant twice
// across files hashed differently, and where the driver took the keys
// from ("keysrc", Header.KeySource, which the middleware sets with
// Recorder.SetKeySource), so that a configuration fitted to the
// recording (shedsim tune) takes them from the same place.
//
// # Cost, and never blocking
//
// The request path only counts (one atomic add per request, or per limiter
// event) and, for a sampled request, copies a flat record into a bounded
// channel without waiting: when the writer is behind, the record is dropped
// and counted (Stats.Lost, and "lost" in the next tick). Above
// Config.MaxRecordsPerSecond only every 2^k-th request is recorded; the
// counters in the ticks stay exact, so rates never depend on the sampling.
// The recorder has no clock: every time comes from the events and records
// it is given (the middleware reads the clock only for sampled requests),
// which is also what lets the simulator record in virtual time. Encoding
// and I/O happen on the writer goroutine that Start starts and Stop ends,
// or in Flush, on the caller's goroutine, for drivers without one.
//
// Measured on 2 shared cores (bench_test.go, and BenchmarkRecorderOverhead
// in middleware/nethttp), 0 allocations throughout: an Observe call that
// hands its record over costs about 45 ns (an empty Observer: 18 ns), one
// that is only counted about 40 ns; a limiter's acquire and release with
// every event recorded 140 ns instead of 90 with an empty Observer. In the
// net/http middleware a sampled request costs about 200 ns more (two clock
// readings and the hand-over; 1.4-1.5x the middleware's own cost on a
// bare handler), any other about 30-40 ns, a sampled rejection about
// 110 ns. Encoding and writing take the writer about 170 ns a record.
// Hashing a key costs a sampled request 5-25 ns unsalted, about 175 ns
// salted (BenchmarkKeyHash), without allocation.
//
// # File format
//
// JSON Lines, one object per line. A recording on disk is a directory of
// files record-000001.jsonl, record-000002.jsonl, ... each at most
// Config.MaxFileBytes, the oldest deleted beyond Config.MaxFiles. Every
// file (and every stream) starts with a header:
//
//	{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":["interactive","batch"],"tick":1000000000,"keys":"fnv1a","keysrc":"header:X-Tenant"}
//
// "classes" names the classes by index: distinct names that
// CheckClassName accepts (no control or format characters: fits repeat
// them in reports and scenarios). Times ("t") are nanoseconds since the
// header's epoch; durations ("wait", "lat", "tick") are nanoseconds. "keys" says how the records' keys are
// hashed: "fnv1a" unsalted ([KeyHash]), "hmac-sha256:" and 16 hex digits
// salted ([KeyHasher]), the digits a fingerprint of the salt: the first 8
// bytes of HMAC-SHA256(salt, "shedkit-record key salt fingerprint v1"). It
// reveals nothing about the salt beyond whether two files share it. Files
// written before it have no "keys": how their keys are hashed is unknown.
// "keysrc" says where the keys came from, when the driver said:
// "header:" and the name of the trusted request header they are the
// value of (shedhttp.Options.KeyHeader; the client's address for a
// request that carried none, or several), "addr" the client's address,
// "classify" a Classify function of the service's own, which replaced
// the middleware's keys. It is absent when the driver did not say (a
// limiter's Observer), when drivers sharing a recorder disagreed (or a
// Classify that replaced some keys and kept others, in the files that
// follow the first of each), and in files written before it.
// Then one line per record, "k" its kind:
//
//	{"k":"req","t":1250000,"c":0,"d":"admit","cost":1500,"actual":900,"q":true,"wait":3000000,"lat":48000000,"o":"success","st":200,"n":37,"key":"85944171f73967e8"}
//	{"k":"req","t":1400000,"c":1,"d":"reject","r":"limit_exceeded","cost":1,"st":503,"n":80}
//	{"k":"admit","t":2000000,"c":0,"cost":1,"n":12}
//	{"k":"reject","t":2100000,"c":1,"r":"queue_timeout","cost":1,"q":true,"wait":100000000,"n":80}
//	{"k":"cancel","t":2200000,"c":1,"cost":1,"q":true,"wait":20000000,"n":79}
//	{"k":"release","t":2500000,"c":0,"actual":1,"lat":500000,"o":"success","n":11}
//	{"k":"refuse","t":2600000,"c":1,"st":413,"n":11}
//	{"k":"refuse","t":2700000,"c":0,"r":"key_concurrency","st":429,"n":8,"key":"85944171f73967e8"}
//	{"k":"store","t":2800000,"op":"acquire","lat":600000,"res":"ok"}
//	{"k":"tick","t":1000003000,"limit":80,"n":37,"arr":[1200,300],"shed":[0,12],"done":[1195,280],"ref":[0,3],"lost":0,"every":2}
//
// Fields: c class index (named by the header), d decision (admit, reject,
// cancel) of a whole request, r rejection reason (shed.Reason names; on an
// admission, the reason a dry run overrode), cost the reserved (estimated)
// cost, actual the cost at the end, q waited in the queue, wait its queue
// wait, lat how long admitted work ran (present only when measured), o
// outcome (success, dropped, ignored), st HTTP status (of a gRPC call,
// the status its code maps to, as google.rpc.Code documents it: OK 200,
// Unavailable 503, ResourceExhausted 429...), n the limiter's
// work in flight, key the tenant: [KeyHash] of the request's rate-limit
// key (or its salted [KeyHasher.Hash] with Config.KeySalt) as 16 hex digits, absent when it has none (only the records of
// arrivals carry it: req, admit, reject, cancel; and a refuse at a tenant's cap). Absent numbers are zero. A req's t is its arrival; an
// admit, reject or cancel's t is the decision (the arrival is t - wait); a
// release's t is the release (admitted at t - lat). A refuse is a request
// refused on sight, before admission, for a reason the limiter never saw
// (the middleware's 413 for a body over its maximum; a cost over the
// limiter's whole budget is a reject, cost_too_large, since the limiter
// decides it; shedredis.ConcurrencyMiddleware's 429 for a tenant at its
// cap of requests in flight, r key_concurrency, n the tenant's requests
// in flight counted, key the tenant): t its arrival, st the response; it
// was no work. A store line times one call to a shared store (Redis)
// that a driver made for the shared limits (shedredis with
// Config.Recorder): t its start, op the call (allow a rate decision,
// acquire, release or renew concurrency leases; cleanup, after a
// renewal, removes the leases released while it was out: a batch off
// the request path, with the renewal's time budget), lat how long it
// took (0 when the breaker skipped it; a renewal's is its whole
// pipeline), res how it ended (ok, timeout, error,
// breaker_open, canceled: the caller stopped waiting); it has no class
// (c) and no key, counts in no tick and moves none: the requests' records
// do. Store calls are sampled as the requests are (every, the same
// 1 in 2^k), and count toward Config.MaxRecordsPerSecond. Ticks
// come every "tick" of record time: limit and n from the watched
// limiter, and cumulative exact counts per class of arrivals (arr),
// rejections and cancellations (shed), ended work (done) and refusals
// (ref, which arr and shed do not count; absent while there are none),
// from zero at the recorder's first tick (so that their differences
// count every request); lost is the cumulative count of records not
// written, every the sampling in force. A record dated more than ten
// periods from the recorder's time, either side (a caller's clock off, a
// bad explicit time), is written with its own time but moves nothing: no
// tick, and no other record is dated by it. The recorder follows such a
// jump (a clock stepped, a quiet spell) once the next record far from
// its time on the same side confirms it, not dated before it by more
// than ten periods. The tick a far record owes is then written at that
// record's time with the counts up to it (when time went back, the ticks
// restart there), so that a quiet service (fewer than one record per ten
// periods) gets a tick at every record that starts a period, each
// written once the next record comes, and a clock stepped either side a
// tick at the first record after the step. Stop confirms nothing: the
// last far record gets no tick of its own, its counts go to the final
// tick. Records without a time of their own (untimed limiter events, the
// final tick) take the recorder's time; an untimed event that comes
// while a far record waits for confirmation takes it once the record is
// judged: the far record's time if confirmed. The final tick closes the
// counts at the recorder's time, at the instant of the tick before it if
// need be. Records are roughly, not strictly, in time
// order. Readers skip lines of kinds they do
// not know, and fields they do not know.
//
// The version changes when a field changes its meaning, so that a reader
// that does not know the new one refuses the file rather than misreads
// it. A field added as optional, whose absence means what older files
// meant, keeps the version: older readers read everything they know as
// before and ignore the rest. The key is such a field, added to version 1:
// files written before it read as requests without tenants, and older
// readers read files with keys as they read those without. So is the
// header's "keys": readers take any value (up to 128 bytes of visible
// ASCII) as a name to compare, so that a hashing added later stays
// readable. And so is its
// "keysrc": readers take a source they do not know (up to 128 bytes of
// visible ASCII, MaxKeySourceBytes) as one they cannot act on, and refuse
// a "header:" that names no valid header (see CheckKeySource). The
// refuse lines and the ticks' "ref" were added the same way: older
// readers skip them and read the arrivals as before, which never counted
// a refusal. A reason added to shed.Reason (key_concurrency) is a new
// value, not a new meaning: readers skip a refuse line whose reason they
// do not know, as a line of an unknown kind (readers before this one
// stop there with an error naming it), and refuse other lines with an
// unknown reason (ErrFormat), rather than read it as another reason.
// The store lines were added the same way: older readers skip them (a
// kind they do not know), and readers skip a store line whose operation
// or result they do not know, as a line of an unknown kind. So the
// cleanup op, added later, is skipped by the readers before it, which
// read every other store line as before.
//
// [Reader] reads a file, a directory or a stream; malformed lines are
// errors that name the file, the line and the field (ErrFormat). A
// header with a class name, key hashing or key source that a writer of
// this package never writes (a control character in a name, say) is
// malformed too.
package record
