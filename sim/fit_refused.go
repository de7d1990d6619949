package sim

import (
	"fmt"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A request refused on sight was answered 413 and never could have been
// admitted: its body was over the middleware's maximum (record.KindRefused,
// counted apart in the ticks, Tick.Refused), or its cost over the
// limiter's whole budget (a rejection for shed.ReasonCostTooLarge, counted
// among the arrivals and rejections). A fitted scenario has neither limit:
// offered to it, such a request would be admitted and served, work the
// service never did. So the fit leaves both out of the arrivals, the
// rejections and the costs, and reports them (ClassFit.Refused).

// refusedRecord reports whether r is the record of a request refused on
// sight, so that Add leaves it out of the costs, and notes the cell of a
// cost too large, whose count costTooLarge estimates.
func (f *Fitter) refusedRecord(r *record.Record) bool {
	if r.Kind == record.KindRefused {
		return true // the ticks count it, apart
	}
	rejected := r.Kind == record.KindRejected || (r.Kind == record.KindRequest && r.Decision == record.Rejected)
	if !rejected || r.Reason != shed.ReasonCostTooLarge {
		return false
	}
	decided := r.Time
	if r.Kind == record.KindRequest {
		decided = decided.Add(r.Wait)
	}
	if i, ok := f.index(decided.UnixNano()); ok {
		f.addCount(&f.cells.tooLargeRec[r.Class], i, 1)
	}
	return true
}

// costTooLarge returns class c's rejections for a cost too large in each
// of n cells: their records when every record was written; else the
// cell's exact rejections times the share of its rejection records that
// are for a cost too large (as the 429s are estimated,
// RateLimitFit.RateLimited), or the class's share over the recording in a
// cell without such records (sampled out). Records alone would count a
// sample; the ticks alone do not tell reasons apart, and they come when
// the recorder sees a time (for the middleware, when a request ends), so
// a cell's rejections and its records of them differ by the few that
// straddle its bounds.
func (f *Fitter) costTooLarge(c, n int) []float64 {
	tl := pad(f.cells.tooLargeRec[c], n)
	if f.every <= 1 && f.lost == 0 {
		return tl
	}
	shedT, shedRec := pad(f.cells.shed[c], n), pad(f.cells.shedRec[c], n)
	var allTL, allRec float64
	for i := range n {
		allTL, allRec = allTL+tl[i], allRec+shedRec[i]
	}
	out := make([]float64, n)
	if allTL == 0 {
		return out
	}
	for i := range n {
		share := allTL / allRec
		if shedRec[i] > 0 {
			share = tl[i] / shedRec[i]
		}
		out[i] = shedT[i] * share
	}
	return out
}

// withoutRefused takes class c's requests refused on sight out of its
// per-cell arrivals counts and into cf.Refused (with those the ticks
// counted apart), and returns the rejections they were among. The ticks'
// refusals at a tenant's cap (their share by the records, see
// fit_keyconc.go) go the other way: into the arrivals, as offered, and
// cf.KeyConcurrency.Refused; fitClasses adds them to the rejections.
func (f *Fitter) withoutRefused(c int, counts []float64, cf *ClassFit) (shedTooLarge float64) {
	for i, v := range f.costTooLarge(c, len(counts)) {
		counts[i] = max(counts[i]-v, 0)
		shedTooLarge += v
	}
	cf.Refused = shedTooLarge
	share := f.keyConc.share(c)
	for i, v := range f.cells.ref[c] {
		capped := v * share
		if i < len(counts) {
			counts[i] += capped
		}
		cf.KeyConcurrency.Refused += capped
		cf.Refused += v - capped
	}
	return shedTooLarge
}

// refusedNote says what the fit left out for the classes that refused
// requests on sight.
func refusedNote(fit *Fit) {
	for _, cf := range fit.Classes {
		if cf.Refused >= 0.5 {
			fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: %.0f requests refused on sight (413: a body over the middleware's maximum, or a cost over the limiter's whole budget) are left out of its arrivals and costs: the scenario has neither limit, and would serve them", cf.Name, cf.Refused))
		}
	}
}
