package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// KeysFit is what a fit inferred about a class's tenants (Class.Keys)
// from the key hashes on the records of its arrivals (record.Record.Key).
//
// The recorder samples every 2^k-th request whatever its key, so the
// keyed records are an unbiased sample of the arrivals and each tenant's
// share of them estimates its share of the traffic; sampling only makes
// the rarer tenants likelier to go unseen.
type KeysFit struct {
	// Keys is the inferred Keys: Count the distinct keys seen, Zipf
	// fitted to their ranked frequencies, both clamped to the scenario's
	// ranges. It is nil when no record of the class has a key.
	Keys *Keys
	// Seen is the number of distinct keys in the records. Tenants that
	// sent nothing the recorder kept are not among them: it is a lower
	// bound of the class's tenants. Estimate is the Chao1 estimate of
	// all of them (see chao1).
	Seen     int
	Estimate float64
	// Requests counts the keyed records the fit is on; Unkeyed the
	// records of the class's arrivals without a key.
	Requests, Unkeyed int
	// ZipfSE is the standard error of the fitted Zipf from the sampling
	// of Requests alone, taking the ranks as right.
	ZipfSE float64
	// Truncated reports that the class showed more than MaxKeys distinct
	// keys: the fit kept the first MaxKeys, and Count is MaxKeys.
	Truncated bool
	// Excluded counts the keyed records left out because their files
	// hash keys otherwise than the newest keyed records' (another salt,
	// or none): a tenant cannot be matched across hashings, and the
	// newest is the configuration in effect now (see the notes).
	Excluded int
}

// keyRecord counts the key of a record of an arrival: every arrival
// leaves exactly one of them (a request, or a limiter's admission,
// rejection or cancellation), so the counts are its key's share of the
// arrivals; releases would count the admitted ones twice.
func (f *Fitter) keyRecord(r *record.Record) {
	switch r.Kind {
	case record.KindRequest, record.KindAdmitted, record.KindRejected, record.KindCancelled:
	case record.KindRefused:
		if r.Reason != shed.ReasonKeyConcurrency {
			return // a 413: no tenant's request the scenario offers
		}
	default:
		return
	}
	if r.Key == 0 {
		f.unkeyed[r.Class]++
		return
	}
	f.hashings.add(r.Class, r.Key)
}

// fitKeys infers each class's Keys (see KeysFit).
func (f *Fitter) fitKeys(fit *Fit) {
	fit.Notes = append(fit.Notes, f.hashings.notes()...)
	ks := f.hashings.counted()
	if ks != nil {
		var notes []string
		fit.KeySource, notes = ks.sources.resolve()
		fit.Notes = append(fit.Notes, notes...)
	}
	for c := range fit.Classes {
		kf := &fit.Classes[c].Keys
		kf.Unkeyed, kf.Excluded = f.unkeyed[c], f.hashings.excluded(c)
		if ks == nil || len(ks.counts[c]) == 0 {
			continue
		}
		m := ks.counts[c]
		kf.Truncated = ks.truncated[c]
		counts := make([]int, 0, len(m))
		for _, n := range m {
			counts = append(counts, n)
			kf.Requests += n
		}
		slices.SortFunc(counts, func(a, b int) int { return cmp.Compare(b, a) })
		kf.Seen = len(counts)
		kf.Estimate = chao1(counts)
		s, se := zipfMLE(counts)
		kf.Keys = &Keys{Count: min(kf.Seen, MaxKeys), Zipf: math.Round(s*100) / 100, Source: fit.KeySource}
		kf.ZipfSE = se
		if kf.Unkeyed > 0 {
			fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: %d of its %d records of arrivals have no key: the keys are fitted to the others",
				fit.Classes[c].Name, kf.Unkeyed, kf.Unkeyed+kf.Requests))
		}
	}
}

// chao1 is Chao's (1984) estimate of the number of distinct keys,
// unseen ones included, from the counts of the seen ones: seen + f1²/2f2
// (f1 keys seen once, f2 twice; f1(f1-1)/2 when f2 is 0). The keys seen
// once or twice are what tells how many were missed: with ample traffic
// they are none and the estimate is what was seen. It is itself a lower
// bound when tenants' shares differ widely, which is why the scenario
// takes the count seen and the report shows this beside it.
func chao1(counts []int) float64 {
	var f1, f2 float64
	for _, n := range counts {
		switch n {
		case 1:
			f1++
		case 2:
			f2++
		}
	}
	seen := float64(len(counts))
	if f2 > 0 {
		return seen + f1*f1/(2*f2)
	}
	return seen + f1*(f1-1)/2
}

// zipfMLE fits the Zipf exponent s of Keys to counts, sorted largest
// first (rank r = i+1 has weight r^-s), by maximum likelihood, and
// returns it clamped to [0, MaxZipf] with its standard error.
//
// Maximum likelihood rather than least squares on log count against log
// rank: the regression weighs every rank alike, so the tail of keys seen
// once or twice, whose logs are mostly noise and rounding, decides the
// slope, and it is biased even with ample data (Clauset, Shalizi and
// Newman 2009); the likelihood weighs every request alike. Its equation
// is one-dimensional and monotone: the mean log rank of the requests
// equals the model's, E_s[ln r], which falls as s grows (its derivative
// is -Var_s[ln r]), so bisection finds it. Ranks come from the same
// counts, which tilts a flat traffic a little towards skew; with ample
// traffic per key it is small (see TestFitKeysRoundTrip).
func zipfMLE(counts []int) (s, se float64) {
	if len(counts) < 2 {
		return 0, 0
	}
	lnr := make([]float64, len(counts))
	var n, sum float64
	for i, c := range counts {
		lnr[i] = math.Log(float64(i + 1))
		n += float64(c)
		sum += float64(c) * lnr[i]
	}
	target := sum / n
	lo, hi := 0.0, float64(MaxZipf)
	switch {
	case target >= zipfMoments(lnr, lo).mean:
		hi = lo
	case target <= zipfMoments(lnr, hi).mean:
		lo = hi
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if zipfMoments(lnr, mid).mean > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	s = (lo + hi) / 2
	// The Fisher information of n requests is n Var_s[ln r].
	if v := zipfMoments(lnr, s).variance; v > 0 {
		se = 1 / math.Sqrt(n*v)
	}
	return s, se
}

type moments struct{ mean, variance float64 }

// zipfMoments returns the mean and variance of ln r under Zipf s over the
// ranks whose logs are lnr.
func zipfMoments(lnr []float64, s float64) moments {
	var z, m1, m2 float64
	for _, l := range lnr {
		w := math.Exp(-s * l)
		z += w
		m1 += w * l
		m2 += w * l * l
	}
	m1 /= z
	return moments{mean: m1, variance: max(m2/z-m1*m1, 0)}
}

// fittedKeys returns the Keys of class cf's scenario: nil for one key or
// none, and for a class with a fitted rate limit, which is the class's
// whole traffic as one key (see fitRateLimits): the scenario keeps a
// bucket per key, and spreading the traffic over keys would give each
// of them the whole class's rate. The note then says which keys to write
// instead, for shedsim tune to size a quota per tenant.
func fittedKeys(cf *ClassFit, fit *Fit) *Keys {
	k := cf.Keys.Keys
	switch {
	case k == nil || k.Count < 2:
		return nil
	case cf.RateLimit.Limit != nil:
		fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: %d keys seen, but its rate limit is fitted as one key's: the scenario keeps one key, so that the limit binds as it did; "+
			"to tune a quota per tenant instead (shedsim tune), replace its rate_limit with keys: {count: %d, zipf: %s%s}",
			cf.Name, cf.Keys.Seen, k.Count, strconv.FormatFloat(k.Zipf, 'g', -1, 64), sourceField(k.Source)))
		return nil
	}
	return k.clone()
}

// sourceField spells a key source as the field of a flow mapping in a
// note, "" for none. A source is visible ASCII (record.CheckKeySource);
// quoted, it reads back whatever YAML makes of its characters.
func sourceField(src string) string {
	if src == "" {
		return ""
	}
	return ", source: " + strconv.Quote(src)
}
