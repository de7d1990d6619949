// Package shedotel reports a shed.Limiter as OpenTelemetry metrics.
//
// Counters and gauges are observable instruments read from
// shed.Limiter.Snapshot at collection time, so they cost the admission hot
// path nothing. Only two histograms are recorded as things happen, through
// the limiter's Observer hook: the queue wait of requests that queued, and
// the latency of permits the limiter timed (a subset at high rates: see
// shed.Config.MaxSamplesPerSecond).
//
//	m, err := shedotel.New(shedotel.Config{Name: "gateway"})
//	lim, err := shed.New(shed.Config{Limit: 64, Observer: m})
//	reg, err := m.Register(lim)
//	defer reg.Unregister()
//
// Nothing checks that both steps were taken: a limiter registered without
// the Metrics as its Observer reports every counter and gauge, and no
// histogram. The middleware's 429s are counted only when the Metrics is
// also shedhttp.Options.Observer, and an adaptive limit's decisions only
// after RegisterLimit.
//
// Without a MeterProvider in the Config the global one is used; when no
// SDK is installed it is a no-op.
//
// # Instruments
//
// All carry the attribute shedkit.limiter (Config.Name). Class names come
// from the limiter's configuration, so every attribute is low-cardinality.
//
//	shedkit.admission.limit             gauge          {request}  the concurrency limit in force
//	shedkit.admission.inflight          updowncounter  {request}  admitted work not yet released; shedkit.class
//	shedkit.admission.inflight.cost     updowncounter  {unit}     cost of that work; shedkit.class
//	shedkit.admission.cost.budget       gauge          {unit}     the cost budget (only when there is one)
//	shedkit.admission.queue.depth       updowncounter  {request}  requests waiting; shedkit.class
//	shedkit.admission.tenants           updowncounter  {tenant}   tenants with work in flight or queued (shed.Request.Tenant); shedkit.class
//	shedkit.admission.decisions         counter        {request}  shedkit.class, shedkit.decision (admitted, queued, rejected, cancelled), shedkit.reason on rejections (tenant_share: over the tenant's share)
//	shedkit.admission.releases          counter        {request}  shedkit.class, shedkit.outcome (success, dropped, ignored, leaked)
//	shedkit.admission.queue.wait        histogram      s          time in the queue; shedkit.class, shedkit.decision (admitted, rejected, cancelled)
//	shedkit.admission.latency           histogram      s          how long timed permits were held; shedkit.class, shedkit.outcome
//
// A request that waits is counted twice in shedkit.admission.decisions:
// under queued when it joins the queue, then under admitted, rejected or
// cancelled when its wait ends. Outside dry run, the requests a class
// received are admitted + rejected + cancelled; summing every decision,
// queued included, counts the waits twice and understates a rejection
// ratio.
//
// The middleware's own rate-limit rejections (429) count under
// shedkit.reason=rate_limited when the Metrics is also the middleware's
// Observer (shedhttp.Options.Observer): the limiter never sees them.
//
// In dry-run mode shedkit.admission.decisions counts the would-be
// rejections under shedkit.decision=rejected while every request is also
// counted as admitted.
package shedotel
