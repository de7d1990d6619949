// Package chart draws the time series of simulation runs (package sim) as
// one figure per scenario with a line per policy: the limit, the work in
// flight, the admitted p99 latency and the goodput (with the ideal, dashed)
// over time, stacked and sharing the time axis. It writes SVG and PNG with
// gonum.org/v1/plot. Drawing is deterministic: the same results give the
// same bytes.
//
// The figure is 10 x 12 inches; PNG is rendered at 96 dots per inch. The
// trigger window is shaded; the limit panel leaves out policies without a
// limit; the in-flight and latency panels are logarithmic, so that a
// collapse (no limit: tens of thousands in flight, latencies of minutes)
// and the policies that prevent it fit on one scale.
package chart
