package record_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// quietRun records n admissions gap apart, each followed by an untimed
// release, the last one at the time last (or at its turn when last is
// zero), stops the recorder and returns what it wrote.
func quietRun(t *testing.T, n int, gap time.Duration, last time.Time) (*record.Recorder, []record.Record, []record.Record) {
	t.Helper()
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	for i := range n {
		at := t0.Add(time.Duration(i) * gap)
		if i == n-1 && !last.IsZero() {
			at = last
		}
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1})
		rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1}) // untimed
	}
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, ticks := split(readAll(t, buf.Bytes()))
	return rec, recs, ticks
}

// The last record before Stop may still be held as a suspect (far from
// the recorder's time, not yet confirmed by another): Stop cannot tell a
// quiet spell from a bad time, so it writes no tick at the suspect's time
// (a lone far time dates nothing), but the final tick still closes the
// counts: it was skipped when it fell at the time of the tick before, and
// the suspect's arrival (and what came after it) was in no tick at all.
func TestStopClosesTheCountsOfAHeldSuspect(t *testing.T) {
	const n = 6
	for _, c := range []struct {
		name string
		gap  time.Duration
		last time.Time // the last record's time, zero for its turn
	}{
		{"quiet", 15 * time.Second, time.Time{}},
		{"quiet_then_far_ahead", 15 * time.Second, t0.Add(time.Hour)},
		{"busy_then_far_ahead", 100 * time.Millisecond, t0.Add(time.Hour)},
		{"busy_then_far_behind", 100 * time.Millisecond, t0.Add(-time.Hour)},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, _, ticks := quietRun(t, n, c.gap, c.last)
			final := ticks[len(ticks)-1]
			if got := final.Tick.Arrivals[0]; got != n || final.Tick.Done[0] != n {
				t.Errorf("final tick at +%v counts %d arrivals and %d done, want %d and %d",
					final.Time.Sub(t0), got, final.Tick.Done[0], n, n)
			}
			if end := t0.Add((n - 1) * c.gap); final.Time.After(end) {
				t.Errorf("final tick at +%v, after the last record followed (+%v)", final.Time.Sub(t0), end.Sub(t0))
			}
			if st := rec.Stats(); st.Lost != 0 {
				t.Errorf("Stats.Lost %d, want 0: every record and the counts were written", st.Lost)
			}
		})
	}
}

// An untimed event (the wall-clock API times only a sample) that comes
// after a record held as a suspect took the recorder's time from before
// that record, and kept it once the suspect was confirmed: in a quiet
// service every release was dated a whole gap before its own admission.
// Once the suspect is confirmed, what came after it is dated from it;
// when it is not (a lone bad time, or Stop), it keeps the recorder's.
func TestUntimedAfterSuspectDatedOnceDecided(t *testing.T) {
	const n, gap = 6, 15 * time.Second
	_, recs, _ := quietRun(t, n, gap, time.Time{})
	var admitted time.Time
	for i, r := range recs {
		switch r.Kind {
		case record.KindAdmitted:
			admitted = r.Time
		case record.KindReleased:
			if i == len(recs)-1 {
				continue // after the last admission, never confirmed
			}
			if !r.Time.Equal(admitted) {
				t.Errorf("release after the admission at +%v dated +%v", admitted.Sub(t0), r.Time.Sub(t0))
			}
		}
	}
}

// A clock stepped back: the untimed events between the first record
// after the step and the one that confirms it are dated from the step,
// not from the time before it.
func TestUntimedAfterStepBackDatedFromTheStep(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range 20 {
		rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at(time.Duration(i) * 100 * time.Millisecond), Cost: 1})
	}
	step := at(2*time.Second - time.Hour)
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: step, Cost: 1})
	rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1}) // untimed
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: step.Add(100 * time.Millisecond), Cost: 1})
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, _ := split(readAll(t, buf.Bytes()))
	for _, r := range recs {
		if r.Kind == record.KindReleased && (r.Time.Before(step) || r.Time.After(step.Add(100*time.Millisecond))) {
			t.Errorf("release after the step dated %v, want from the step %v", r.Time, step)
		}
	}
}

// The first record after a clock stepped back starts the ticks again at
// its time, as the first record after a jump ahead does: the tick came
// only at the record that confirmed the step, and in a quiet service the
// first period after the step had no tick.
func TestFirstRecordAfterStepBackTicks(t *testing.T) {
	for _, gap := range []time.Duration{100 * time.Millisecond, 15 * time.Second} {
		t.Run(gap.String(), func(t *testing.T) {
			var buf bytes.Buffer
			rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			const n = 6
			for i := range n {
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(time.Duration(i) * gap), Cost: 1})
			}
			step := t0.Add(n*gap - time.Hour)
			for i := range 3 {
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: step.Add(time.Duration(i) * gap), Cost: 1})
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			_, ticks := split(readAll(t, buf.Bytes()))
			for _, tk := range ticks {
				if tk.Time.Equal(step) {
					if got := tk.Tick.Arrivals[0]; got != n+1 {
						t.Errorf("tick at the step counts %d arrivals, want %d", got, n+1)
					}
					return
				}
			}
			var times []time.Duration
			for _, tk := range ticks {
				times = append(times, tk.Time.Sub(step))
			}
			t.Errorf("no tick at the first record after the step; ticks at %v from it", times)
		})
	}
}

// More untimed events after a suspect than the recorder holds for it:
// every one is written once, none lost, those beyond the hold dated the
// recorder's time at once, the others the suspect's once confirmed.
func TestUntimedAfterSuspectBeyondTheHold(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
	const many, gap = 1000, 15 * time.Second
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0, Cost: 1})
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(gap), Cost: 1}) // held
	for range many {
		rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1})
	}
	rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: t0.Add(2 * gap), Cost: 1}) // confirms it
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	recs, _ := split(readAll(t, buf.Bytes()))
	var atSuspect, before int
	for _, r := range recs {
		if r.Kind != record.KindReleased {
			continue
		}
		switch {
		case r.Time.Equal(t0.Add(gap)):
			atSuspect++
		case r.Time.Equal(t0):
			before++
		default:
			t.Errorf("release dated +%v", r.Time.Sub(t0))
		}
	}
	if atSuspect+before != many || atSuspect == 0 || before == 0 || rec.Stats().Lost != 0 {
		t.Errorf("%d releases at the suspect, %d before it, %d lost; want %d in all, some each, none lost",
			atSuspect, before, rec.Stats().Lost, many)
	}
}
