package soak

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shedkit/shedkit/shed"
)

// HostileReport is what a hostile soak measured.
type HostileReport struct {
	// Config is the configuration with its defaults filled in.
	Config HostileConfig

	// Before was measured before anything started, Idle once the servers
	// listened, After once everything was closed (GoroutinesAfter is the
	// count after waiting for it to settle).
	Before, Idle, After Resources
	GoroutinesAfter     int
	// Levels are the samples' means over the second half of the baseline,
	// the hostile window, and the part of the last phase after every
	// hostile client returned (the last sample if none).
	Levels [numHostilePhases]PhaseLevel
	// LimitMin is the lowest limit of each phase, read every 10 ms, and
	// Windows the Gradient windows that closed in it.
	LimitMin [numHostilePhases]int
	Windows  [numHostilePhases]uint64
	// LimitCuts counts the falls of the limit the watcher saw.
	LimitCuts [numHostilePhases]int

	// Normal traffic by phase.
	Normal NormalFigures
	// Kinds are the hostile requests by kind (see HostileKindNames).
	Kinds [numHostileKinds]KindFigures
	// EncodedPassed counts the encoded-path requests that got past the
	// rate limit; EncodedBound is the most its key may get past it.
	EncodedPassed, EncodedBound uint64

	// Service-side figures.
	Runs    RunFigures
	Limiter LimiterFigures
	Calls   CallFigures
	Uploads struct{ BodyErrors, LateBodies uint64 }
	Streams struct{ Cut uint64 }
	// Hijacks counts the upgraded connections, HijackHeld those whose
	// permit was still held once hijacked.
	Hijacks, HijackHeld uint64
	ErrorLog            struct {
		Lines   int
		Panics  int
		Samples []string
	}

	// ConnsOpened counts the connections each side opened or accepted.
	ConnsOpened [numConnKinds]int64
	// HostileEnded is when the last hostile client returned (from the
	// start), HostileWindDown how long after the stop signal.
	HostileEnded, HostileWindDown time.Duration
	End                           HostileEnd
	// Shutdown is the last step: requests queued behind a full limit
	// when the shutdown ends their contexts.
	Shutdown QueuedShutdown
	Samples  []HostileSample
}

// NormalFigures count the normal requests by phase of their send time.
type NormalFigures struct {
	Sent, OK, BadProof, RateLimited, Shed, BadGateway, Other, NoResponse [numHostilePhases]uint64
	MaxLatency                                                           time.Duration
	Samples                                                              []string
}

// KindFigures count one kind of hostile request, as its clients saw it.
type KindFigures struct {
	Sent, OK, BadProof, RateLimited, Shed, BadGateway, NotFound, Switched, Other uint64
	NoResponse, Abandoned, Hung                                                  uint64
	MaxTime                                                                      time.Duration
}

// RunFigures count the runs of the service's handlers.
type RunFigures struct {
	WithPermit, Skipped, Bypass       uint64
	Encoded, EncodedBypass, Escalated uint64
}

// LimiterFigures are the limiter's counters summed over its classes.
type LimiterFigures struct {
	Admitted, Enqueued, Cancelled, Leaked uint64
	Released                              [3]uint64 // by shed.Outcome
	Rejected                              map[string]uint64
}

// CallFigures classify the service's calls to the upstream.
type CallFigures struct {
	Calls, OK, Last503, ClientGone, CutByDeadline, OtherErrors uint64
	Retried, MetEndless                                        uint64
	MaxEndless                                                 time.Duration
	ErrorSamples                                               []string
	// UpstreamAttempts and UpstreamEndless are what the upstream saw;
	// BudgetDenials the retries the budget refused.
	UpstreamAttempts, UpstreamEndless, BudgetDenials uint64
}

// HostileEnd is the state once every client returned.
type HostileEnd struct {
	SettleTime                                    time.Duration
	LimiterInFlight, Queued, HandlerInFlight      int
	UpstreamInFlight, HijackedOpen, DrainInFlight int
	ConnsOpen                                     [numConnKinds]int64
}

// HostileKindNames names the kinds of HostileReport.Kinds.
var HostileKindNames = hostileKindNames

// fill copies what the run measured into the report.
func (r *HostileReport) fill(srv *hostileServer, normal *normalTraffic, hc *hostileClients, smp *hostileSampler) {
	cfg := r.Config
	r.Samples = smp.samples
	r.LimitMin, r.Windows, r.LimitCuts = smp.limitMin, smp.windows, smp.cuts
	from, to := cfg.phases()
	r.Levels[hostileBaseline] = level(r.Samples, from/2, from)
	r.Levels[hostileAttack] = level(r.Samples, from, to)
	r.Levels[hostileAfter] = level(r.Samples, max(to, r.HostileEnded), cfg.Duration+time.Hour)
	if r.Levels[hostileAfter].Samples == 0 && len(r.Samples) > 0 {
		last := r.Samples[len(r.Samples)-1]
		r.Levels[hostileAfter] = level(r.Samples, last.T, last.T+1)
	}
	ns := &normal.stats
	r.Normal = NormalFigures{Sent: ns.sent, OK: ns.ok, BadProof: ns.badProof, RateLimited: ns.limited, Shed: ns.shed,
		BadGateway: ns.badGateway, Other: ns.other, NoResponse: ns.noResponse, MaxLatency: ns.maxLatency, Samples: ns.samples}
	for k := range r.Kinds {
		r.Kinds[k] = hc.stats[k].figures()
	}
	enc := r.Kinds[kindEncoded]
	r.EncodedPassed = enc.Sent - enc.RateLimited - enc.NoResponse
	if d := hc.encodedTo.Sub(hc.encodedFrom); d > 0 {
		// A token bucket lets through its burst plus its rate; 10% and 2
		// more cover the edges of the window.
		r.EncodedBound = uint64(1.1*float64(srv.perKey)*d.Seconds()) + uint64(srv.burst) + 2
	}
	ru := &srv.runs
	r.Runs = RunFigures{ru.withPermit.Load(), ru.skipped.Load(), ru.bypass.Load(), ru.encoded.Load(), ru.encodedBypass.Load(), ru.escalated.Load()}
	r.Limiter = limiterFigures(srv.lim.Snapshot())
	r.Calls = srv.calls.figures()
	r.Calls.UpstreamAttempts, r.Calls.UpstreamEndless = srv.up.attempts.Load(), srv.up.endless.Load()
	r.Calls.BudgetDenials = srv.budget.Snapshot().Denials
	r.Uploads.BodyErrors, r.Uploads.LateBodies = srv.bodyErrors.Load(), srv.lateBodies.Load()
	r.Streams.Cut = srv.streamCut.Load()
	r.Hijacks, r.HijackHeld = srv.hijacks.Load(), srv.hijackHeld.Load()
	r.ErrorLog.Lines, r.ErrorLog.Samples, r.ErrorLog.Panics = srv.errLog.snapshot()
	r.ConnsOpened = [numConnKinds]int64{srv.conns.accepted.Load(), normal.conns.opened.Load() + hc.conns.opened.Load(),
		srv.up.conns.accepted.Load(), srv.upClient.opened.Load()}
}

func (s *kindStats) figures() KindFigures {
	return KindFigures{
		Sent: s.sent.Load(), OK: s.ok.Load(), BadProof: s.badProof.Load(), RateLimited: s.limited.Load(), Shed: s.shed.Load(),
		BadGateway: s.badGateway.Load(), NotFound: s.notFound.Load(), Switched: s.switched.Load(), Other: s.other.Load(),
		NoResponse: s.noResponse.Load(), Abandoned: s.abandoned.Load(), Hung: s.hung.Load(), MaxTime: time.Duration(s.maxTime.Load()),
	}
}

func (c *callStats) figures() CallFigures {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return CallFigures{
		Calls: c.calls.Load(), OK: c.ok.Load(), Last503: c.last503.Load(), ClientGone: c.cancelled.Load(),
		CutByDeadline: c.deadline.Load(), OtherErrors: c.otherErr.Load(), Retried: c.retried.Load(),
		MetEndless: c.metEndless.Load(), MaxEndless: time.Duration(c.maxEndless.Load()),
		ErrorSamples: append([]string(nil), c.errSample...),
	}
}

func limiterFigures(snap shed.Snapshot) LimiterFigures {
	f := LimiterFigures{Rejected: map[string]uint64{}}
	for _, c := range snap.Classes {
		f.Admitted += c.Admitted
		f.Enqueued += c.Enqueued
		f.Cancelled += c.Cancelled
		f.Leaked += c.Leaked
		for o, n := range c.Released {
			f.Released[o] += n
		}
		for reason, n := range c.Rejected {
			if n > 0 {
				f.Rejected[shed.Reason(reason).String()] += n
			}
		}
	}
	return f
}

// expectsAnswer says which kinds must get a response to every request.
// The impatient clients leave before theirs, the cut ones never wait for
// one, and a stalled upload may be abandoned when the window ends.
func expectsAnswer(k int) bool {
	switch k {
	case kindImpatient, kindBodyCut:
		return false
	}
	return true
}

func sumPhase(a [numHostilePhases]uint64) uint64 {
	var t uint64
	for _, v := range a {
		t += v
	}
	return t
}

func share(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Checks evaluates every check of the report.
func (r HostileReport) Checks() []CheckResult {
	var out []CheckResult
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, CheckResult{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	r.resourceChecks(add)
	r.releaseChecks(add)
	r.trafficChecks(add)
	r.hostileChecks(add)
	return out
}

type addFunc func(name string, ok bool, format string, args ...any)

func (r HostileReport) resourceChecks(add addFunc) {
	t := r.Config.Thresholds
	b, a := r.Levels[hostileBaseline], r.Levels[hostileAfter]
	heapSlack := float64(t.HeapSlack) / (1 << 20)
	add("resources-flat", b.Samples > 0 && a.Samples > 0 &&
		a.Goroutines <= b.Goroutines+float64(t.GoroutineSlack) && a.HeapMiB <= b.HeapMiB+heapSlack,
		"under the same normal traffic, before the hostile clients and after them: goroutines %.0f -> %.0f (<= +%d), heap %.1f -> %.1f MiB (<= +%.0f)",
		b.Goroutines, a.Goroutines, t.GoroutineSlack, b.HeapMiB, a.HeapMiB, heapSlack)
	e := r.End
	add("connections-closed", e.ConnsOpen == [numConnKinds]int64{} && e.HijackedOpen == 0,
		"open after closing idle ones: server %d, clients %d, upstream %d, upstream client %d; hijacked %d",
		e.ConnsOpen[connServer], e.ConnsOpen[connClients], e.ConnsOpen[connUpstream], e.ConnsOpen[connUpstreamClient], e.HijackedOpen)
	add("no-leaks-at-end", r.GoroutinesAfter <= r.Before.Goroutines+t.LeftoverGoroutines && r.After.HeapInuse <= r.Before.HeapInuse+t.HeapSlack,
		"goroutines %d before, %d after (tolerance %d); heap %s before, %s after (tolerance %s)",
		r.Before.Goroutines, r.GoroutinesAfter, t.LeftoverGoroutines, mib(float64(r.Before.HeapInuse)), mib(float64(r.After.HeapInuse)), mib(float64(t.HeapSlack)))
}

func (r HostileReport) releaseChecks(add addFunc) {
	e, l := r.End, r.Limiter
	released := l.Released[shed.Success] + l.Released[shed.Dropped] + l.Released[shed.Ignored]
	add("permits-released", e.LimiterInFlight == 0 && e.Queued == 0 && e.HandlerInFlight == 0 && e.UpstreamInFlight == 0 &&
		e.DrainInFlight == 0 && released == l.Admitted && l.Leaked == 0,
		"limiter %d, queued %d, handlers %d, upstream handlers %d, drain report %d (after %v); admitted %d, released %d, leaked %d",
		e.LimiterInFlight, e.Queued, e.HandlerInFlight, e.UpstreamInFlight, e.DrainInFlight, round(e.SettleTime), l.Admitted, released, l.Leaked)
	add("hijack-released", r.Hijacks > 0 && r.HijackHeld == 0,
		"%d upgraded connections, %d still holding their permit once hijacked", r.Hijacks, r.HijackHeld)
	var hostileBad uint64
	for _, k := range r.Kinds {
		hostileBad += k.BadProof
	}
	ru, q := r.Runs, r.Shutdown
	// The shutdown step's held permits are admissions without a handler.
	admitted := l.Admitted - uint64(q.Held)
	add("no-false-success", sumPhase(r.Normal.BadProof) == 0 && hostileBad == 0 && ru.WithPermit == admitted && ru.Bypass == 0,
		"200 without the handler's proof: normal %d, hostile %d; handler runs with a permit %d, admissions %d (%d held by the shutdown step aside); runs without a permit off the skipped paths %d %v",
		sumPhase(r.Normal.BadProof), hostileBad, ru.WithPermit, admitted, q.Held, ru.Bypass, r.Normal.Samples)
	add("shutdown-while-queued", q.Queued == q.Sent && q.Sent > 0 && q.Answered503 == q.Sent && q.HandlerRuns == 0,
		"%d requests queued behind %d held permits when the shutdown ended their contexts: %d answered 503, %d empty 200, %d other, %d without an answer; handlers run %d",
		q.Queued, q.Held, q.Answered503, q.FalseSuccess, q.Other, q.NoAnswer, q.HandlerRuns)
	enc := r.Kinds[kindEncoded]
	add("encoded-paths-limited", ru.Encoded > 0 && ru.EncodedBypass == 0 && ru.Escalated == 0 && enc.RateLimited > 0 && r.EncodedPassed <= r.EncodedBound,
		"%d handler runs for encoded paths: %d without a permit, %d above the default class; their key got %d past the rate limit (bound %d) and %d 429",
		ru.Encoded, ru.EncodedBypass, ru.Escalated, r.EncodedPassed, r.EncodedBound, enc.RateLimited)
}

func (r HostileReport) trafficChecks(add addFunc) {
	t := r.Config.Thresholds
	base, hostile := r.LimitMin[hostileBaseline], r.LimitMin[hostileAttack]
	add("limit-held", base > 0 && r.Windows[hostileBaseline] > 0 && r.Windows[hostileAttack] > 0 && float64(hostile) >= t.LimitFloor*float64(base),
		"lowest limit %d with the hostile clients (%d cuts in %d windows), %d before them (%d cuts in %d windows; need >= %.0f%% of it); after them %d",
		hostile, r.LimitCuts[hostileAttack], r.Windows[hostileAttack], base, r.LimitCuts[hostileBaseline], r.Windows[hostileBaseline],
		100*t.LimitFloor, r.LimitMin[hostileAfter])
	n := r.Normal
	all, allOK := sumPhase(n.Sent), sumPhase(n.OK)
	add("fast-success", all > 0 && share(allOK, all) >= t.MinFastSuccess && share(n.OK[hostileAttack], n.Sent[hostileAttack]) >= t.MinFastSuccess,
		"normal requests answered 200: %.2f%% overall (%d of %d), %.2f%% while the hostile clients ran (need >= %.0f%%); 429 %d, 503 %d, 502 %d, other %d, no response %d",
		100*share(allOK, all), allOK, all, 100*share(n.OK[hostileAttack], n.Sent[hostileAttack]), 100*t.MinFastSuccess,
		sumPhase(n.RateLimited), sumPhase(n.Shed), sumPhase(n.BadGateway), sumPhase(n.Other), sumPhase(n.NoResponse))
	c, fl := r.Calls, r.Kinds[kindFlaky]
	add("upstream-prompt", c.MetEndless > 0 && c.CutByDeadline == 0 && fl.BadGateway > 0 && fl.Hung == 0,
		"%d calls met an endless 503 body, the longest took %v; %d were cut by the request deadline (a hang); flaky requests answered 502 %d of %d, longest %v",
		c.MetEndless, round(c.MaxEndless), c.CutByDeadline, fl.BadGateway, fl.Sent, round(fl.MaxTime))
}

func (r HostileReport) hostileChecks(add addFunc) {
	cfg := r.Config
	var bad []string
	for k, f := range r.Kinds {
		unexpected := f.Other + f.BadProof
		if expectsAnswer(k) {
			unexpected += f.NoResponse
		}
		if unexpected > 0 || f.Hung > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d unexpected, %d hung", hostileKindNames[k], unexpected, f.Hung))
		}
	}
	add("hostile-answered", len(bad) == 0 && r.HostileWindDown <= cfg.HangBound,
		"every hostile request that waits for an answer got one, none hung; the clients returned %v after the stop (bound %v) %v",
		round(r.HostileWindDown), cfg.HangBound, bad)
	add("no-server-errors", r.ErrorLog.Panics == 0,
		"%d net/http error log lines, %d panics %v", r.ErrorLog.Lines, r.ErrorLog.Panics, r.ErrorLog.Samples)
	var missing []string
	need := func(what string, configured bool, n uint64) {
		if configured && n == 0 {
			missing = append(missing, what)
		}
	}
	need("late upload bodies", cfg.SlowUploaders >= 2 && !cfg.SlowWork, r.Uploads.LateBodies)
	need("upload bodies cut", cfg.Disconnectors > 0, r.Uploads.BodyErrors)
	need("streams cut", cfg.Streamers > 0, r.Streams.Cut)
	need("hijacks", cfg.Hijackers > 0, r.Hijacks)
	need("endless 503 bodies", true, r.Calls.MetEndless)
	need("encoded paths", cfg.EncodedRate > 0, r.Runs.Encoded)
	need("impatient clients", cfg.Impatient > 0, r.Kinds[kindImpatient].Sent)
	add("hostile-exercised", len(missing) == 0,
		"late bodies %d, bodies cut %d, streams cut %d, hijacks %d, calls that met an endless body %d, encoded runs %d; missing %v",
		r.Uploads.LateBodies, r.Uploads.BodyErrors, r.Streams.Cut, r.Hijacks, r.Calls.MetEndless, r.Runs.Encoded, missing)
}

// Check returns nil when every check passes, else an error (wrapping
// ErrCheck) that lists every failed check.
func (r HostileReport) Check() error { return checkError(r.Checks()) }

// WriteTo writes the report and its checks.
func (r HostileReport) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	r.writeSetup(&b)
	r.writeTraffic(&b)
	r.writeService(&b)
	r.writeResources(&b)
	writeChecks(&b, r.Checks())
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func (r HostileReport) writeSetup(b *strings.Builder) {
	c := r.Config
	from, to := c.phases()
	fmt.Fprintf(b, "hostile soak: %v, normal traffic %d req/s over %d tenants, hostile clients from %v to %v; request deadline %v, upstream %v, endless 503 every %dth attempt\n",
		c.Duration, c.Rate, len(normalMix), from, to, c.RequestTimeout, c.ServiceTime, c.FailEvery)
	work := ""
	if c.SlowWork {
		work = " (ablation: as slow in the handler instead)"
	}
	fmt.Fprintf(b, "  hostile: %d slow uploaders at %d B/s%s, %d cut mid-body, %d cut mid-stream, %d impatient, %d hijackers, flaky %d/s, encoded paths %d/s (per-key limit %.0f/s)\n",
		c.SlowUploaders, c.UploadRate, work, c.Disconnectors, c.Streamers, c.Impatient, c.Hijackers, c.FlakyRate, c.EncodedRate, c.perKeyRate())
}

func (r HostileReport) writeTraffic(b *strings.Builder) {
	n := r.Normal
	b.WriteString("  normal requests    sent    200  429  503  502 other no-resp bad-proof\n")
	for p := range numHostilePhases {
		fmt.Fprintf(b, "    %-12s %7d %6d %4d %4d %4d %5d %7d %9d\n", hostilePhaseNames[p],
			n.Sent[p], n.OK[p], n.RateLimited[p], n.Shed[p], n.BadGateway[p], n.Other[p], n.NoResponse[p], n.BadProof[p])
	}
	fmt.Fprintf(b, "    slowest %v %v\n", round(n.MaxLatency), n.Samples)
	b.WriteString("  hostile requests      sent   200  101  429  503  502  404 other no-resp abandoned hung bad-proof  longest\n")
	for k, f := range r.Kinds {
		fmt.Fprintf(b, "    %-19s %6d %5d %4d %4d %4d %4d %4d %5d %7d %9d %4d %9d %8v\n", hostileKindNames[k],
			f.Sent, f.OK, f.Switched, f.RateLimited, f.Shed, f.BadGateway, f.NotFound, f.Other, f.NoResponse, f.Abandoned, f.Hung, f.BadProof, round(f.MaxTime))
	}
}

func (r HostileReport) writeService(b *strings.Builder) {
	ru, l, c := r.Runs, r.Limiter, r.Calls
	fmt.Fprintf(b, "  handlers: %d runs with a permit (admissions %d, %d of them the shutdown step's), %d on the skipped path, %d bypassing; encoded paths %d (%d without a permit, %d above the default class)\n",
		ru.WithPermit, l.Admitted, r.Shutdown.Held, ru.Skipped, ru.Bypass, ru.Encoded, ru.EncodedBypass, ru.Escalated)
	fmt.Fprintf(b, "  limiter: released success %d, dropped %d, ignored %d; enqueued %d, cancelled %d, leaked %d; rejected",
		l.Released[shed.Success], l.Released[shed.Dropped], l.Released[shed.Ignored], l.Enqueued, l.Cancelled, l.Leaked)
	for _, k := range sortedKeys(l.Rejected) {
		fmt.Fprintf(b, " %s=%d", k, l.Rejected[k])
	}
	if len(l.Rejected) == 0 {
		b.WriteString(" none")
	}
	fmt.Fprintf(b, "\n  uploads: %d bodies failed, %d ended after the deadline; streams cut %d; hijacks %d (%d holding a permit); net/http log lines %d\n",
		r.Uploads.BodyErrors, r.Uploads.LateBodies, r.Streams.Cut, r.Hijacks, r.HijackHeld, r.ErrorLog.Lines)
	fmt.Fprintf(b, "  upstream: %d attempts, %d endless 503 bodies; calls %d: 200 %d, last 503 returned %d, client gone %d, cut by the deadline %d, other errors %d %v; retried %d, budget denials %d; met an endless body %d, longest %v\n",
		c.UpstreamAttempts, c.UpstreamEndless, c.Calls, c.OK, c.Last503, c.ClientGone, c.CutByDeadline, c.OtherErrors, c.ErrorSamples,
		c.Retried, c.BudgetDenials, c.MetEndless, round(c.MaxEndless))
	q := r.Shutdown
	fmt.Fprintf(b, "  shutdown step: %d permits held, %d requests sent, %d queued; answered 503 %d, empty 200 %d, other %d, no answer %d; handlers run %d\n",
		q.Held, q.Sent, q.Queued, q.Answered503, q.FalseSuccess, q.Other, q.NoAnswer, q.HandlerRuns)
	fmt.Fprintf(b, "  limit (lowest, mean of the samples, cuts, windows):")
	for p := range numHostilePhases {
		fmt.Fprintf(b, " %s %d, %.1f, %d, %d;", hostilePhaseNames[p], r.LimitMin[p], r.Levels[p].LimitMean, r.LimitCuts[p], r.Windows[p])
	}
	b.WriteString("\n")
}

func (r HostileReport) writeResources(b *strings.Builder) {
	lv := r.Levels
	b.WriteString("  resources          before   idle baseline hostile  after closed\n")
	fmt.Fprintf(b, "    goroutines     %8d %6d %8.0f %7.0f %6.0f %6d\n", r.Before.Goroutines, r.Idle.Goroutines,
		lv[hostileBaseline].Goroutines, lv[hostileAttack].Goroutines, lv[hostileAfter].Goroutines, r.GoroutinesAfter)
	fmt.Fprintf(b, "    heap MiB       %8.1f %6.1f %8.1f %7.1f %6.1f %6.1f\n", float64(r.Before.HeapInuse)/(1<<20), float64(r.Idle.HeapInuse)/(1<<20),
		lv[hostileBaseline].HeapMiB, lv[hostileAttack].HeapMiB, lv[hostileAfter].HeapMiB, float64(r.After.HeapInuse)/(1<<20))
	for k := range numConnKinds {
		fmt.Fprintf(b, "    conns %-15s opened %5d, most open at once: baseline %d, hostile %d, after %d; open at the end %d\n", connKindNames[k],
			r.ConnsOpened[k], lv[hostileBaseline].ConnsMax[k], lv[hostileAttack].ConnsMax[k], lv[hostileAfter].ConnsMax[k], r.End.ConnsOpen[k])
	}
	fmt.Fprintf(b, "    hostile clients returned %v after the stop; settled in %v\n", round(r.HostileWindDown), round(r.End.SettleTime))
}
