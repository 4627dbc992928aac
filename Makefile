# make test        the whole suite of every module, under the race detector,
#                  after making sure the local services it talks to are up
#                  (installing them if needed)
# make quickstart  the main example; needs no external service
# make bench       the benchmarks of every module, each beside its baseline
# make release-check  a release of HEAD as its users meet it (part of make test)
# make docs-check  links and complete Go programs of README.md and docs/, and
#                  docs/performance.md's generated table against bench/results
#                  and the aims (part of make test)
# make perf-table  rewrites docs/performance.md's generated table from
#                  bench/results/*.json (RUNS="a.json b.json" for others)
# make api-check   every library module's API against its base: its latest
#                  tag, or tools/apicheck/base (part of make test)

GO       ?= go
SERVICES ?= redis nats rabbitmq postgres prometheus mariadb
# Every module of the repository: the root (the core) and one per
# integration, each with its own go.mod.
MODULES  := $(patsubst %/go.mod,%,$(shell find . -name go.mod -not -path './.git/*' | sort))

.PHONY: test services quickstart bench fuzz lint deps-check release-check docs-check perf-table api-check

# Every step runs whatever failed before it; the summary at the end gives
# each module's result, and the exit status is non-zero if any failed.
test: services
	@GO=$(GO) ./scripts/test.sh $(MODULES)

# The store and adapter suites need these services. A service that cannot
# start is reported, and its tests skip (or fail under DEDUP_TEST_REQUIRE=1).
services:
	@[ -z "$(SERVICES)" ] || ./scripts/services.sh $(SERVICES) || true

# gofmt, then go vet and staticcheck (pinned in tools/go.mod) in every module.
lint:
	@GO=$(GO) ./scripts/lint.sh $(MODULES)

# A user of each library module gets in its module graph only the clients
# (brokers, databases, Redis, gRPC, grpc-gateway, the OpenTelemetry SDK)
# that module needs; prints each graph's client list.
deps-check:
	@./scripts/deps-check.sh

# A release of HEAD works for its users: tags it in a throwaway clone and
# builds a user of each integration from a file:// module proxy of the tags
# (nothing is tagged here).
release-check:
	@./scripts/release-check.sh

# Relative links and anchors of README.md and docs/ resolve, and every
# ```go run block compiles against the repository's modules; the table
# between the perf-table markers of docs/performance.md is what
# bench/results/*.json and bench/internal/perf/aims.go give.
docs-check:
	@$(GO) -C tools run ./docscheck ..
	@GO=$(GO) ./scripts/perf-table.sh --check

# The comparison table of docs/performance.md, merged from the run files
# (BenchmarkTable with BENCH_OUT=bench/results/NAME.json).
perf-table:
	@GO=$(GO) ./scripts/perf-table.sh $(RUNS)

# No library module breaks the API of its base (its latest release tag, or
# the commit in tools/apicheck/base while it has none).
api-check:
	@$(GO) -C tools run ./apicheck ..

quickstart:
	$(GO) -C examples run ./quickstart

bench:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...); done

FUZZTIME ?= 30s
fuzz:
	for f in FuzzComposite FuzzCanonicalJSON FuzzCanonicalize FuzzStrategies; do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./idstrategy || exit 1; \
	done
