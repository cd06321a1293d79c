#!/usr/bin/env bash
# lane.sh PKG[:RUN]...: the cgroup v2 lane (make test-cgroup2). On the host it
# builds bin/nodekeeper and bin/images (make build) and each package's test
# binary; then it boots one cgroup-v2-only VM (vm.sh) that runs them all
# (guest.sh), each in its package directory, RUN being its -test.run regexp.
# Prints go test's lines as they come; exits non-zero when a package failed
# or the VM died or timed out.
#
# Env: RACE=0 builds without -race; TESTFLAGS, TEST_TIMEOUT (guest.sh);
# CG2_* (vm.sh). The environment, CI=true included, reaches the tests. The
# e2e tests take the agent and images from NODEKEEPER_E2E_BIN and
# NODEKEEPER_E2E_IMAGES, set here to what make build made, and stretch their
# waits for processes by NODEKEEPER_E2E_SLOW (default 5 here: the VM emulates
# the CPU).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
t0=$(date +%s)
"${MAKE:-make}" --no-print-directory build
out=bin/cgroup2
rm -rf "$out"
mkdir -p "$out"
: >"$out/list"
race=(-race)
[ "${RACE:-1}" != 0 ] || race=()
for spec in "$@"; do
	pkg=${spec%%:*}
	run=
	[ "$spec" = "$pkg" ] || run=${spec#*:}
	read -r ip dir < <(go list -f '{{.ImportPath}} {{.Dir}}' "$pkg")
	bin=$PWD/$out/$(echo "$ip" | tr '/.' '__').test
	go test "${race[@]}" -c -o "$bin" "$pkg"
	if [ -x "$bin" ]; then
		printf '%s\t%s\t%s\t%s\n' "$bin" "$ip" "$dir" "$run" >>"$out/list"
	else
		printf 'ok  \t%s\t[no test files]\n' "$ip"
	fi
done
echo "test-cgroup2: built bin/nodekeeper, bin/images and $(wc -l <"$out/list") test binaries (${race[*]:-no -race}) in $(($(date +%s) - t0)) s" >&2
export NODEKEEPER_E2E_BIN=$PWD/bin/nodekeeper NODEKEEPER_E2E_IMAGES=$PWD/bin/images NODEKEEPER_E2E_SLOW=${NODEKEEPER_E2E_SLOW:-5}
"$here/vm.sh" "$here/guest.sh" "$out/list"
