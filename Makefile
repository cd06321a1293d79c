GO ?= go
PKGS := ./...

.PHONY: all build test vet fmt-check fuzz bench clean

all: build

build:
	$(GO) build -o bin/nodekeeper ./cmd/nodekeeper

# test runs everything CI runs: vet, a gofmt check and the race-enabled test suite.
# The timeout leaves room for the first run on a fresh machine, which builds
# containerd 1.7 and the third-party device plugins from hack/ (2-3 min each).
test: vet fmt-check
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

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
