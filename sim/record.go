package sim

import (
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// RecordPolicy returns a policy that builds p's limiters and records the
// decisions of one replica's limiter with rec: it sets the limiter's
// shed.Config.Observer (after any observer already there) and makes rec
// watch the limiter. The replica's 429s (Class.RateLimit) are recorded
// too, as shed.EventRejected with shed.ReasonRateLimited: what the
// middleware tells its Options.Observer, so that the recording counts
// them among the class's arrivals as a real one does. The run stays
// deterministic: rec takes its times
// from the virtual clock, and the observer flushes rec on the run's
// goroutine whenever its buffer is half full, so nothing is dropped (do
// not Start rec; Stop it after the run). Use a recorder for one run, and
// MaxRecordsPerSecond -1 to record every decision. Flush errors surface
// in rec.Stats and rec.Stop. The 429s reach rec only when the returned
// policy is the one Run gets, not wrapped in another.
func RecordPolicy(p Policy, rec *record.Recorder, replica int) Policy {
	return recordPolicy{p: p, rec: rec, replica: replica}
}

type recordPolicy struct {
	p       Policy
	rec     *record.Recorder
	replica int
}

func (rp recordPolicy) Name() string { return rp.p.Name() }

func (rp recordPolicy) NewLimiter(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
	if env.Replica != rp.replica || rp.rec == nil {
		return rp.p.NewLimiter(env)
	}
	env.Config.Observer = &recordingObserver{rec: rp.rec, next: env.Config.Observer}
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
	return &recordingObserver{rec: rp.rec}
}

// rateObserving is a policy that wants to see the 429s of the replicas'
// rate limits, which reach no limiter (see RecordPolicy).
type rateObserving interface {
	rateObserver(replica int) shed.Observer
}

type recordingObserver struct {
	rec  *record.Recorder
	next shed.Observer
}

func (o *recordingObserver) Observe(ev shed.Event) {
	o.rec.Observe(ev)
	if o.rec.Pending() >= o.rec.Capacity()/2 {
		o.rec.Flush()
	}
	if o.next != nil {
		o.next.Observe(ev)
	}
}
