// Package dashboards holds shedkit's Grafana dashboard (shedkit.json) and
// Prometheus rules (rules.yaml, unit-tested by rules_test.yaml), and the
// tests that keep them true to the metrics the code exports.
//
// The plain tests check the dashboard's structure without any service:
// every panel has a unit, takes its data source from the $datasource
// variable, filters by $job and $instance, and names only metrics shedkit
// exports. They run with `go test ./...`.
//
// The test behind the dashboards build tag checks them against the real
// thing: it starts the demo and a Prometheus on 127.0.0.1, runs the demo's
// upstream slowdown and outage, and asserts through Prometheus' HTTP API
// that every panel's query returns series with the labels its legend
// names (but the panels of modules the demo does not run, such as
// middleware/shedredis, whose names cmd/demo's tests check against the
// exporter instead), and that the chosen alerts fire during the incident
// and resolve after it. Run it with `make dashboards-check`, which installs Debian's
// prometheus package when prometheus or promtool is missing.
//
// Only the standard library is used to talk to Prometheus, so that the
// checks add no dependency to the module.
package dashboards
