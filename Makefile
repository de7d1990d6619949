# shedkit: adaptive load shedding for Go services.
# `make test` is what CI runs (through .ci/run); `make help` lists targets.

GO      ?= go
GOFILES := $(shell find . -name '*.go' -not -path './.cache/*' -not -path './out/*' -not -path './bench/*')

# The repository's modules (see README, "Modules"). The root module is the
# library; each of the others has its own go.mod and reaches its siblings
# through replace directives. `make test` vets and tests every one of them
# with GOWORK=off, that is against the versions its own go.mod selects (what
# a user gets), and modules-check fails if a go.mod is missing from these
# lists. bench, middleware/grpc and middleware/shedredis are tested by
# test-bench, test-grpc and test-redis;
# tools/jaeger only builds Jaeger (`make jaeger-build`).
MODULES     := . limits/gcl middleware/echo sim cmd dashboards e2e
ALL_MODULES := $(MODULES) bench middleware/grpc middleware/shedredis
SOLO        := GOWORK=off
# Programs run from the repository root through the workspace (go.work).
WS          := GOWORK=$(CURDIR)/go.work
STATICCHECK_VERSION ?= v0.8.2

JAEGER_VERSION ?= v1.75.0
JAEGER_BIN     := .cache/bin/jaeger-$(JAEGER_VERSION)

.PHONY: help test test-modules modules-check consumer-check fmtcheck vet bench cover lint demo calibrate-demo tune-demo jaeger jaeger-build demo-traces e2e dashboards-check sim sim-check bench-peers sim-peers sim-family sim-family-models sim-family-seeds sim-cases test-bench test-grpc soak fuzz release-check

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: modules-check fmtcheck vet consumer-check ## gofmt check, go vet and every test with the race detector in every module (the 10-second soak included), the simulation suite's ranges without it, and the consumer check
	$(MAKE) --no-print-directory test-modules
	cd sim && $(SOLO) $(GO) test -count=1 -run 'TestSuiteExpectations|TestNoPeerDominates|TestFamilySample' .
	$(MAKE) --no-print-directory test-bench
	$(MAKE) --no-print-directory test-grpc
	$(MAKE) --no-print-directory test-redis

test-modules: ## every test with the race detector, module by module (MODULES; bench and middleware/grpc have their own targets)
	@set -e; for m in $(MODULES); do \
		echo "== module $$m"; \
		(cd $$m && $(SOLO) $(GO) test -race -count=1 -timeout 12m ./...); \
	done

modules-check: ## fail if a go.mod of the repository is in neither ALL_MODULES nor tools/jaeger
	@set -e; for f in $$(find . -name go.mod -not -path './.cache/*' -not -path './out/*'); do \
		d=$$(dirname $$f); d=$${d#./}; \
		case " $(ALL_MODULES) tools/jaeger " in *" $$d "*) ;; \
		*) echo "module $$d is not in the Makefile's MODULES: make test would skip it"; exit 1;; esac; \
	done

consumer-check: ## a throwaway module importing shed, limits, retrybudget and middleware/nethttp: print its module graph, fail on charting, Prometheus, gRPC, Echo or YAML brought in by shedkit
	GO=$(GO) .ci/consumer.sh

# A maintainer's target, not in `make test`: it needs the network for
# third-party modules. RELEASING.md describes the release it rehearses.
VERSION ?= v0.0.1-check
release-check: ## rehearse a release at VERSION (v0.0.1-check) in a temporary clone: tools/release/prepare.sh, commit, tags, then `go get` of each published module from that clone in fresh modules outside the repository, and their builds (about a minute; needs the network for third-party modules)
	GO=$(GO) tools/release/check.sh $(VERSION)

fmtcheck: ## fail if gofmt would change a file
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet in every module
	@set -e; for m in $(ALL_MODULES); do \
		echo "== go vet: module $$m"; \
		(cd $$m && $(SOLO) $(GO) vet ./...); \
	done

bench: ## benchmarks with allocations, at GOMAXPROCS 1 and 2, in every module of MODULES
	@set -e; for m in $(MODULES); do \
		(cd $$m && $(SOLO) $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 ./...); \
	done

# The gRPC interceptor against go-concurrency-limits' is in bench/grpcpeers
# (test-bench runs its test), which neither bench nor bench-peers benchmarks:
#   cd bench && go test -run '^$' -bench . -benchmem ./grpcpeers
bench-peers: ## hot path against x/sync/semaphore, go-concurrency-limits and failsafe-go (module bench/, about 4 minutes)
	cd bench && $(SOLO) $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count 5 . | tee results/hotpath.txt | $(SOLO) $(GO) run ./cmd/hotpath

sim-peers: ## the simulator suite with every peer at its defaults: table in bench/results/suite-all.txt, CSV and charts under out/sim-peers (module bench/, about 7 minutes)
	cd bench && $(SOLO) $(GO) run ./cmd/shedsim -suite -quiet -policies 'none;static;shedkit-gradient;shedkit-aimd;gcl-gradient2;gcl-vegas;gcl-aimd;failsafe-adaptive' -out ../out/sim-peers > results/suite-all.txt

# The peers compared warm ({warm}: an initial limit at the healthy work in
# flight) and with the room each instance needs ({max}).
FAMILY_POLICIES := none;static;shedkit-gradient;shedkit-aimd;gcl-gradient2:initial={warm},min=1,max={max};gcl-vegas:initial={warm},max={max};gcl-aimd:initial={warm},max={max};failsafe-adaptive:initial={warm},max={max}
FAMILY_N ?= 200
SEEDS_N ?= 100

sim-family: ## the healthy and incident scenario families (FAMILY_N=200 instances each) with every peer: distributions, CSV and charts under out/sim-family, reports copied to bench/results (module bench/, about 25 minutes on 2 cores)
	cd bench && $(SOLO) $(GO) run ./cmd/shedsim -family healthy -n $(FAMILY_N) -policies '$(FAMILY_POLICIES)' -out ../out/sim-family -quiet
	cd bench && $(SOLO) $(GO) run ./cmd/shedsim -family incident -n $(FAMILY_N) -policies '$(FAMILY_POLICIES)' -out ../out/sim-family -quiet
	cp out/sim-family/family-healthy.txt bench/results/family-healthy.txt
	cp out/sim-family/family-incident.txt bench/results/family-incident.txt

sim-family-seeds: ## the healthy family on seeds 3, 4 and 5 (SEEDS_N=100 instances each) for shedkit's limits against no limit and the static oracle: the defaults were judged mostly on seeds 1 and 2, these show them on draws that were not; reports in bench/results/family-healthy-s*.txt (about 5 minutes on 2 cores)
	for s in 3 4 5; do \
	  (cd bench && $(SOLO) $(GO) run ./cmd/shedsim -family healthy -seed $$s -n $(SEEDS_N) -policies 'none;static;shedkit-gradient;shedkit-aimd' -out ../out/sim-family-seeds/s$$s -quiet -charts=false) || exit 1; \
	  cp out/sim-family-seeds/s$$s/family-healthy.txt bench/results/family-healthy-s$$s.txt; \
	done

sim-family-models: ## the families again with replicas that stop waiting for the upstream at the request's deadline, as handlers that pass r.Context() to their call: -deadline-model cancel (the upstream keeps the work) and abandon (it stops it); incident with every peer, healthy for shedkit's limits; reports in bench/results/family-{incident,healthy}-{cancel,abandon}.txt (about 30 minutes on 2 cores)
	for m in cancel abandon; do \
	  (cd bench && $(SOLO) $(GO) run ./cmd/shedsim -family incident -deadline-model $$m -n $(FAMILY_N) -policies '$(FAMILY_POLICIES)' -out ../out/sim-family-models/$$m -quiet -charts=false) || exit 1; \
	  (cd bench && $(SOLO) $(GO) run ./cmd/shedsim -family healthy -deadline-model $$m -n $(FAMILY_N) -policies 'none;static;shedkit-gradient;shedkit-aimd' -out ../out/sim-family-models/$$m -quiet -charts=false) || exit 1; \
	  cp out/sim-family-models/$$m/family-incident.txt bench/results/family-incident-$$m.txt; \
	  cp out/sim-family-models/$$m/family-healthy.txt bench/results/family-healthy-$$m.txt; \
	done

sim-cases: ## scenarios the families do not draw (bench/scenarios/cases): replicas sharing one dependency through four minutes of 1.3x and 2x its capacity, and a dependency 1.6x slower with room to spare under rising demand; shedkit's limits against a static limit at each replica's share and the peers at their defaults; table in bench/results/cases.txt (about a minute)
	cd bench && $(SOLO) $(GO) run ./cmd/shedsim -scenario $$(ls scenarios/cases/*.yaml | paste -sd, -) -quiet -charts=false -policies 'none;static;shedkit-gradient;shedkit-aimd;gcl-gradient2;gcl-vegas;gcl-aimd;failsafe-adaptive' -out ../out/sim-cases > results/cases.txt

test-bench: ## vet and test the bench/ module: peers, and the 10-second loopback soak (not part of the library)
	cd bench && $(SOLO) $(GO) vet ./... && $(SOLO) $(GO) test -race -count=1 -timeout 5m ./...

test-grpc: ## vet and test the middleware/grpc module (gRPC interceptors, loopback tests; its own module so HTTP-only users never download gRPC)
	cd middleware/grpc && $(SOLO) $(GO) vet ./... && $(SOLO) $(GO) test -race -count=1 -timeout 5m ./...

.PHONY: test-redis redis demo-fleet

# SHEDKIT_REQUIRE_REDIS=1: without redis-server the Redis tests fail
# instead of skipping, so that CI cannot pass them by skipping.
test-redis: ## vet and test the middleware/shedredis module (fleet quotas and leases on Redis; its own module so users without Redis never download a Redis client) against a real redis-server the tests start on free ports (about a minute; `make redis` installs it)
	cd middleware/shedredis && $(SOLO) $(GO) vet ./... && SHEDKIT_REQUIRE_REDIS=1 $(SOLO) $(GO) test -race -count=1 -timeout 5m ./...

redis: ## install Debian's redis-server when missing (the tests start their own; root and Debian needed)
	@command -v redis-server >/dev/null || { \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends redis-server || \
		{ apt-get update && apt-get install -y --no-install-recommends redis-server; }; \
	}
	@redis-server --version

demo-fleet: ## three replicas sharing tenant quotas through one Redis: a noisy tenant and quiet ones, Redis killed midway and restarted; a table per second (about 15 s; needs redis-server: make redis)
	cd middleware/shedredis && $(SOLO) $(GO) run ./cmd/fleetdemo $(DEMO_FLEET_FLAGS)

soak: ## loopback soak: a server at 10x overload with a mid-run slowdown, the retrying client through a full outage, then hostile clients (slow uploads, disconnects, endless 503 bodies, encoded paths) next to normal traffic (module bench/, about 2 minutes)
	cd bench && $(SOLO) $(GO) run ./cmd/soak -duration 60s

FUZZTIME ?= 30s
# directory:target pairs; `go test -fuzz` takes one target of one package at
# a time, run in the package's directory (and so in its module).
FUZZ_TARGETS := \
	shed:FuzzConfig \
	limits:FuzzGradient limits:FuzzAIMD limits:FuzzWindow \
	retrybudget:FuzzParseRetryAfter retrybudget:FuzzParseAttempt retrybudget:FuzzBudget \
	retrybudget:FuzzThrottle retrybudget:FuzzRetryAfterFormats retrybudget:FuzzTransportHeaders \
	middleware/shedhttp:FuzzRetryAfterRoundTrip middleware/shedhttp:FuzzWriteProblem \
	middleware/shedhttp:FuzzMemoryStore middleware/shedhttp:FuzzDefaultOutcome middleware/shedhttp:FuzzParseDeadline \
	middleware/internal/core:FuzzRemoteHost middleware/internal/core:FuzzClassifyUntrusted \
	middleware/internal/core:FuzzClassifyTrusted middleware/internal/core:FuzzAdmit \
	middleware/internal/core:FuzzAddrKey \
	middleware/nethttp:FuzzServeRequest \
	sim:FuzzParseScenario sim:FuzzScenarioRuns sim:FuzzParsePolicy \
	sim:FuzzParseGrid sim:FuzzParseObjective sim:FuzzScenarioYAMLRoundTrip sim:FuzzFit \
	sim/cli:FuzzReadFamilyCSV \
	record:FuzzReader

fuzz: ## run every fuzz target for FUZZTIME (30s) each, one after the other (about 16 minutes); seed corpora run in `make test`
	@set -e; for t in $(FUZZ_TARGETS); do \
		dir=$${t%%:*}; name=$${t##*:}; \
		echo "== $$dir $$name"; \
		(cd $$dir && $(SOLO) $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) .); \
	done

cover: ## test coverage per function of every module of MODULES, written to out/cover/<module>.out
	@mkdir -p out/cover
	@set -e; for m in $(MODULES); do \
		f=$(CURDIR)/out/cover/$$(echo $$m | tr / - | sed 's/^\.$$/root/').out; \
		(cd $$m && $(SOLO) $(GO) test -count=1 -coverprofile=$$f ./... >/dev/null && \
		 printf '%-18s %s\n' "$$m" "$$($(SOLO) $(GO) tool cover -func=$$f | tail -n 1)"); \
	done

lint: fmtcheck vet ## gofmt, go vet and staticcheck (fetched from the module proxy)
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
		for m in $(ALL_MODULES); do \
			(cd $$m && $(SOLO) $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...) || exit 1; \
		done; \
	else echo "staticcheck $(STATICCHECK_VERSION) could not be fetched; skipped"; fi

sim: ## simulate the built-in suite over every policy: table on stdout, CSV, JSON and charts under out/sim
	$(WS) $(GO) run ./cmd/shedsim -suite

sim-check: ## the simulation suite against the ranges its scenarios expect (a few minutes)
	$(WS) $(GO) run ./cmd/shedsim -suite -check -quiet -charts=false -out ''

demo: ## run the demo: an upstream slowdown without and with shedkit (about a minute; report in out/demo)
	$(WS) $(GO) run ./cmd/demo $(DEMO_FLAGS)

calibrate-demo: ## record the demo's protected run, simulate it (processor-sharing upstream) and compare prediction with measurement (about 30 s; out/calibrate)
	rm -rf out/calibrate/recording
	$(WS) $(GO) run ./cmd/demo -mode protected -record out/calibrate/recording -calibrate -out out/calibrate $(DEMO_FLAGS)

tune-demo: ## record the demo's protected run, tune its configuration on the fitted scenario (shedsim tune: 120 candidates x 4 stress variants x 3 seeds, seed 1), re-run it tuned and compare with the hand-picked one (about 1.5 minutes on 2 cores; out/tune)
	rm -rf out/tune/recording
	$(WS) $(GO) run ./cmd/demo -mode protected -record out/tune/recording -tune -tune-budget 120 -tune-seeds 3 -seed 1 -out out/tune $(DEMO_FLAGS)

jaeger-build: $(JAEGER_BIN) ## build Jaeger from the Go module proxy into .cache/ (several minutes, once)

$(JAEGER_BIN): tools/jaeger/go.mod tools/jaeger/go.sum
	@mkdir -p $(dir $@)
	@echo "building Jaeger $(JAEGER_VERSION) from the Go module proxy (several minutes on a cold cache)..."
	cd tools/jaeger && $(SOLO) $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$@ github.com/jaegertracing/jaeger/cmd/jaeger

jaeger: $(JAEGER_BIN) ## run Jaeger on 127.0.0.1 (API http://127.0.0.1:16686, OTLP :4317/:4318), in-memory
	$(JAEGER_BIN) --config file:e2e/jaeger.yaml

# Jaeger stores traces, not metrics: metrics stay on the demo's /metrics.
demo-traces: ## run the demo exporting its traces to the Jaeger of `make jaeger`
	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_METRICS_EXPORTER=none $(WS) $(GO) run ./cmd/demo $(DEMO_FLAGS)

e2e: $(JAEGER_BIN) ## end-to-end: Jaeger + a short demo, then check the traces through Jaeger's API
	cd e2e && JAEGER_BIN=$(CURDIR)/$(JAEGER_BIN) $(SOLO) $(GO) test -tags e2e -count=1 -v -timeout 10m .

# Debian's prometheus package brings both binaries (about 15 s to install).
# Where systemd runs, installing it also starts a Prometheus service on
# :9090; the check itself uses free ports on 127.0.0.1.
dashboards-check: ## dashboards/: promtool checks and unit tests of the rules, then the demo scraped by a real Prometheus: every panel returns series, the incident's alerts fire and resolve (about 3 minutes)
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
		echo "installing Debian's prometheus package (apt-get install prometheus)..."; \
		mkdir -p .cache; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends prometheus >.cache/apt-prometheus.log 2>&1 || \
		{ apt-get update >>.cache/apt-prometheus.log 2>&1 && \
		  apt-get install -y --no-install-recommends prometheus >>.cache/apt-prometheus.log 2>&1; } || \
		{ cat .cache/apt-prometheus.log; echo "could not install prometheus (root and Debian needed)"; exit 1; }; \
	fi
	promtool check rules dashboards/rules.yaml
	promtool test rules dashboards/rules_test.yaml
	cd dashboards && $(SOLO) $(GO) test -tags dashboards -count=1 -v -timeout 8m -run '^TestDashboardsAgainstPrometheus$$' .
