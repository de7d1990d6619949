package sim

import (
	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// RecordPolicy returns a policy that builds p's limiters and records the
// decisions of one replica's limiter with rec: it sets the limiter's
// shed.Config.Observer (after any observer already there) and makes rec
// watch the limiter. The run stays deterministic: rec takes its times
// from the virtual clock, and the observer flushes rec on the run's
// goroutine whenever its buffer is half full, so nothing is dropped (do
// not Start rec; Stop it after the run). Use a recorder for one run, and
// MaxRecordsPerSecond -1 to record every decision. Flush errors surface
// in rec.Stats and rec.Stop.
func RecordPolicy(p Policy, rec *record.Recorder, replica int) Policy {
	return PolicyFunc(p.Name(), func(env PolicyEnv) (*shed.Limiter, shed.LimitSource, error) {
		if env.Replica != replica || rec == nil {
			return p.NewLimiter(env)
		}
		env.Config.Observer = &recordingObserver{rec: rec, next: env.Config.Observer}
		lim, src, err := p.NewLimiter(env)
		if err == nil && lim != nil {
			rec.Watch(lim)
		}
		return lim, src, err
	})
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
