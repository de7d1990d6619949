package sim

import (
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// RecordPolicy returns a policy that builds p's limiters and records the
// decisions of one replica's limiter with rec: it sets the limiter's
// shed.Config.Observer (after any observer already there) and makes rec
// watch the limiter. The replica's 429s (Class.RateLimit) are recorded
// too, as shed.EventRejected with shed.ReasonRateLimited: what the
// middleware tells its Options.Observer, so that the recording counts
// them among the class's arrivals as a real one does; so are its 429s at
// a key's cap (Class.KeyConcurrency), as refusals with
// shed.ReasonKeyConcurrency, as shedredis.ConcurrencyMiddleware records
// them with a Recorder. The run stays
// deterministic: rec takes its times
// from the virtual clock, and the observer flushes rec on the run's
// goroutine whenever its buffer is half full, so nothing is dropped (do
// not Start rec; Stop it after the run). Use a recorder for one run, and
// MaxRecordsPerSecond -1 to record every decision. Flush errors surface
// in rec.Stats and rec.Stop. The 429s reach rec only when the returned
// policy is the one Run gets, not wrapped in another.
//
// The records of arrivals carry the request's tenant key (Class.Keys), as
// rec.KeyHash of the key's number in decimal (salted when rec is, as its
// header says), so that a fit can infer the class's Keys. The recording
// says where the keys come from as the scenario does (Keys.Source, set on
// rec with SetKeySource): a scenario fitted to a recording records as its
// service did, and classes that disagree make the source unknown.
//
// With Service.Store, the replica's store calls are recorded too, as
// shedredis records them with Config.Recorder (record.KindStore): the
// rate decisions and lease acquisitions of shared limits, the leases'
// releases, its renewals (timed as their whole pipeline) and the cleanup
// after a renewal that removes the leases released while it was out;
// each with the call's start, how long the replica waited for it, and
// ok, timeout (a round trip over the budget, or an outage), breaker_open
// (no time) or canceled (its caller left).
func RecordPolicy(p Policy, rec *record.Recorder, replica int) Policy {
	return recordPolicy{p: p, rec: rec, replica: replica, keys: &recordKeys{rec: rec}}
}

type recordPolicy struct {
	p       Policy
	rec     *record.Recorder
	replica int
	keys    *recordKeys // shared by the replica's observers and the engine
}

func (rp recordPolicy) Name() string { return rp.p.Name() }

func (rp recordPolicy) NewLimiter(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
	if env.Replica != rp.replica || rp.rec == nil {
		return rp.p.NewLimiter(env)
	}
	for _, c := range env.Scenario.Classes {
		if c.Keys != nil {
			// Normalized scenarios hold checked sources only.
			if err := rp.rec.SetKeySource(c.Keys.Source); err != nil {
				return nil, nil, err
			}
		}
	}
	env.Config.Observer = &recordingObserver{rec: rp.rec, next: env.Config.Observer, keys: rp.keys}
	lim, src, err := rp.p.NewLimiter(env)
	if err == nil && lim != nil {
		rp.rec.Watch(lim)
	}
	return lim, src, err
}

// rateObserver returns the observer of the 429s of replica i: nil but for
// the recorded replica.
func (rp recordPolicy) rateObserver(i int) shed.Observer {
	if i != rp.replica || rp.rec == nil {
		return nil
	}
	return &recordingObserver{rec: rp.rec, keys: rp.keys}
}

// keysOf returns the keys of the requests of replica i: nil but for the
// recorded replica.
func (rp recordPolicy) keysOf(i int) *recordKeys {
	if i != rp.replica || rp.rec == nil {
		return nil
	}
	return rp.keys
}

// rateObserving is a policy that wants to see the 429s of the replicas'
// rate limits, which reach no limiter, and to be told the tenant key of
// the requests its limiter decides about, which shed.Event does not carry
// (see RecordPolicy).
type rateObserving interface {
	rateObserver(replica int) shed.Observer
	keysOf(replica int) *recordKeys
}

// recordKeys carries the tenant key (its hash by rec) of the request a
// recorded limiter decides about, from the engine to the observer. A
// decision made at once is the calling request's: the engine sets cur
// before the call. A queued request's decision comes from another
// request's call (a release grants it, an expiry rejects it), and the
// limiter reports it just before it calls the waiter's notify function
// (shed.Limiter's deliver): the observer holds the event in pending until
// the engine's notify function, which knows the waiter's request, hands
// over its key (waiterKey).
type recordKeys struct {
	rec     *record.Recorder // hashes the keys
	cur     uint64
	pending []shed.Event
	obs     *recordingObserver // the limiter's, which holds pending
}

// waiterKey records the held decisions of the waiter whose notify
// function runs, with its request's key.
func (k *recordKeys) waiterKey(key uint64) {
	if o := k.obs; o != nil {
		o.flushPending(key)
	}
}

type recordingObserver struct {
	rec  *record.Recorder
	next shed.Observer
	keys *recordKeys
}

func (o *recordingObserver) Observe(ev shed.Event) {
	switch {
	case o.keys == nil:
		o.record(ev, 0)
	case ev.Queued && ev.Kind != shed.EventQueued && ev.Kind != shed.EventReleased:
		// A queued request's decision: its key comes with its waiter's
		// notify, next (see recordKeys).
		o.keys.obs = o
		o.keys.pending = append(o.keys.pending, ev)
	default:
		o.flushPending(0) // none held (a cancellation has no notify)
		o.record(ev, o.keys.cur)
	}
	if o.next != nil {
		o.next.Observe(ev)
	}
}

// flushPending records the held decisions with key.
func (o *recordingObserver) flushPending(key uint64) {
	for _, ev := range o.keys.pending {
		o.record(ev, key)
	}
	o.keys.pending = o.keys.pending[:0]
}

// storeCall records call c of operation op to the store, made at now
// (virtual time), as shedredis records its calls.
func (k *recordKeys) storeCall(now time.Time, op record.StoreOp, c storeCall) {
	if !k.rec.StoreCall() {
		return
	}
	res := record.StoreOK
	switch {
	case !c.called:
		res = record.StoreBreakerOpen
	case c.cut:
		res = record.StoreCanceled
	case !c.ok:
		res = record.StoreTimeout
	}
	k.rec.Add(record.Record{Kind: record.KindStore, Time: now, Op: op, Result: res, Latency: time.Duration(c.wait), Timed: true})
	if k.rec.Pending() >= k.rec.Capacity()/2 {
		k.rec.Flush()
	}
}

func (o *recordingObserver) record(ev shed.Event, key uint64) {
	o.rec.ObserveKeyed(ev, key)
	if o.rec.Pending() >= o.rec.Capacity()/2 {
		o.rec.Flush()
	}
}
