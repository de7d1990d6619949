package record_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// The recorder dated the records without a time of their own (untimed
// limiter events, the ticks, the final tick) with the latest time it had
// ever seen: after one record from a caller whose clock ran an hour ahead,
// every later untimed event and the final tick were dated an hour ahead,
// and one record dated far back wrote a tick at its date. A lone bad time
// must date only its own record; a jump that the next records confirm (a
// clock stepped, a quiet spell) is still followed.
func TestOneBadTimeDatesNothingElse(t *testing.T) {
	for _, c := range []struct {
		name string
		bad  time.Time
	}{{"ahead", t0.Add(time.Hour)}, {"behind", t0.AddDate(-20, 0, 0)}} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at(0), Cost: 1})
			rec.Add(record.Record{Kind: record.KindRequest, Time: c.bad, Status: 200})
			for i := 1; i <= 3000; i++ {
				rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1}) // untimed
				if i%100 == 0 {
					rec.Observe(shed.Event{Kind: shed.EventRejected, Time: at(i), Reason: shed.ReasonLimit, Cost: 1})
				}
			}
			// A real jump: two records an hour on are followed.
			jump := at(3000).Add(2 * time.Hour)
			rec.Observe(shed.Event{Kind: shed.EventRejected, Time: jump, Reason: shed.ReasonLimit, Cost: 1})
			rec.Observe(shed.Event{Kind: shed.EventRejected, Time: jump.Add(time.Millisecond), Reason: shed.ReasonLimit, Cost: 1})
			rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1})
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			all := readAll(t, buf.Bytes())
			last := all[len(all)-1]
			for i, r := range all[:len(all)-1] {
				if r.Kind == record.KindRequest {
					continue // the bad record keeps its own time
				}
				if d := r.Time.Sub(t0); (d < 0 || d > 5*time.Second) && r.Time.Before(jump) {
					t.Fatalf("record %d (%s) dated %v, %v from the others' times", i, r.Kind, r.Time, d)
				}
			}
			if last.Kind != record.KindTick || last.Time.Before(jump) || last.Time.After(jump.Add(time.Second)) {
				t.Errorf("last record %s at %v, want the final tick at the jump's time %v", last.Kind, last.Time, jump)
			}
			recs, _ := split(all)
			if rel := recs[len(recs)-1]; rel.Kind != record.KindReleased || rel.Time.Before(jump) {
				t.Errorf("untimed release after the jump: %s at %v, want at %v or after", rel.Kind, rel.Time, jump)
			}
		})
	}
}
