# shedkit: adaptive load shedding for Go services.
# `make test` is what CI runs (through .ci/run); `make help` lists targets.

GO      ?= go
GOFILES := $(shell find . -name '*.go' -not -path './.cache/*' -not -path './out/*' -not -path './bench/*')
STATICCHECK_VERSION ?= v0.8.2

JAEGER_VERSION ?= v1.75.0
JAEGER_BIN     := .cache/bin/jaeger-$(JAEGER_VERSION)

.PHONY: help test fmtcheck vet bench cover lint demo calibrate-demo jaeger jaeger-build demo-traces e2e dashboards-check sim sim-check bench-peers sim-peers sim-family test-bench test-grpc soak fuzz

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: fmtcheck vet ## gofmt check, go vet, every test with the race detector (all three modules, the 10-second soak included), and the simulation suite's ranges without it
	$(GO) test -race -count=1 -timeout 12m ./...
	$(GO) test -count=1 -run 'TestSuiteExpectations|TestNoPeerDominates|TestFamilySample' ./sim/
	$(MAKE) --no-print-directory test-bench
	$(MAKE) --no-print-directory test-grpc

fmtcheck: ## fail if gofmt would change a file
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

bench: ## benchmarks with allocations, at GOMAXPROCS 1 and 2
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 ./...

bench-peers: ## hot path against x/sync/semaphore, go-concurrency-limits and failsafe-go (module bench/, about 4 minutes)
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count 5 . | tee results/hotpath.txt | $(GO) run ./cmd/hotpath

sim-peers: ## the simulator suite with the peers, failsafe-go included (module bench/)
	cd bench && $(GO) run ./cmd/shedsim -suite -policies 'static;shedkit-gradient;shedkit-aimd;gcl-gradient2;gcl-aimd;failsafe-adaptive' -out ../out/sim-peers

# The peers compared warm ({warm}: an initial limit at the healthy work in
# flight) and with the room each instance needs ({max}).
FAMILY_POLICIES := none;static;shedkit-gradient;shedkit-aimd;gcl-gradient2:initial={warm},min=1,max={max};gcl-vegas:initial={warm},max={max};gcl-aimd:initial={warm},max={max};failsafe-adaptive:initial={warm},max={max}
FAMILY_N ?= 200

sim-family: ## the healthy and incident scenario families (FAMILY_N=200 instances each) with every peer: distributions, CSV and charts under out/sim-family, reports copied to bench/results (module bench/, about an hour on 2 cores)
	cd bench && $(GO) run ./cmd/shedsim -family healthy -n $(FAMILY_N) -policies '$(FAMILY_POLICIES)' -out ../out/sim-family -quiet
	cd bench && $(GO) run ./cmd/shedsim -family incident -n $(FAMILY_N) -policies '$(FAMILY_POLICIES)' -out ../out/sim-family -quiet
	cp out/sim-family/family-healthy.txt bench/results/family-healthy.txt
	cp out/sim-family/family-incident.txt bench/results/family-incident.txt

test-bench: ## vet and test the bench/ module: peers, and the 10-second loopback soak (not part of the library)
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

test-grpc: ## vet and test the middleware/grpc module (gRPC interceptors, loopback tests; its own module so HTTP-only users never download gRPC)
	cd middleware/grpc && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

soak: ## loopback soak: a server at 10x overload with a mid-run slowdown, the retrying client through a full outage, then hostile clients (slow uploads, disconnects, endless 503 bodies, encoded paths) next to normal traffic (module bench/, about 2 minutes)
	cd bench && $(GO) run ./cmd/soak -duration 60s

FUZZTIME ?= 30s
# package:target pairs; `go test -fuzz` takes one target of one package at a time.
FUZZ_TARGETS := \
	./shed/:FuzzConfig \
	./limits/:FuzzGradient ./limits/:FuzzAIMD ./limits/:FuzzWindow \
	./retrybudget/:FuzzParseRetryAfter ./retrybudget/:FuzzParseAttempt ./retrybudget/:FuzzBudget \
	./retrybudget/:FuzzThrottle ./retrybudget/:FuzzRetryAfterFormats ./retrybudget/:FuzzTransportHeaders \
	./middleware/shedhttp/:FuzzRetryAfterRoundTrip ./middleware/shedhttp/:FuzzWriteProblem \
	./middleware/shedhttp/:FuzzMemoryStore ./middleware/shedhttp/:FuzzDefaultOutcome ./middleware/shedhttp/:FuzzParseDeadline \
	./middleware/internal/core/:FuzzRemoteHost ./middleware/internal/core/:FuzzClassifyUntrusted \
	./middleware/internal/core/:FuzzClassifyTrusted ./middleware/internal/core/:FuzzAdmit \
	./middleware/nethttp/:FuzzServeRequest \
	./sim/:FuzzParseScenario ./sim/:FuzzScenarioRuns ./sim/:FuzzParsePolicy \
	./sim/:FuzzParseGrid ./sim/:FuzzParseObjective ./sim/:FuzzScenarioYAMLRoundTrip \
	./record/:FuzzReader

fuzz: ## run every fuzz target for FUZZTIME (30s) each, one after the other (about 14 minutes); seed corpora run in `make test`
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$pkg $$name"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

cover: ## test coverage per function, written to out/cover.out
	@mkdir -p out
	$(GO) test -count=1 -coverprofile=out/cover.out ./...
	$(GO) tool cover -func=out/cover.out | tail -n 1

lint: fmtcheck vet ## gofmt, go vet and staticcheck (fetched from the module proxy)
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...; \
	else echo "staticcheck $(STATICCHECK_VERSION) could not be fetched; skipped"; fi

sim: ## simulate the built-in suite over every policy: table on stdout, CSV, JSON and charts under out/sim
	$(GO) run ./cmd/shedsim -suite

sim-check: ## the simulation suite against the ranges its scenarios expect (a few minutes)
	$(GO) run ./cmd/shedsim -suite -check -quiet -charts=false -out ''

demo: ## run the demo: an upstream slowdown without and with shedkit (about a minute; report in out/demo)
	$(GO) run ./cmd/demo $(DEMO_FLAGS)

calibrate-demo: ## record the demo's protected run, simulate it (processor-sharing upstream) and compare prediction with measurement (about 30 s; out/calibrate)
	rm -rf out/calibrate/recording
	$(GO) run ./cmd/demo -mode protected -record out/calibrate/recording -calibrate -out out/calibrate $(DEMO_FLAGS)

jaeger-build: $(JAEGER_BIN) ## build Jaeger from the Go module proxy into .cache/ (several minutes, once)

$(JAEGER_BIN): tools/jaeger/go.mod tools/jaeger/go.sum
	@mkdir -p $(dir $@)
	@echo "building Jaeger $(JAEGER_VERSION) from the Go module proxy (several minutes on a cold cache)..."
	cd tools/jaeger && $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$@ github.com/jaegertracing/jaeger/cmd/jaeger

jaeger: $(JAEGER_BIN) ## run Jaeger on 127.0.0.1 (API http://127.0.0.1:16686, OTLP :4317/:4318), in-memory
	$(JAEGER_BIN) --config file:e2e/jaeger.yaml

# Jaeger stores traces, not metrics: metrics stay on the demo's /metrics.
demo-traces: ## run the demo exporting its traces to the Jaeger of `make jaeger`
	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_METRICS_EXPORTER=none $(GO) run ./cmd/demo $(DEMO_FLAGS)

e2e: $(JAEGER_BIN) ## end-to-end: Jaeger + a short demo, then check the traces through Jaeger's API
	JAEGER_BIN=$(CURDIR)/$(JAEGER_BIN) $(GO) test -tags e2e -count=1 -v -timeout 10m ./e2e/

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
	$(GO) test -tags dashboards -count=1 -v -timeout 8m -run '^TestDashboardsAgainstPrometheus$$' ./dashboards/
