package record_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A quiet service (or a high sampling ratio) gives fewer than one timed
// record per ten tick periods: every record is then far from the
// recorder's time. The recorder held the first of every two such records
// as a suspect, so that only every other one took its tick: the ticks of
// a quiet service came at half their rate, the counts of the held record
// dated at the next. Every record that starts a tick period must take its
// tick, at its own time, with the counts up to it and the work in flight
// it carries; a lone bad time among them (an hour ahead) still dates
// nothing.
func TestQuietRecordsTakeTheirTicks(t *testing.T) {
	const gap = 15 * time.Second // 15 periods of the default 1 s tick
	for _, c := range []struct {
		name string
		bad  int           // the bad time comes after the bad-th record, -1 for none
		off  time.Duration // how far from that record
	}{
		{"quiet", -1, 0},
		{"ahead_after_even", 6, time.Hour}, {"ahead_after_odd", 7, time.Hour},
		{"behind_after_even", 6, -time.Hour}, {"behind_after_odd", 7, -time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			const n = 20
			type want struct {
				at       time.Time
				arr      uint64
				inflight int
			}
			var wants []want
			var arr uint64
			for i := range n {
				at := t0.Add(time.Duration(i) * gap)
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1, InFlight: i + 1})
				arr++
				wants = append(wants, want{at, arr, i + 1})
				if i == c.bad {
					rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at.Add(c.off), Cost: 1, InFlight: 99})
					arr++
				}
				rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1}) // untimed
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			recs, ticks := split(readAll(t, buf.Bytes()))
			for _, r := range recs {
				if d := r.Time.Sub(t0); r.Kind == record.KindReleased && (d < 0 || d > n*gap) {
					t.Errorf("untimed release dated %v, %v from the first record", r.Time, d)
				}
			}
			// The final tick closes the counts at the recorder's time:
			// the last record's, held, is left unconfirmed by Stop.
			final := ticks[len(ticks)-1]
			if final.Tick.Arrivals[0] != arr {
				t.Errorf("final tick counts %d arrivals, want %d", final.Tick.Arrivals[0], arr)
			}
			byTime := map[time.Time]record.Record{}
			for _, tk := range ticks[:len(ticks)-1] {
				if d := tk.Time.Sub(t0); d < 0 || d > n*gap {
					t.Errorf("tick dated %v, %v from the first record", tk.Time, d)
				}
				if _, dup := byTime[tk.Time]; dup {
					t.Errorf("two ticks at %v", tk.Time)
				}
				byTime[tk.Time] = tk
			}
			// The last record has no record after it to tell it from a
			// bad time: its tick may be missing.
			for i, w := range wants[:n-1] {
				tk, ok := byTime[w.at]
				if !ok {
					t.Errorf("record %d at +%v: no tick", i, w.at.Sub(t0))
					continue
				}
				if i == 0 {
					continue // the first tick starts the counts at zero
				}
				if got := tk.Tick.Arrivals[0]; got != w.arr || tk.InFlight != w.inflight {
					t.Errorf("tick at +%v: %d arrivals, %d in flight; want %d and %d", w.at.Sub(t0), got, tk.InFlight, w.arr, w.inflight)
				}
			}
			if len(ticks) < n-1 {
				t.Errorf("%d ticks for %d records %v apart, want at least %d", len(ticks), n, gap, n-1)
			}
		})
	}
}

// A clock stepped (back or ahead an hour) in a quiet service is followed:
// the ticks after the step are at the times of the records after it.
func TestQuietRecordsFollowAStep(t *testing.T) {
	const gap = 15 * time.Second
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			var buf bytes.Buffer
			rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1})
			const n, at = 20, 10
			stepped := t0.Add(at*gap + step)
			for i := range n {
				tm := t0.Add(time.Duration(i) * gap)
				if i >= at {
					tm = tm.Add(step)
				}
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: tm, Cost: 1})
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			_, ticks := split(readAll(t, buf.Bytes()))
			var after int
			for i, tk := range ticks {
				if i > 0 && tk.Time.Sub(ticks[i-1].Time) > 0 && tk.Time.Sub(ticks[i-1].Time) < gap {
					t.Errorf("ticks %v and %v closer than the records", ticks[i-1].Time, tk.Time)
				}
				if !tk.Time.Before(stepped) && !tk.Time.After(stepped.Add(n*gap)) {
					after++
				}
			}
			if after < n-at-2 {
				t.Errorf("%d ticks after the step, want at least %d", after, n-at-2)
			}
			if last := ticks[len(ticks)-1]; last.Tick.Arrivals[0] != n-1 && last.Tick.Arrivals[0] != n {
				t.Errorf("last tick %+v, want the counts of the records", last)
			}
		})
	}
}

// Records far from the recorder's time from several goroutines at once
// (quiet times, outliers either side, untimed events) neither race nor
// write a tick whose counts are below the one before it.
func TestQuietRecordsConcurrent(t *testing.T) {
	var buf bytes.Buffer
	rec := newRec(t, record.Config{Writer: &buf, MaxRecordsPerSecond: -1, Buffer: 1 << 14})
	const workers, n = 4, 300
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				at := t0.Add(time.Duration(i) * 5 * time.Second)
				switch (i + g) % 7 {
				case 3:
					at = at.Add(time.Hour)
				case 5:
					at = at.Add(-time.Hour)
				}
				rec.Observe(shed.Event{Kind: shed.EventAdmitted, Time: at, Cost: 1})
				rec.Observe(shed.Event{Kind: shed.EventReleased, Outcome: shed.Success, Cost: 1})
			}
		}()
	}
	wg.Wait()
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	_, ticks := split(readAll(t, buf.Bytes()))
	for i := 1; i < len(ticks); i++ {
		if a, b := ticks[i-1].Tick.Arrivals[0], ticks[i].Tick.Arrivals[0]; b < a {
			t.Errorf("tick %d counts %d arrivals, after %d", i, b, a)
		}
	}
}
