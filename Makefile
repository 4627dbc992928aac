# make test        the whole suite, under the race detector, after making sure
#                  the local services it talks to are up (installing them if needed)
# make quickstart  the main example; needs no external service
# make bench       the benchmarks, each beside its baseline

GO       ?= go
SERVICES ?= redis nats

.PHONY: test services quickstart bench fuzz lint

test: services lint
	$(GO) test -race -count=1 -timeout 30m ./...

# The store and adapter suites need these services; more are listed
# as their suites arrive. A service that cannot start is reported, and
# its tests skip (or fail under DEDUP_TEST_REQUIRE=1).
services:
	@[ -z "$(SERVICES)" ] || ./scripts/services.sh $(SERVICES) || true

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

quickstart:
	$(GO) run ./examples/quickstart

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

FUZZTIME ?= 30s
fuzz:
	for f in FuzzComposite FuzzCanonicalJSON FuzzCanonicalize FuzzStrategies; do \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./idstrategy || exit 1; \
	done
