GO ?= go
PKGS := ./...

.PHONY: all build test vet fmt-check fuzz bench clean

all: build

build:
	$(GO) build -o bin/nodekeeper ./cmd/nodekeeper

# test runs everything CI runs: vet, a gofmt check and the race-enabled test suite.
test: vet fmt-check
	$(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# bench runs the benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

clean:
	rm -rf bin
