#!/usr/bin/env bash
# guest.sh LIST: runs the test binaries LIST names, one after another, each in
# its package directory as go test does, streaming their output and printing
# go test's "ok"/"FAIL" line for each; exits 1 if any failed. lane.sh runs it
# inside the cgroup v2 VM; it needs nothing of the VM.
#
# LIST has one line per package, tab-separated: BINARY IMPORTPATH DIR [RUN],
# RUN being the -test.run regexp ("" runs every test). Env: TESTFLAGS (more
# flags for every binary), TEST_TIMEOUT (per package, default 20m). Skips
# that integration.Require records are listed at the end, as make test does.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: guest.sh LIST" >&2; exit 2; }
list=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
skipped=$(mktemp)
export NODEKEEPER_SKIPPED=$skipped
failed=()
n=0
while IFS=$'\t' read -r bin ip dir run; do
	[ -n "$bin" ] || continue
	n=$((n + 1))
	args=(-test.count=1 -test.timeout="${TEST_TIMEOUT:-20m}")
	[ -z "$run" ] || args+=(-test.run="$run")
	echo "test-cgroup2: $ip${run:+ -run $run}: started at $(date -u +%T)"
	s=$(date +%s%N)
	# shellcheck disable=SC2086 # TESTFLAGS is a list of flags
	(cd "$dir" && exec "$bin" "${args[@]}" ${TESTFLAGS:-}) 2>&1
	r=$?
	secs=$(awk -v a="$s" -v b="$(date +%s%N)" 'BEGIN{printf "%.3f", (b-a)/1e9}')
	if [ $r -eq 0 ]; then
		printf 'ok  \t%s\t%ss\n' "$ip" "$secs"
	else
		printf 'FAIL\t%s\t%ss\n' "$ip" "$secs"
		failed+=("$ip")
	fi
done <"$list"
if [ -s "$skipped" ]; then
	echo "test-cgroup2: integration tests SKIPPED in the VM:"
	sort -u "$skipped" | sed 's/^/  /'
fi
rm -f "$skipped"
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-cgroup2: FAIL: ${failed[*]}"
	exit 1
fi
[ $n -gt 0 ] || { echo "test-cgroup2: $1 names no test binary"; exit 1; }
echo "test-cgroup2: ok, $n packages"
