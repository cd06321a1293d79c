#!/usr/bin/env bash
# lane.sh PKG[:RUN]... [--systemd PKG[:RUN]...]: the cgroup v2 lane (make
# test-cgroup2). On the host it builds bin/nodekeeper and bin/images (make
# build) and each package's test binary; then it boots one cgroup-v2-only VM
# (vm.sh) that runs them all (guest.sh), each in its package directory, RUN
# being its -test.run regexp. The specs after --systemd run next, in the same
# VM, as a service of a systemd booted as PID 1 of its own namespaces
# (systemd-guest.sh): the tests of cgroupDriver: systemd.
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
: >"$out/list-systemd"
race=(-race)
[ "${RACE:-1}" != 0 ] || race=()
list=$out/list
for spec in "$@"; do
	if [ "$spec" = --systemd ]; then
		list=$out/list-systemd
		continue
	fi
	pkg=${spec%%:*}
	run=
	[ "$spec" = "$pkg" ] || run=${spec#*:}
	read -r ip dir < <(go list -f '{{.ImportPath}} {{.Dir}}' "$pkg")
	bin=$PWD/$out/$(echo "$ip" | tr '/.' '__').test
	[ -x "$bin" ] || go test "${race[@]}" -c -o "$bin" "$pkg"
	if [ -x "$bin" ]; then
		printf '%s\t%s\t%s\t%s\n' "$bin" "$ip" "$dir" "$run" >>"$list"
	else
		printf 'ok  \t%s\t[no test files]\n' "$ip"
	fi
done
echo "test-cgroup2: built bin/nodekeeper, bin/images and $(cat "$out/list" "$out/list-systemd" | cut -f1 | sort -u | wc -l) test binaries (${race[*]:-no -race}) in $(($(date +%s) - t0)) s" >&2
export NODEKEEPER_E2E_BIN=$PWD/bin/nodekeeper NODEKEEPER_E2E_IMAGES=$PWD/bin/images NODEKEEPER_E2E_SLOW=${NODEKEEPER_E2E_SLOW:-5}
# In the VM: both lists, the second under systemd; it fails when either does.
cat >"$out/run.sh" <<RUN
#!/usr/bin/env bash
rc=0
"$here/guest.sh" "$PWD/$out/list" || rc=1
if [ -s "$PWD/$out/list-systemd" ]; then
	echo "test-cgroup2: under systemd as PID 1 (systemd-guest.sh):"
	"$here/systemd-guest.sh" "$here/guest.sh" "$PWD/$out/list-systemd" || rc=1
fi
exit \$rc
RUN
chmod +x "$out/run.sh"
# A VM that ends without the tests' result (124: timed out, 125: died) is
# booted once more: one of the first full runs here stayed silent after
# boot for its whole 25 minutes, and qemu once crashed at boot. A test that
# fails (exit 1) is never retried.
rc=0
"$here/vm.sh" "$PWD/$out/run.sh" || rc=$?
if [ $rc = 124 ] || [ $rc = 125 ]; then
	echo "test-cgroup2: the VM ended without the tests' result (exit $rc); booting it once more" >&2
	rc=0
	"$here/vm.sh" "$PWD/$out/run.sh" || rc=$?
fi
exit $rc
