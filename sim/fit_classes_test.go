package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// TestFitMergesClassesByName: records name their class by index, but a
// recording continued by a service redeployed with its classes in
// another order, then with a class added in the middle, is fitted with
// each class's traffic under its name: interactive 200/s and batch 20/s
// throughout, bulk 10/s in the last third. The fit used to refuse it
// (and before that, to count one class's traffic as another's). bulk,
// which the last file ranks between interactive and batch, keeps that
// rank (it used to come last, below batch).
func TestFitMergesClassesByName(t *testing.T) {
	dir := t.TempDir()
	rng := newStream(5, "test")
	at := epoch
	sent := map[string]float64{}
	run := func(classes []string, until time.Time) {
		rec, err := record.New(record.Config{Dir: dir, MaxRecordsPerSecond: -1, Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		total := 220.0
		if slices.Contains(classes, "bulk") {
			total = 230
		}
		for at.Before(until) {
			at = at.Add(time.Duration(rng.ExpFloat64() * float64(time.Second) / total))
			name := "interactive"
			switch u := rng.Float64() * total; {
			case u < 20:
				name = "batch"
			case u < 30 && total > 220:
				name = "bulk"
			}
			sent[name]++
			idx := shed.Class(slices.Index(classes, name))
			rec.Arrive(idx)
			rec.Done(idx)
			rec.Add(record.Record{Kind: record.KindRequest, Time: at, Class: idx, Decision: record.Admitted, Cost: 1,
				Actual: 1, Timed: true, Latency: time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)), Status: 200})
		}
		if err := rec.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	run([]string{"interactive", "batch"}, epoch.Add(30*time.Second))
	run([]string{"batch", "interactive"}, epoch.Add(60*time.Second))
	run([]string{"interactive", "bulk", "batch"}, epoch.Add(90*time.Second))
	rd, err := record.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fit, err := FitRecording(rd, FitOptions{})
	if err != nil {
		t.Fatalf("FitRecording: %v", err)
	}
	var names []string
	for _, c := range fit.Classes {
		names = append(names, c.Name)
		if n := sent[c.Name]; math.Abs(c.Arrivals/n-1) > 0.01 {
			t.Errorf("class %s: %.0f arrivals, %.0f sent", c.Name, c.Arrivals, n)
		}
	}
	if !slices.Equal(names, []string{"interactive", "bulk", "batch"}) {
		t.Fatalf("classes %q, want interactive, bulk, batch (the newcomer where its file ranks it)", names)
	}
	bulk := fit.Scenario.Classes[1]
	if bulk.Name != "bulk" {
		t.Fatalf("scenario class 1 is %q, want bulk", bulk.Name)
	}
	r, err := buildRate(bulk.Rate, bulk.Schedule, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.at(30) > 1 || math.Abs(r.at(75)/10-1) > 0.2 {
		t.Errorf("bulk offers %.1f/s at 30 s and %.1f/s at 75 s, want 0 and 10", r.at(30), r.at(75))
	}
	if notes := strings.Join(fit.Notes, "\n"); !strings.Contains(notes, `ranks its classes ["batch" "interactive"]`) {
		t.Errorf("no note that a file ranks the classes otherwise:\n%s", notes)
	}
}

// TestFitRefusesAmbiguousClasses: a fit matches classes by name, so a
// header that gives one name to two classes (which the reader refuses,
// but a Fitter may be told), or files that name more classes between
// them than a limiter holds, cannot be fitted: the error names the field
// and matches ErrInvalidRecording.
func TestFitRefusesAmbiguousClasses(t *testing.T) {
	f, err := NewFitter(FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Source("a.jsonl", record.Header{Classes: []string{"interactive", "batch", "interactive"}})
	for i := range 3 {
		f.Add(record.Record{Kind: record.KindTick, Time: epoch.Add(time.Duration(i) * time.Second), Tick: &record.Tick{SampleEvery: 1, Arrivals: []uint64{uint64(i), 0, uint64(i)}}})
	}
	_, err = f.Fit()
	if !errors.Is(err, ErrInvalidRecording) || !strings.Contains(err.Error(), "a.jsonl: record.Header.Classes[2]") {
		t.Errorf("Fit = %v, want an ErrInvalidRecording naming a.jsonl's Classes[2]", err)
	}

	var b strings.Builder
	for file := range 2 {
		var names []string
		for c := range shed.MaxClasses {
			names = append(names, fmt.Sprintf(`"f%dc%d"`, file, c))
		}
		fmt.Fprintf(&b, `{"k":"header","format":"shedkit-record","v":1,"epoch":"2025-01-01T00:00:00Z","classes":[%s],"tick":1000000000}`+"\n", strings.Join(names, ","))
		fmt.Fprintf(&b, `{"k":"tick","t":%d,"arr":[1]}`+"\n", file*1e9)
	}
	_, err = FitRecording(record.NewReader(strings.NewReader(b.String())), FitOptions{})
	if !errors.Is(err, ErrInvalidRecording) || !strings.Contains(err.Error(), "record.Header.Classes[0]") {
		t.Errorf("FitRecording = %v, want an ErrInvalidRecording naming Classes[0]", err)
	}
}

// TestFitRanksNewClassesAsRecorded: a class that a later file adds
// between others keeps the rank that file gives it (the scenario's order
// is its priority), rather than coming last; the classes already known
// keep their order. Each case is a list of headers, one file each.
func TestFitRanksNewClassesAsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files [][]string
		want  []string
	}{
		{"added in the middle", [][]string{{"a", "b"}, {"a", "x", "b"}}, []string{"a", "x", "b"}},
		{"added first", [][]string{{"a", "b"}, {"x", "a", "b"}}, []string{"x", "a", "b"}},
		{"added last", [][]string{{"a", "b"}, {"a", "b", "x"}}, []string{"a", "b", "x"}},
		{"two added", [][]string{{"a", "b", "c"}, {"a", "x", "b", "y", "c"}}, []string{"a", "x", "b", "y", "c"}},
		{"added above a class only", [][]string{{"a", "b"}, {"x", "b"}}, []string{"a", "x", "b"}},
		{"added below a class only", [][]string{{"a", "b"}, {"a", "x"}}, []string{"a", "x", "b"}},
		{"a file that disagrees", [][]string{{"a", "b"}, {"b", "a", "x"}}, []string{"a", "b", "x"}},
		{"nothing known beside it", [][]string{{"a", "b"}, {"x"}}, []string{"a", "b", "x"}},
		{"three files", [][]string{{"a", "c"}, {"a", "b", "c"}, {"a", "b", "x", "c"}}, []string{"a", "b", "x", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFitter(FitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			at := epoch
			for i, classes := range tc.files {
				f.Source(fmt.Sprintf("f%d.jsonl", i), record.Header{Classes: classes})
				for j := range 3 {
					counts := make([]uint64, len(classes)) // each file a recorder of its own
					for c := range counts {
						counts[c] = uint64(10 * j)
					}
					f.Add(record.Record{Kind: record.KindTick, Time: at, Tick: &record.Tick{SampleEvery: 1,
						Arrivals: counts, Done: counts}})
					for k := range 12 { // enough latencies for an interval to count
						f.Add(record.Record{Kind: record.KindRequest, Time: at.Add(time.Duration(k) * time.Millisecond), Decision: record.Admitted,
							Cost: 1, Actual: 1, Timed: true, Latency: time.Duration(10+j+k) * time.Millisecond, Status: 200})
					}
					at = at.Add(time.Second)
				}
			}
			fit, err := f.Fit()
			if err != nil {
				t.Fatal(err)
			}
			var got, sc []string
			for i, c := range fit.Classes {
				got, sc = append(got, c.Name), append(sc, fit.Scenario.Classes[i].Name)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(sc, tc.want) {
				t.Errorf("classes %q, scenario %q, want %q", got, sc, tc.want)
			}
		})
	}
}
