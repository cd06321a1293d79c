GO ?= go
PKGS := ./...

.PHONY: all build images test test-cgroup2 vet fmt-check deadcode layers fuzz bench clean conformance killtest

all: build

# build also builds the images nodekeeper imports at start (images). The agent
# is a static binary (CGO_ENABLED=0: Go's own DNS resolver and user lookup);
# linking libc would cost it 3.5 MB of resident memory (docs/benchmarks.md).
build: images
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o bin/nodekeeper ./cmd/nodekeeper

# images builds our pause (sandbox) and testbox images as OCI tarballs in
# bin/images/ (see images/mkimage).
images:
	$(GO) run ./images/mkimage -o bin/images

# test runs everything CI runs: vet, a gofmt check, the dead-code check and the
# race-enabled test suite.
# The timeout leaves room for the first run on a fresh machine, which builds
# containerd 1.7 and the third-party device plugins from hack/ (2-3 min each)
# and kube-apiserver from hack/kube (7-14 min); every package waiting on a
# build counts the wait against its own timeout.
# Integration tests that cannot run here (no root, containerd, runc, unshare
# or etcd)
# skip, unless CI=true, where they fail; each skip is listed at the end, so a
# skipped package is never a silent "ok".
test: vet fmt-check deadcode layers
	@skipped=$$(mktemp); \
	NODEKEEPER_SKIPPED=$$skipped $(GO) test -race -count=1 -timeout 45m $(PKGS); rc=$$?; \
	if [ -s "$$skipped" ]; then \
		echo "make test: integration tests SKIPPED on this machine (run as root with containerd, runc and unshare, or bash .ci/run):"; \
		sort -u "$$skipped" | sed 's/^/  /'; \
	fi; \
	rm -f "$$skipped"; exit $$rc

# test-cgroup2 runs the tests that touch cgroups on a cgroup v2 kernel: this
# machine kind is cgroup v1, so hack/cgroup2vm/lane.sh builds bin/nodekeeper,
# bin/images and the test binaries here and runs them in one throwaway
# cgroup-v2-only VM (qemu, Debian's kernel; docs/cgroup-v2.md). Needs root;
# installs qemu-system-x86, busybox-static, cpio and kmod with apt-get when
# missing. CGROUP2_PKGS is the one list of what runs there: PKG or
# PKG:REGEXP (its -test.run). RACE=0 builds without -race.
# The specs after --systemd run under systemd booted in the VM (the systemd
# cgroup driver's real tests).
CGROUP2_E2E := TestContainerConfig|TestOOMScoreAdjPerQoS|TestMemoryPressureStaticPod|TestAdoptAfterKill|TestOOMKilled|TestPIDPressureEvictsSpawner|TestDiskPressureOwnFilesystem|TestOOMKillCounted
CGROUP2_PKGS ?= ./internal/machine/cgroups ./internal/machine/stats ./internal/machine/pressure \
	'./internal/core/podruntime:^TestIntegrationSwapLimit$$' \
	'./cmd/nodekeeper:^(TestRunHostChecksCgroupV2|TestRunCgroupRootHoldsProcesses)$$' \
	'./test/e2e:^($(CGROUP2_E2E))$$' \
	--systemd './internal/machine/cgroups:^TestRealSystemd$$' './internal/machine/stats:^TestRealPodCgroupSystemd$$'
test-cgroup2:
	CG2_MEM=$${CG2_MEM:-2048} hack/cgroup2vm/lane.sh $(CGROUP2_PKGS)

vet:
	$(GO) vet $(PKGS)

# deadcode fails on functions that no main package of the module reaches
# (golang.org/x/tools/cmd/deadcode at the version hack/deadcode/go.mod pins),
# naming each; hack/deadcode/allow.txt allows the public packages' API and
# the test-only packages, a reason per line. check.sh first checks itself on
# a fixture module that must fail (docs/testing.md, "Dead code"; hack/deadcode/README.md).
deadcode:
	$(GO) build -C hack/deadcode -o $(CURDIR)/bin/deadcode golang.org/x/tools/cmd/deadcode
	hack/deadcode/check.sh bin/deadcode

# layers fails when a folder imports one of a higher layer (cmd, the roots,
# core/servers/cluster, config, machine, the public subsystems, base/qos,
# nodeapi) or folders of one layer import each other, naming the package
# and import (docs/architecture.md, "Folders and layers"). check.sh first
# checks itself on hack/layers/testdata/up.txt, which must fail.
layers:
	hack/layers/check.sh

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# conformance runs the Kubernetes node e2e suite (e2e_node.test of hack/kube's
# release) against the real kubelet, then against nodekeeper, on one containerd,
# and writes docs/conformance.md. Default: the core subset (test/conformance/specs.go),
# without its [Slow] specs;
# FOCUS=regexp runs other specs, AGENTS=nodekeeper one agent, PROCS=n sets ginkgo's
# parallelism, CHUNK=K/N the K-th of N chunks of every [NodeConformance] spec (the full
# set in N runs; the results accumulate), NOT_RUN=1 only the specs without a result yet
# (with CHUNK, a chunk of those). SET=subsystems runs the specs beyond [NodeConformance] of
# nodekeeper's subsystems instead, CHUNK=K/N a chunk of about equal expected duration
# (docs/conformance-harness.md). FOCUS reaches the driver through the environment, so any
# character of a spec's name (a ') survives. Needs root; builds kubelet, e2e_node.test, ginkgo
# and agnhost from hack/kube first (cached; 5-15 min cold).
FOCUS ?=
CHUNK ?=
NOT_RUN ?=
SET ?=
AGENTS ?= kubelet,nodekeeper
PROCS ?= 6
conformance: export NK_CONFORMANCE_FOCUS = $(value FOCUS)
conformance:
	$(GO) run ./test/conformance run -agents $(AGENTS) -procs $(PROCS) $(if $(FOCUS),-focus "$$NK_CONFORMANCE_FOCUS") $(if $(SET),-set $(SET)) $(if $(CHUNK),-chunk $(CHUNK)) $(if $(NOT_RUN),-not-run)
	$(GO) run ./test/conformance report

# killtest kills `nodekeeper run` with SIGKILL at random points N times (default
# 50) while static pods are created and deleted, restarting it each time, then
# checks that no shim, process or task directory leaked, no pod was lost or
# duplicated, no adopted container restarted and the agent's state files parse
# (test/killtest; its output ends with the numbers). Needs root, containerd, runc
# and the CNI plugins; takes minutes, so it is not part of test.
N ?= 50
killtest: build
	$(GO) run ./test/killtest -bin bin/nodekeeper -images bin/images -n $(N)

# bench runs the benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

clean:
	rm -rf bin
