#!/usr/bin/env bash
# Consumer check: a service that imports only the library (shed, limits,
# retrybudget, middleware/nethttp) must not find charting, Prometheus, gRPC,
# Echo or YAML in its module graph. Builds a throwaway module in a temporary
# directory that requires the checkout through a replace directive, runs
# `go mod tidy` and `go list -m all`, prints the graph and its size, and
# fails if a forbidden module is compiled into the consumer or required by
# anything other than a third-party module's own test requirements.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# The checkout's go.work must not turn the throwaway module into a workspace.
export GOWORK=off GOFLAGS=-mod=mod
cat >go.mod <<MOD
module example.com/consumer

go 1.26.0

require github.com/shedkit/shedkit v0.0.0

replace github.com/shedkit/shedkit => $root
MOD
cat >main.go <<'GO'
package main

import (
	"net/http"

	"github.com/shedkit/shedkit/limits"
	"github.com/shedkit/shedkit/middleware/nethttp"
	"github.com/shedkit/shedkit/retrybudget"
	"github.com/shedkit/shedkit/shed"
)

var (
	_ = shed.New
	_ = limits.NewGradient
	_ = retrybudget.NewTransport
	_ = nethttp.New
	_ http.Handler
)

func main() {}
GO
"$go" mod tidy >/dev/null
"$go" build ./...
mods=$("$go" list -m all)
echo "$mods"
echo "consumer module graph: $(echo "$mods" | wc -l) modules (the consumer included)"
# Packages that a build of the consumer compiles: none may come from a
# forbidden module.
forbidden='gonum|prometheus|grpc|labstack|echo|yaml'
fail=0
built=$("$go" list -deps -f '{{with .Module}}{{.Path}}{{end}}' ./... | sort -u)
if bad=$(echo "$built" | grep -Ei "$forbidden"); then
	echo "FAIL: the consumer's build compiles packages of:"; echo "$bad"; fail=1
fi
# The module graph: a forbidden module may appear only where a third-party
# dependency of the library requires it for its own tests (the OpenTelemetry
# API, gobreaker and goleak require testify, which requires YAML); shedkit
# itself must not require one, nor may anything else.
graph=$("$go" mod graph)
allowed='^(go\.opentelemetry\.io/|github\.com/sony/gobreaker/|go\.uber\.org/goleak@|github\.com/stretchr/testify@)'
for m in $(echo "$mods" | awk 'NR>1{print $1}' | grep -Ei "$forbidden" || true); do
	by=$(echo "$graph" | awk -v m="$m" '$2 ~ "^"m"@" {print $1}' | sort -u)
	if others=$(echo "$by" | grep -Ev "$allowed"); then
		echo "FAIL: $m is in a library user's module graph, required by:"; echo "$others"; fail=1
	else
		echo "note: $m is in the graph only through the go.mod of: $(echo "$by" | sed 's/@.*//' | sort -u | tr '\n' ' ')(their tests' requirements; never built)"
	fi
done
if [ "$fail" != 0 ]; then exit 1; fi
echo "ok: a library user builds no charting, Prometheus, gRPC, Echo or YAML package, and shedkit requires none of those modules"
