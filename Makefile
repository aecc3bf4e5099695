# benthos-zerobus — build, test, benchmark, demo.
# Everything the tests need (npm packages, the emulator) is installed or started from here.

SHELL      := /bin/bash
BIN        ?= bin/benthos-zerobus
EMU        ?= bin/zerobus-emulator
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
DATE       ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS    := -s -w -X main.version=$(VERSION) -X main.dateBuilt=$(DATE)
GOFLAGS_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)'
# Packages whose correctness is about concurrency: always run under the race detector.
RACE_PKGS  := ./internal/acklane/... ./internal/kafkain/... ./internal/pool/... ./internal/ingest/... ./internal/tablewriter/... ./plugin/...
# Tests of those packages that run on one goroutine and take minutes under the race detector
# (arrow builds 1,000-deep nested types): make test runs them without it.
RACE_SLOW_PKG   := ./plugin/zerobusreplay/
RACE_SLOW_TESTS := ^TestNestedBodies(KeyValueMap|Variant)?Depth(Limit)?$$
TEST_TIMEOUT ?= 15m
# How many t.Parallel tests of one package make test runs at once.
TEST_PARALLEL ?= 6
# staticcheck, pinned; `go run` fetches it through the Go module proxy on a fresh machine.
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all help build test chaos soak docs conformance-deps prometheus-deps lint-examples vet staticcheck fmt-check bench bench-transport fuzz demo demo-kafka demo-avro emulator docker clean

all: build

## help: list the targets and what each does (this list).
help:
	@awk '/^## [A-Za-z0-9_-]+:/ { t = $$2; sub(/:$$/, "", t); d = $$0; sub(/^## [^:]+: */, "", d); printf "  %-17s %s\n", t, d; next } \
	     /^## / { d = $$0; sub(/^## /, "", d); printf "  %-17s %s\n", "", d }' $(firstword $(MAKEFILE_LIST))

## build: the product binary and, beside it, the emulator's own binary.
build:
	$(GOFLAGS_BUILD) -o $(BIN) ./cmd/benthos-zerobus
	$(GOFLAGS_BUILD) -o $(EMU) ./cmd/zerobus-emulator

## test: everything CI runs — format, vet, staticcheck, the binary, example lint, all tests (race on concurrency packages), SDK conformance.
## Everything it compiles without -race is built as the release binary is (CGO off, -trimpath).
# One build configuration for vet, staticcheck (go run, go list), the binary, the tests and the
# binaries the e2e tests build themselves: they share one build cache, so a fresh machine compiles
# the module graph twice (that and -race), not three times (vet's configuration, then the release
# binary's). Exported so that every go command underneath inherits it (GOFLAGS keeps what go env
# already sets); soak tests the same build.
test soak: export CGO_ENABLED := 0
test soak: export GOFLAGS := $(strip $(shell go env GOFLAGS) -trimpath)
# The concurrency packages (RACE_PKGS) run only under the race detector, every other package
# without it, and the two passes and staticcheck run at the same time: the e2e package spends
# most of its time waiting on the binaries it drives, and the race pass's compile and tests and
# staticcheck's analysis fill that time. Their output is kept in bin/test-race.log and
# bin/staticcheck.log and printed when all have ended. Tests that
# call t.Parallel (the e2e package's long ones, each with its own emulator and binaries) run
# TEST_PARALLEL at a time.
test: fmt-check vet build conformance-deps prometheus-deps lint-examples
	@mkdir -p bin
	@plain=$$(comm -23 <(go list ./... | sort) <(go list $(RACE_PKGS) | sort)); \
	$(MAKE) --no-print-directory staticcheck >bin/staticcheck.log 2>&1 & sc=$$!; \
	CGO_ENABLED=1 go test -count=1 -race -skip '$(RACE_SLOW_TESTS)' -timeout $(TEST_TIMEOUT) $(RACE_PKGS) >bin/test-race.log 2>&1 & race=$$!; \
	echo "go test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) <every package but RACE_PKGS>   (race pass: bin/test-race.log)"; \
	go test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $$plain && \
	go test -count=1 -run '$(RACE_SLOW_TESTS)' -timeout $(TEST_TIMEOUT) $(RACE_SLOW_PKG); plainrc=$$?; \
	wait $$race; racerc=$$?; wait $$sc; scrc=$$?; \
	echo "== CGO_ENABLED=1 go test -count=1 -race -skip '$(RACE_SLOW_TESTS)' -timeout $(TEST_TIMEOUT) $(RACE_PKGS)"; cat bin/test-race.log; \
	echo "== make staticcheck"; cat bin/staticcheck.log; \
	[ $$plainrc -eq 0 ] && [ $$racerc -eq 0 ] && [ $$scrc -eq 0 ]

## chaos: the fault matrix (docs/reliability.md), long form: every TestFault* cell (transient,
## throttling, permanent mid-stream, missing table, OAuth, silent dead connection, endpoint down,
## ack stall, SIGTERM; TestFaultMatrix: each fault class at stream open, mid-stream and during
## shutdown, the whole cross product; workspace down with the streams up; token expiry across
## rotations), rotation, concurrency rejects, the kill -9 recovery tests and the long
## TestChaos (20k ids with rotation, errors, ack stalls, grants revoked, two kill -9s), and the
## Kafka runs in their long form (TestKafka*: kill -9 ×3 of 300k records, the same with the deduplicating view and a column added, a consumer group of 3→2→3
## instances on 12 partitions and 300k records, 20 s of refused writes, a broker outage), each against
## the built binaries; then a summary of every cell's "fault:" line. Log: bin/chaos.log.
## make test runs the same cells, with the short TestChaos and TestFaultMatrix's compact subset.
CHAOS_TESTS := ^(TestFault.*|TestChaos|TestKafka.*|TestNoRowLostAcrossStreamRotation|TestConcurrencyRejectNoStreamStorm|TestRecoveryCrashLeavesCoverageBehind|TestWritesRefusedForTenSecondsLandAfterTheGrant|TestMetricsCountEachFault)$$
chaos: build
	@mkdir -p bin
	set -o pipefail; CHAOS_LONG=1 go test -count=1 -p 1 -run '$(CHAOS_TESTS)' -timeout 30m -v ./test/e2e/ 2>&1 | tee bin/chaos.log
	@echo; echo "== fault matrix (bin/chaos.log) =="; grep -hoE 'fault: .*' bin/chaos.log | sort -u

## soak: the e2e package (the tests make test runs there) SOAK_N times (default 5) beside two
## CPU-bound busy loops, to find a flake before CI does: each failed run's failing tests with their
## failure lines, then a summary of how often each failed. Logs: bin/soak/. SOAK_RUN=regexp soaks a subset.
## Each run gets SOAK_TIMEOUT (30m); one slower than TEST_TIMEOUT is reported as a make test timeout.
SOAK_N       ?= 5
SOAK_RUN     ?=
SOAK_TIMEOUT ?= 30m
soak:
	SOAK_PARALLEL=$(TEST_PARALLEL) ./scripts/soak.sh $(SOAK_N) $(SOAK_TIMEOUT) '$(SOAK_RUN)' $(TEST_TIMEOUT)

## docs: regenerate docs/components/ from the component specs (internal/docsgen); `make test` fails when they are stale.
docs:
	go run ./cmd/docs-gen

## conformance-deps: the official SDK, apache-arrow and DuckDB (@duckdb/node-api: the e2e check of the deduplicating view's SQL) from npm into conformance/node_modules (npm ci, lock file).
conformance-deps:
	npm ci --prefix conformance --no-audit --no-fund --loglevel=error
	npm ci --prefix test/registryjs --no-audit --no-fund --loglevel=error

## prometheus-deps: promtool and prometheus (Debian's prometheus package, apt-get) when either is missing;
## test/ops/ runs promtool on deploy/prometheus/, test/e2e/prometheus_test.go a real Prometheus.
prometheus-deps:
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then \
	  echo "installing Debian's prometheus package (promtool, prometheus)"; \
	  sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi

## lint-examples: benthos-zerobus lint of every config/examples/*.yaml.
lint-examples: build
	$(BIN) lint config/examples/*.yaml

## vet: go vet of every package.
vet:
	go vet ./...

## staticcheck: staticcheck (honnef.co/go/tools, STATICCHECK_VERSION) of every package; make test runs it.
staticcheck:
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## fmt-check: fail when a tracked Go file is not gofmt'd.
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: every promised figure against a baseline measured in the same run — converter ratios,
## pipeline vs drop, ack latency tolerance, peak RSS, cost by row size and pool size, durability
## latency, replay vs plain Parquet, redpanda → zerobus vs → drop and the input vs a bare franz-go poll
## loop (BenchmarkKafka, 8.5M records), a registry-framed Avro topic through the output's schema_registry
## fast path vs the same records as JSON and through schema_registry_decode (BenchmarkKafkaAvro, 12M
## records), our transport vs the official SDK — then a summary of every
## `TARGET` line (median, range over the runs, target, met or not). Log: bin/bench.log.
bench: build conformance-deps
	@mkdir -p bin
	set -o pipefail; { go test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 60m ./internal/arrowconv/ ./test/e2e/ && \
	  go test -run '^$$' -bench 'Transport' -benchtime 7x -count 1 -timeout 20m ./conformance/; } 2>&1 | tee bin/bench.log
	@echo; echo "== summary (bin/bench.log) =="; grep '^TARGET' bin/bench.log | sed 's/^TARGET //'

## bench-transport: our Zerobus client vs the official SDK against the emulator in ack-only mode.
bench-transport: conformance-deps
	go test -run '^$$' -bench 'Transport|FrameSize' -benchtime 7x -count 1 -timeout 20m ./conformance/

# Every fuzz target, as package:Target; `make fuzz` refuses to run when a
# func Fuzz… of the repository is missing here.
FUZZ_TARGETS := \
	./internal/arrowipc:FuzzRecordBatchRows ./internal/arrowipc:FuzzSchemaMessage ./internal/arrowipc:FuzzReadSchema \
	./internal/arrowconv:FuzzConvert ./internal/arrowconv:FuzzValidUTF8 ./internal/arrowconv:FuzzVariantEncoder ./internal/arrowconv:FuzzVariantJSON \
	./internal/typemap:FuzzParseType ./internal/typemap:FuzzParseColumns ./internal/typemap:FuzzCheckTableName \
	./internal/lintrule:FuzzURLRuleMatchesRun \
	./internal/emulator:FuzzDoPutFrame ./internal/emulator:FuzzJSONRecords ./internal/emulator:FuzzVariantJSON ./internal/emulator:FuzzFlightCodec ./internal/emulator:FuzzParseOffset \
	./internal/emulator/workspace:FuzzParseStatement \
	./internal/arrowconv:FuzzConvertAvro ./internal/registry:FuzzCodecs ./internal/registry:FuzzNewCodec
FUZZTIME    ?= 30s
FUZZMINTIME ?= 100x

## fuzz: run every fuzz target (FUZZ_TARGETS) for FUZZTIME each (default 30s), minimising each new input for
## at most FUZZMINTIME (100 runs) so the time goes to new inputs. A crash is written to the package's
## testdata/fuzz/<Target>/: commit it with the fix, and `go test` replays it from then on.
fuzz:
	@missing=$$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' internal plugin cmd test conformance 2>/dev/null | sed 's/^func //' | sort -u | \
	  while read -r fn; do case " $(FUZZ_TARGETS) " in *":$$fn "*) ;; *) echo "$$fn";; esac; done); \
	  if [ -n "$$missing" ]; then echo "fuzz targets missing from FUZZ_TARGETS in the Makefile: $$missing"; exit 1; fi
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$fn ($$pkg, $(FUZZTIME))"; \
	  go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$pkg; done

## demo: start the emulator, run the quickstart pipeline into it, print what landed.
demo: build
	./scripts/demo.sh $(BIN) $(EMU)

## demo-kafka: the same with Kafka: the emulator serves a broker too (--kafka), records are produced to it,
## config/examples/kafka.yaml (redpanda → zerobus, a consumer group) runs until all have landed, then prints
## the table, its coverage and the group's committed offsets.
demo-kafka: build
	./scripts/demo.sh kafka $(BIN) $(EMU)

## demo-avro: the same with Avro in the Schema Registry wire format: the emulator serves a broker and a Schema
## Registry (--schema-registry), avro-produce registers an Avro schema and produces records encoded with it,
## config/examples/avro.yaml (redpanda → schema_registry_decode → zerobus) runs until all have landed, then prints
## the table with the columns typed from the registry's schema.
demo-avro: build
	./scripts/demo.sh avro $(BIN) $(EMU)

## emulator: run the local Zerobus + workspace emulator in the foreground.
emulator: build
	$(EMU)

## docker: two images from the Dockerfile, the product (config at /benthos.yaml, port 4195) and the emulator (8080, 50051, /data).
docker:
	docker build --build-arg VERSION=$(VERSION) --target benthos-zerobus -t benthos-zerobus:$(VERSION) .
	docker build --build-arg VERSION=$(VERSION) --target emulator -t zerobus-emulator:$(VERSION) .

## clean: remove bin/ (binaries and bench.log).
clean:
	rm -rf bin
