package sim

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every draw of both families is a valid scenario within the documented
// ranges, and instance i does not depend on how many were drawn.
func TestFamilyDraws(t *testing.T) {
	for _, name := range FamilyNames() {
		t.Run(name, func(t *testing.T) {
			ins, err := DrawFamily(name, 7, 300)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, in := range ins {
				tr := in.Traits
				if tr.Median < time.Millisecond || tr.Median > 2*time.Second {
					t.Errorf("#%d: median %v out of [1ms, 2s]", in.Index, tr.Median)
				}
				if tr.Servers < 1 || tr.Servers > 5100 || tr.Replicas < 1 || tr.Replicas > 100 {
					t.Errorf("#%d: %d servers, %d replicas", in.Index, tr.Servers, tr.Replicas)
				}
				if tr.Rate < familyMinRate*0.999 || tr.Rate > familyMaxRate*1.001 || tr.Rate/float64(tr.Replicas) < familyMinRepRate*0.999 {
					t.Errorf("#%d: rate %.1f for %d replicas", in.Index, tr.Rate, tr.Replicas)
				}
				if tr.Deadline < 3 || tr.Warmup < 10*time.Second || tr.Warmup > 300*time.Second {
					t.Errorf("#%d: deadline %.1fx, warm-up %v", in.Index, tr.Deadline, tr.Warmup)
				}
				if got := float64(in.Scenario.Duration) / 1e9 * tr.Rate; got > 1.01*familyMaxRequests && !strings.Contains(tr.Incident, "spike") {
					t.Errorf("#%d: %.0f requests at the healthy rate", in.Index, got)
				}
				if (name == "incident") != (tr.Incident != "") || (name == "incident") != (in.Scenario.Trigger != nil) {
					t.Errorf("#%d: incident %q, trigger %v", in.Index, tr.Incident, in.Scenario.Trigger)
				}
				kinds[strings.Fields(tr.Shape)[0][:4]]++
				if tr.Incident != "" {
					kinds[strings.Fields(tr.Incident)[0]]++
				}
			}
			// Every shape (and incident) occurs.
			for _, k := range []string{"cons", "expo", "logn", "pare", "bimo"} {
				if kinds[k] == 0 {
					t.Errorf("no %s shape in 300 draws: %v", k, kinds)
				}
			}
			if name == "incident" {
				for _, k := range []string{"slowdown", "ramp", "capacity", "errors", "spike", "retry", "oscillation", "closed-loop", "batch"} {
					if kinds[k] == 0 {
						t.Errorf("no %s incident in 300 draws: %v", k, kinds)
					}
				}
			}
			f, _ := LookupFamily(name)
			again, err := f.Draw(7, 123)
			if err != nil || !reflect.DeepEqual(again, ins[123]) {
				t.Errorf("instance 123 drawn alone differs from the same drawn among 300")
			}
		})
	}
	if _, err := LookupFamily("nope"); err == nil {
		t.Error("unknown family accepted")
	}
}

// A family run gives the same summaries whatever the number of workers,
// and substitutes {warm} and {max} per instance.
func TestRunFamilyDeterministic(t *testing.T) {
	run := FamilyRun{Family: "incident", Seed: 3, Only: []int{1, 4}, Policies: []string{"static", "static:limit={warm}"}}
	var got [][][]Summary
	for _, w := range []int{1, 2} {
		run.Workers = w
		res, err := RunFamily(run)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Summaries)
		for i, in := range res.Instances {
			if lim := res.Summaries[i][1].MeanLimit; math.Abs(lim-float64(in.Traits.Warm*in.Scenario.Service.Replicas)) > 1e-9 {
				t.Errorf("#%d: static:limit={warm} has limit %v, want %d x %d", in.Index, lim, in.Traits.Warm, in.Scenario.Service.Replicas)
			}
		}
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Error("summaries depend on the number of workers")
	}
	if _, err := RunFamily(FamilyRun{Family: "healthy", N: 1, Policies: []string{"nope"}}); err == nil {
		t.Error("unknown policy accepted")
	}
}

// TestFamilySample runs a sample of both families (the instances of seed
// 1 that make test can afford) and checks the distributions the defaults
// reach on it, so that a change that harms services outside the built-in
// suite fails here first. make sim-family runs the full families.
func TestFamilySample(t *testing.T) {
	if raceEnabled {
		t.Skip("about 150 simulations; run without -race (make test does)")
	}
	for _, tc := range []struct {
		family string
		n      int
		// Bounds on shedkit's policies against the family's reference:
		// the share of instances at or above floor, and the median.
		floor, share, median float64
	}{
		{"healthy", 20, sampleHealthyFloor, sampleHealthyShare, sampleHealthyMedian},
		{"incident", 12, sampleIncidentFloor, sampleIncidentShare, sampleIncidentMedian},
	} {
		t.Run(tc.family, func(t *testing.T) {
			res, err := RunFamily(FamilyRun{Family: tc.family, Seed: 1, N: tc.n,
				Policies: []string{"none", "static", "shedkit-gradient", "shedkit-aimd"}})
			if err != nil {
				t.Fatal(err)
			}
			var report strings.Builder
			WriteFamilyReport(&report, res)
			for p, spec := range res.Policies {
				if !strings.HasPrefix(spec, "shedkit-") {
					continue
				}
				st := familyStat(res.Relative(p), tc.floor)
				if above := 1 - float64(st.Below)/float64(st.N); above < tc.share || st.Median < tc.median {
					t.Errorf("%s: %.0f%% of instances at or above %.0f%% of the reference (want >= %.0f%%), median %.1f%% (want >= %.0f%%)\n%s",
						spec, 100*above, 100*tc.floor, 100*tc.share, 100*st.Median, 100*tc.median, report.String())
				}
			}
		})
	}
}

// The bounds of TestFamilySample: what the defaults reach on its sample
// today, with a margin for noise; the limits before the families (issue
// 14) fall short of the healthy ones.
const (
	sampleHealthyFloor, sampleHealthyShare, sampleHealthyMedian    = 0.9, 0.85, 0.99
	sampleIncidentFloor, sampleIncidentShare, sampleIncidentMedian = 0.5, 0.7, 0.85
)

// The report counts, per kind of incident, the instances in which a
// shedkit policy is at least as good as the best peer.
func TestFamilyReportByKind(t *testing.T) {
	res := &FamilyResult{Family: "incident", Policies: []string{"static", "shedkit-gradient", "gcl-aimd"}}
	for i, tc := range []struct {
		kind       string
		ours, peer float64
	}{{"errors", 0.9, 0.95}, {"errors", 0.9, 0.5}, {"slowdown", 0.8, 0.805}} {
		res.Instances = append(res.Instances, &Instance{Index: i, Traits: Traits{Kind: tc.kind}})
		res.Summaries = append(res.Summaries, []Summary{{TriggerGoodputRatio: 1}, {TriggerGoodputRatio: tc.ours}, {TriggerGoodputRatio: tc.peer}})
	}
	var w strings.Builder
	peerTable(&w, res)
	if !strings.Contains(w.String(), "by incident: errors 1/2, slowdown 1/1\n") {
		t.Fatalf("report:\n%s", w.String())
	}
}

// The report gives the share of instances in which a shedkit policy is at
// least as good as each peer on its own: here it beats each peer in two
// instances of three, and the best peer in one.
func TestFamilyReportEachPeer(t *testing.T) {
	res := &FamilyResult{Family: "incident", Policies: []string{"static", "shedkit-gradient", "gcl-aimd:max=9", "failsafe-adaptive"}}
	for i, tc := range [][2]float64{{0.95, 0.5}, {0.5, 0.95}, {0.7, 0.7}} {
		res.Instances = append(res.Instances, &Instance{Index: i, Traits: Traits{Kind: "slowdown"}})
		res.Summaries = append(res.Summaries, []Summary{{TriggerGoodputRatio: 1}, {TriggerGoodputRatio: 0.8}, {TriggerGoodputRatio: tc[0]}, {TriggerGoodputRatio: tc[1]}})
	}
	var w strings.Builder
	peerTable(&w, res)
	for _, want := range []string{"shedkit-gradient: 1 of 3 (33%)\n", "against each peer: gcl-aimd 67%, failsafe-adaptive 67%\n"} {
		if !strings.Contains(w.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, w.String())
		}
	}
}

// A peer that never recovers from the incident does not count in the
// comparison with the best peer that recovered: here it wins the first
// instance's incident, and the recovered peer loses both.
func TestFamilyReportAgainstRecovered(t *testing.T) {
	never := math.Inf(1)
	res := &FamilyResult{Family: "incident", Policies: []string{"static", "shedkit-gradient", "gcl-vegas", "failsafe-adaptive"}}
	for i, tc := range []struct{ vegas, vegasRec, failsafe float64 }{{0.99, never, 0.5}, {0.6, 3, 0.7}} {
		res.Instances = append(res.Instances, &Instance{Index: i, Traits: Traits{Kind: "slowdown"}})
		res.Summaries = append(res.Summaries, []Summary{{TriggerGoodputRatio: 1}, {TriggerGoodputRatio: 0.8},
			{TriggerGoodputRatio: tc.vegas, Recovery: tc.vegasRec}, {TriggerGoodputRatio: tc.failsafe, Recovery: 2}})
	}
	var w strings.Builder
	peerTable(&w, res)
	for _, want := range []string{"shedkit-gradient: 1 of 2 (50%)\n", "against the best peer that recovered: 2 of 2 (100%)\n"} {
		if !strings.Contains(w.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, w.String())
		}
	}
}

// The report names the kinds of incident that make the low tail: per
// kind, the instances under lowTailBound of the oracle.
func TestFamilyReportLowTail(t *testing.T) {
	res := &FamilyResult{Family: "incident", Policies: []string{"static", "shedkit-aimd"}}
	for i, tc := range []struct {
		kind string
		ours float64
	}{{"errors", 0.9}, {"retry-storm", 0.3}, {"retry-storm", 0.749}, {"slowdown", 0.75}, {"slowdown", math.NaN()}} {
		res.Instances = append(res.Instances, &Instance{Index: i, Traits: Traits{Kind: tc.kind}})
		res.Summaries = append(res.Summaries, []Summary{{TriggerGoodputRatio: 1}, {TriggerGoodputRatio: tc.ours}})
	}
	var w strings.Builder
	lowTail(&w, res, lowTailBound)
	want := "below 75.0% of the oracle during the incident, by kind of incident:\n  shedkit-aimd: 2: errors 0/1, retry-storm 2/2, slowdown 0/1\n"
	if got := w.String(); got != "\n"+want {
		t.Fatalf("report:\n%q\nwant\n%q", got, "\n"+want)
	}
}

// TestFamilyDeadlineModel: a deadline model is applied to the instances
// once drawn: they are those of the default run but for its two fields.
func TestFamilyDeadlineModel(t *testing.T) {
	run := FamilyRun{Family: "incident", Seed: 3, Only: []int{1}, Policies: []string{"static"}, Workers: 1}
	base, err := RunFamily(run)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []DeadlineModel{DeadlineCancel, DeadlineAbandon} {
		run.DeadlineModel = m
		res, err := RunFamily(run)
		if err != nil {
			t.Fatal(err)
		}
		got, want := *res.Instances[0], *base.Instances[0]
		sc, wsc := *got.Scenario, *want.Scenario
		if !sc.Service.CancelAtDeadline || sc.Upstream.Abandon != (m == DeadlineAbandon) || res.DeadlineModel != m {
			t.Errorf("%v: cancel_at_deadline %v, abandon %v, result's model %v", m, sc.Service.CancelAtDeadline, sc.Upstream.Abandon, res.DeadlineModel)
		}
		sc.Service.CancelAtDeadline, sc.Upstream.Abandon = false, false
		got.Scenario, want.Scenario = nil, nil
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(sc, wsc) {
			t.Errorf("%v: the instance's draw changed", m)
		}
	}
	for in, want := range map[string]DeadlineModel{"": DeadlineWait, "wait": DeadlineWait, "cancel": DeadlineCancel, "abandon": DeadlineAbandon} {
		if m, err := ParseDeadlineModel(in); err != nil || m != want || (in != "" && m.String() != in) {
			t.Errorf("ParseDeadlineModel(%q) = %v, %v", in, m, err)
		}
	}
	if _, err := ParseDeadlineModel("nope"); err == nil {
		t.Error("unknown model accepted")
	}
	run.DeadlineModel = 9
	if _, err := RunFamily(run); err == nil {
		t.Error("invalid model run")
	}
}
