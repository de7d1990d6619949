# shedkit: adaptive load shedding for Go services.
# `make test` is what CI runs (through .ci/run); `make help` lists targets.

GO      ?= go
GOFILES := $(shell find . -name '*.go' -not -path './.cache/*' -not -path './out/*' -not -path './bench/*')
STATICCHECK_VERSION ?= v0.8.2

.PHONY: help test fmtcheck vet bench cover lint

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: fmtcheck vet ## gofmt check, go vet, and every test with the race detector
	$(GO) test -race -count=1 -timeout 12m ./...

fmtcheck: ## fail if gofmt would change a file
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

bench: ## benchmarks with allocations, at GOMAXPROCS 1 and 2
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 ./...

cover: ## test coverage per function, written to out/cover.out
	@mkdir -p out
	$(GO) test -count=1 -coverprofile=out/cover.out ./...
	$(GO) tool cover -func=out/cover.out | tail -n 1

lint: fmtcheck vet ## gofmt, go vet and staticcheck (fetched from the module proxy)
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...; \
	else echo "staticcheck $(STATICCHECK_VERSION) could not be fetched; skipped"; fi
