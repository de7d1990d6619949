package sim

import (
	"fmt"
	"slices"

	"github.com/shedkit/shedkit/record"
	"github.com/shedkit/shedkit/shed"
)

// A tenant at its cap of requests in flight is refused (429) by
// shedredis.ConcurrencyMiddleware before the shedkit middleware sees the
// request. With MiddlewareConfig.Recorder (and in a simulated replica's
// recording) such a 429 is a refusal on sight (record.KindRefused) with
// shed.ReasonKeyConcurrency, counted in the ticks' refusals, its record
// carrying the tenant's key and the tenant's requests in flight counted:
// its cap. The fit treats it as it treats a rate limit's 429: the
// request was offered all the same, so it counts among the class's
// arrivals and rejections (not among the 413s, ClassFit.Refused) and its
// tenant's requests, and the fit infers the cap, so that the scenario
// refuses such requests again rather than serve them.

// FitMinKeyCapped is the fewest records of refusals at a tenant's cap
// from which a fit infers the cap (KeyConcurrencyFit.Limit).
const FitMinKeyCapped = 10

// Bounds on what the fit keeps of those records, per class.
const (
	fitMaxCapCounts  = 4096   // the counts the median is taken over: the first ones
	fitMaxCappedKeys = 10_000 // the tenants counted
)

// KeyConcurrencyFit is what a class's refusals at its tenants' cap of
// requests in flight tell.
type KeyConcurrencyFit struct {
	// Refused estimates the class's requests refused at their tenant's
	// cap: the ticks' exact refusals times the share of the class's
	// refusal records that are at a tenant's cap, as the 429s of rate
	// limits are estimated; the records themselves when every refusal
	// was recorded. Arrivals and Shed count them.
	Refused float64
	// Records counts the records of such refusals, Keys the distinct
	// tenants among them (up to 10,000).
	Records, Keys int
	// Min and Max are the least and most requests in flight that a
	// refused tenant had (a per-key limit, MiddlewareConfig.KeyLimit, or
	// decisions on a replica's share while Redis was out spread them).
	Min, Max int
	// Limit is the inferred cap: the median of those counts (a tenant is
	// refused once its count reaches its cap). Nil below FitMinKeyCapped
	// records, and for a class whose tenants the scenario does not keep
	// apart (no Keys: a cap would then bind the whole class).
	Limit *KeyConcurrency
}

// fitKeyConc is what the records of refusals tell, per class of the fit.
type fitKeyConc struct {
	refused [shed.MaxClasses]int // records of refusals on sight
	capped  [shed.MaxClasses]int // of those, at a tenant's cap
	counts  [shed.MaxClasses][]int
	keys    [shed.MaxClasses]map[uint64]struct{}
}

// keyCapRecord notes r when it is the record of a refusal on sight.
func (k *fitKeyConc) keyCapRecord(r *record.Record) {
	if r.Kind != record.KindRefused {
		return
	}
	c := r.Class
	k.refused[c]++
	if r.Reason != shed.ReasonKeyConcurrency {
		return
	}
	k.capped[c]++
	if r.InFlight > 0 && len(k.counts[c]) < fitMaxCapCounts {
		k.counts[c] = append(k.counts[c], r.InFlight)
	}
	if r.Key != 0 {
		if k.keys[c] == nil {
			k.keys[c] = map[uint64]struct{}{}
		}
		if len(k.keys[c]) < fitMaxCappedKeys {
			k.keys[c][r.Key] = struct{}{}
		}
	}
}

// share returns the share of class c's refusals on sight that were at a
// tenant's cap, by its records (the ticks do not tell reasons apart).
func (k *fitKeyConc) share(c int) float64 {
	if k.refused[c] == 0 {
		return 0
	}
	return float64(k.capped[c]) / float64(k.refused[c])
}

// fitKeyConcurrency fills in each class's KeyConcurrency from the records
// (Refused is counted with the arrivals, see withoutRefused), after
// fitKeys and fitRateLimits: whether the scenario keeps the class's
// tenants apart decides whether a cap can be inferred.
func (f *Fitter) fitKeyConcurrency(fit *Fit) {
	k := &f.keyConc
	for c := range fit.Classes {
		cf := &fit.Classes[c]
		kf := &cf.KeyConcurrency
		kf.Records, kf.Keys = k.capped[c], len(k.keys[c])
		if kf.Records == 0 {
			continue
		}
		counts := slices.Clone(k.counts[c])
		slices.Sort(counts)
		why := "no record says how many requests its tenants had in flight"
		if len(counts) > 0 {
			kf.Min, kf.Max = counts[0], counts[len(counts)-1]
			why = fmt.Sprintf("%d to %d in flight when refused", kf.Min, kf.Max)
		}
		var inferred string
		// As fittedKeys decides whether the scenario keeps the tenants.
		apart := cf.Keys.Keys != nil && cf.Keys.Keys.Count >= 2 && cf.RateLimit.Limit == nil
		switch {
		case kf.Records < FitMinKeyCapped:
			inferred = fmt.Sprintf("too few records (%d, at least %d) to infer the cap: the scenario sets no key_concurrency, and serves them", kf.Records, FitMinKeyCapped)
		case len(counts) == 0:
			inferred = why + ": the scenario sets no key_concurrency, and serves them"
		case !apart:
			inferred = "the scenario does not keep its tenants apart (keys), and a cap would bind the whole class: it sets no key_concurrency, and serves them"
		default:
			kf.Limit = &KeyConcurrency{Limit: min(counts[len(counts)/2], MaxKeyConcurrency)}
			inferred = fmt.Sprintf("the scenario caps each tenant at %d (key_concurrency: the median count; %s)", kf.Limit.Limit, why)
		}
		fit.Notes = append(fit.Notes, fmt.Sprintf("class %s: %.0f requests refused at a tenant's cap on requests in flight (429 key_concurrency, shedredis.ConcurrencyMiddleware; %d records, %d tenants), counted among its arrivals and rejections as offered; %s",
			cf.Name, kf.Refused, kf.Records, kf.Keys, inferred))
	}
}
