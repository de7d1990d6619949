package sim

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Dist of a figure over a family's instances.
type FamilyStat struct {
	N                      int // instances with a value
	Min, P10, Median, Mean float64
	// Below counts values under the threshold asked for.
	Below int
}

// familyStat summarizes xs, NaNs left out.
func familyStat(xs []float64, below float64) FamilyStat {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	st := FamilyStat{N: len(v), Min: math.NaN(), P10: math.NaN(), Median: math.NaN(), Mean: math.NaN()}
	if len(v) == 0 {
		return st
	}
	slices.Sort(v)
	q := func(p float64) float64 { return v[max(int(math.Ceil(p*float64(len(v))))-1, 0)] }
	st.Min, st.P10, st.Median = v[0], q(0.1), q(0.5)
	s := 0.0
	for _, x := range v {
		s += x
		if x < below {
			st.Below++
		}
	}
	st.Mean = s / float64(len(v))
	return st
}

// policyIndex returns the index of the policy spec, or -1.
func (res *FamilyResult) policyIndex(spec string) int { return slices.Index(res.Policies, spec) }

// IsPeer reports whether a policy spec names a peer library's limit
// (go-concurrency-limits or failsafe-go), as opposed to shedkit's own,
// no limit or a static one.
func IsPeer(spec string) bool {
	return strings.HasPrefix(spec, "gcl-") || strings.HasPrefix(spec, "failsafe-")
}

// minReference: a reference below this share of the ideal (an outage in
// which nothing could be served, say) judges nothing; such instances are
// left out of the relative figures.
const minReference = 0.05

// Reference returns, per instance, the goodput the family judges the
// policies against: in the healthy family the better of no limit and the
// static limit at capacity over the run, in the incident family the
// static limit's during the trigger (NaN where those policies were not
// run or the reference is below minReference).
func (res *FamilyResult) Reference() []float64 {
	out := make([]float64, len(res.Instances))
	none, static := res.policyIndex("none"), res.policyIndex("static")
	for i := range out {
		out[i] = math.NaN()
		s := res.Summaries[i]
		switch {
		case res.Family == "incident" && static >= 0:
			out[i] = s[static].TriggerGoodputRatio
		case res.Family == "incident":
		case static >= 0 && none >= 0:
			out[i] = max(s[static].GoodputRatio, s[none].GoodputRatio)
		case static >= 0:
			out[i] = s[static].GoodputRatio
		}
		if !(out[i] >= minReference) {
			out[i] = math.NaN()
		}
	}
	return out
}

// Judged returns, per instance, the figure of policy p that the family
// judges: goodput over the run (healthy) or during the trigger
// (incident), against the ideal.
func (res *FamilyResult) Judged(p int) []float64 {
	out := make([]float64, len(res.Instances))
	for i := range out {
		s := &res.Summaries[i][p]
		out[i] = s.GoodputRatio
		if res.Family == "incident" {
			out[i] = s.TriggerGoodputRatio
		}
	}
	return out
}

// Relative returns Judged(p) / Reference() per instance.
func (res *FamilyResult) Relative(p int) []float64 {
	ref, j := res.Reference(), res.Judged(p)
	for i := range j {
		j[i] /= ref[i]
	}
	return j
}

// maxLossesShown bounds the losses to the peers listed in the report.
const maxLossesShown = 25

// peerMargin: a policy is at least as good as a peer when its judged
// goodput is no more than this below the peer's (a share of the ideal).
const peerMargin = 0.01

// AgainstPeers returns, for policy p, the instances in which the best
// peer's judged goodput exceeds p's by more than peerMargin, and the
// number of instances compared.
func (res *FamilyResult) AgainstPeers(p int) (losses []int, compared int) {
	j := res.Judged(p)
	for i := range res.Instances {
		best := res.bestPeer(i)
		if math.IsNaN(best) || math.IsNaN(j[i]) {
			continue
		}
		compared++
		if j[i] < best-peerMargin {
			losses = append(losses, i)
		}
	}
	return losses, compared
}

func nanTo(v, d float64) float64 {
	if math.IsNaN(v) {
		return d
	}
	return v
}

// WriteFamilyReport writes the distributions of a family run: the judged
// goodput against the reference and against the ideal, per policy; the
// comparison with the peers; the instances where each shedkit policy
// fares worst.
func WriteFamilyReport(w io.Writer, res *FamilyResult) error {
	bw := bufio.NewWriter(w)
	what, ref := "goodput over the run", "the better of no limit and a static limit at capacity"
	if res.Family == "incident" {
		what, ref = "goodput during the incident", "a static limit at capacity (the oracle)"
	}
	fmt.Fprintf(bw, "family %s, seed %d, %d instances\n\n", res.Family, res.Seed, len(res.Instances))
	fmt.Fprintf(bw, "%s against %s, per instance:\n", what, ref)
	statTable(bw, res, res.Relative, 0.98, "< 98%")
	fmt.Fprintf(bw, "\n%s against the ideal (what the upstream could serve within the deadlines):\n", what)
	statTable(bw, res, res.Judged, 0.9, "< 90%")
	if res.Family == "incident" {
		fmt.Fprintf(bw, "\nrecovery after the incident (s, to 90%% of the healthy throughput):\n")
		recoveryTable(bw, res)
		peerTable(bw, res)
		lowTail(bw, res, lowTailBound)
	}
	for p, spec := range res.Policies {
		if strings.HasPrefix(spec, "shedkit-") {
			worst(bw, res, p, 8)
		}
	}
	return bw.Flush()
}

func statTable(w io.Writer, res *FamilyResult, f func(int) []float64, below float64, belowName string) {
	header := []string{"policy", "n", "min", "p10", "median", "mean", belowName}
	var rows [][]string
	for p, spec := range res.Policies {
		st := familyStat(f(p), below)
		rows = append(rows, []string{spec, strconv.Itoa(st.N), pct(st.Min), pct(st.P10), pct(st.Median), pct(st.Mean), strconv.Itoa(st.Below) + " "})
	}
	writeAligned(w, header, rows, 1, -1)
}

func recoveryTable(w io.Writer, res *FamilyResult) {
	header := []string{"policy", "median", "p90", "never "}
	var rows [][]string
	for p, spec := range res.Policies {
		var xs []float64
		never := 0
		for i := range res.Instances {
			r := res.Summaries[i][p].Recovery
			if math.IsInf(r, 1) {
				never++
				r = math.MaxFloat64
			}
			if !math.IsNaN(r) {
				xs = append(xs, r)
			}
		}
		slices.Sort(xs)
		q := func(p float64) string {
			if len(xs) == 0 {
				return "-"
			}
			v := xs[max(int(math.Ceil(p*float64(len(xs))))-1, 0)]
			if v == math.MaxFloat64 {
				return "never"
			}
			return secs(v)
		}
		rows = append(rows, []string{spec, q(0.5), q(0.9), strconv.Itoa(never) + " "})
	}
	writeAligned(w, header, rows, 1, -1)
}

func peerTable(w io.Writer, res *FamilyResult) {
	peers := false
	for _, spec := range res.Policies {
		peers = peers || IsPeer(spec)
	}
	if !peers {
		return
	}
	fmt.Fprintf(w, "\nat least as good as the best peer during the incident (within %.0f point):\n", 100*peerMargin)
	for p, spec := range res.Policies {
		if !strings.HasPrefix(spec, "shedkit-") {
			continue
		}
		losses, n := res.AgainstPeers(p)
		fmt.Fprintf(w, "  %s: %d of %d (%.0f%%)\n", spec, n-len(losses), n, 100*float64(n-len(losses))/float64(max(n, 1)))
		byKind(w, res, p, losses)
		eachPeer(w, res, p)
		againstRecovered(w, res, p)
		for k, i := range losses {
			if k == maxLossesShown {
				fmt.Fprintf(w, "    ... and %d more (the CSV has every instance)\n", len(losses)-k)
				break
			}
			fmt.Fprintf(w, "    loses #%d (%s vs best peer %s): %s\n", res.Instances[i].Index,
				pct(res.Judged(p)[i]), pct(res.bestPeer(i)), res.Instances[i].Traits)
		}
	}
}

// byKind writes, per kind of incident, how many of the instances compared
// with the peers policy p did not lose (losses as AgainstPeers returns
// them): where a policy loses is a kind of incident more often than an
// instance.
func byKind(w io.Writer, res *FamilyResult, p int, losses []int) {
	lost := make(map[int]bool, len(losses))
	for _, i := range losses {
		lost[i] = true
	}
	won, all := map[string]int{}, map[string]int{}
	j := res.Judged(p)
	for i, in := range res.Instances {
		if k := in.Traits.Kind; k != "" && !math.IsNaN(res.bestPeer(i)) && !math.IsNaN(j[i]) {
			all[k]++
			if !lost[i] {
				won[k]++
			}
		}
	}
	kinds := slices.Sorted(maps.Keys(all))
	if len(kinds) == 0 {
		return
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d/%d", k, won[k], all[k])
	}
	fmt.Fprintf(w, "    by incident: %s\n", strings.Join(parts, ", "))
}

// eachPeer writes, for each peer on its own, the share of the instances
// compared in which policy p is at least as good as that peer (within
// peerMargin): a policy can beat the best peer seldom and each peer
// often, when the peers win on different instances.
func eachPeer(w io.Writer, res *FamilyResult, p int) {
	j := res.Judged(p)
	var parts []string
	for q, spec := range res.Policies {
		if !IsPeer(spec) {
			continue
		}
		jq := res.Judged(q)
		won, n := 0, 0
		for i := range res.Instances {
			if math.IsNaN(j[i]) || math.IsNaN(res.bestPeer(i)) {
				continue
			}
			n++
			if j[i] >= nanTo(jq[i], 0)-peerMargin {
				won++
			}
		}
		name, _, _ := strings.Cut(spec, ":")
		parts = append(parts, fmt.Sprintf("%s %.0f%%", name, 100*float64(won)/float64(max(n, 1))))
	}
	fmt.Fprintf(w, "    against each peer: %s\n", strings.Join(parts, ", "))
}

// lowTailBound is the share of the oracle under which an instance
// counts in the low tail of the incident family (issue 14's p10 target).
const lowTailBound = 0.75

// lowTail writes, for each shedkit policy, how many instances of each
// kind of incident keep less than bound of the oracle's goodput during
// the incident: the kinds that make the distribution's low tail, which
// its p10 alone does not name.
func lowTail(w io.Writer, res *FamilyResult, bound float64) {
	fmt.Fprintf(w, "\nbelow %s of the oracle during the incident, by kind of incident:\n", pct(bound))
	for p, spec := range res.Policies {
		if !strings.HasPrefix(spec, "shedkit-") {
			continue
		}
		rel := res.Relative(p)
		low, all, total := map[string]int{}, map[string]int{}, 0
		for i, in := range res.Instances {
			if k := in.Traits.Kind; k != "" && !math.IsNaN(rel[i]) {
				all[k]++
				if rel[i] < bound {
					low[k]++
					total++
				}
			}
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(all)) {
			parts = append(parts, fmt.Sprintf("%s %d/%d", k, low[k], all[k]))
		}
		fmt.Fprintf(w, "  %s: %d: %s\n", spec, total, strings.Join(parts, ", "))
	}
}

func (res *FamilyResult) bestPeer(i int) float64 {
	return res.bestPeerIf(i, func(int) bool { return true })
}

// bestPeerIf is bestPeer among the peers q for which ok(q) holds: NaN
// when none does.
func (res *FamilyResult) bestPeerIf(i int, ok func(q int) bool) float64 {
	best := math.NaN()
	for q, spec := range res.Policies {
		if IsPeer(spec) && ok(q) {
			best = max(nanTo(best, 0), nanTo(res.Judged(q)[i], 0))
		}
	}
	return best
}

// againstRecovered writes the share of the instances in which policy p is
// at least as good as the best peer among those that recovered after the
// incident within the run (Summary.Recovery): a peer that sheds most of
// the traffic for good wins the incident and loses the service, and the
// best-peer figure alone credits it with the win.
func againstRecovered(w io.Writer, res *FamilyResult, p int) {
	j := res.Judged(p)
	won, n := 0, 0
	for i := range res.Instances {
		best := res.bestPeerIf(i, func(q int) bool { return !math.IsInf(res.Summaries[i][q].Recovery, 1) })
		if math.IsNaN(j[i]) || math.IsNaN(best) {
			continue
		}
		n++
		if j[i] >= best-peerMargin {
			won++
		}
	}
	fmt.Fprintf(w, "    against the best peer that recovered: %d of %d (%.0f%%)\n", won, n, 100*float64(won)/float64(max(n, 1)))
}

// worst lists the k instances where policy p is lowest against the
// reference.
func worst(w io.Writer, res *FamilyResult, p, k int) {
	rel := res.Relative(p)
	idx := make([]int, 0, len(rel))
	for i, v := range rel {
		if !math.IsNaN(v) {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmpFloat(rel[a], rel[b]) })
	fmt.Fprintf(w, "\nworst instances of %s (against the reference; instance: traits):\n", res.Policies[p])
	for _, i := range idx[:min(k, len(idx))] {
		s := &res.Summaries[i][p]
		fmt.Fprintf(w, "  #%d %s (ideal %s, limit %s, in flight %s): %s\n", res.Instances[i].Index, pct(rel[i]),
			pct(res.Judged(p)[i]), num(s.MeanLimit, 0), num(s.MeanInFlight, 0), res.Instances[i].Traits)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteFamilyCSV writes one row per instance and policy: the instance's
// traits, the judged figures and the main summary figures.
func WriteFamilyCSV(w io.Writer, res *FamilyResult) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("family,seed,instance,shape,median_s,servers,replicas,shared,load,deadline_x,rate,warmup_s,incident,policy,judged,reference,relative,goodput,trigger_goodput,recovery_s,admitted_p99_s,trigger_p99_s,mean_limit,mean_in_flight,rejected\n")
	ref := res.Reference()
	for i, in := range res.Instances {
		t := in.Traits
		for p, spec := range res.Policies {
			s := &res.Summaries[i][p]
			j := res.Judged(p)[i]
			fmt.Fprintf(bw, "%s,%d,%d,%s,%g,%d,%d,%t,%.4f,%.2f,%.1f,%g,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
				res.Family, res.Seed, in.Index, csvField(t.Shape), t.Median.Seconds(), t.Servers, t.Replicas, t.Shared,
				t.Load, t.Deadline, t.Rate, t.Warmup.Seconds(), csvField(t.Incident), csvField(spec),
				num(j, 4), num(ref[i], 4), num(j/ref[i], 4), num(s.GoodputRatio, 4), num(s.TriggerGoodputRatio, 4),
				num(s.Recovery, 1), num(s.AdmittedP99, 4), num(s.TriggerP99, 4), num(s.MeanLimit, 1), num(s.MeanInFlight, 1), num(s.RejectedShare, 4))
		}
	}
	return bw.Flush()
}
