#!/usr/bin/env bash
# Runs nodekeeper on the example pods, for real: installs what a fresh Debian
# machine lacks (containerd, runc, the CNI plugins), builds nodekeeper and its
# images, then starts `nodekeeper run`, which starts its own containerd,
# imports the images and runs examples/pods/*.yaml as static pods, each in its
# own network namespace. It prints the pods' table whenever it changes.
#
#   sudo ./examples/run.sh        run (Ctrl-C stops the agent and its
#                                 containerd; the pods keep running, as a
#                                 kubelet's do, and the next run adopts them)
#   sudo ./examples/run.sh stop   stop and remove the example pods, stop
#                                 nodekeeper's containerd, then exit
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

if [ "$(id -u)" -ne 0 ]; then
	echo "run.sh: nodekeeper runs containers and manages cgroups: run it as root (sudo)" >&2
	exit 2
fi
need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if [ "${#need[@]}" -gt 0 ]; then
	echo "run.sh: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

make -s build # bin/nodekeeper and bin/images/{pause,testbox}.tar
root=/var/lib/nodekeeper
args=(run --root-dir "$root" --image-dir bin/images --hostname-override example --config examples/nodekeeper.yaml)

if [ "${1:-}" = "stop" ]; then
	# An agent with no manifests stops every pod it finds, then we stop it.
	empty=$(mktemp -d)
	log=$(mktemp)
	bin/nodekeeper "${args[@]}" --pod-manifest-path "$empty" --status-interval 0 2>"$log" &
	agent=$!
	trap 'kill $agent 2>/dev/null || true; rmdir "$empty"; rm -f "$log"' EXIT
	# The agent lists no pods (it has no manifests); it stops and removes the
	# runtime's pods as orphans: wait until containerd holds no container.
	for _ in $(seq 1 120); do
		sleep 1
		if ! kill -0 "$agent" 2>/dev/null; then
			# e.g. another nodekeeper still runs on this root directory
			echo "run.sh: the agent stopped before the pods were removed:" >&2
			tail -n 5 "$log" >&2
			exit 1
		fi
		bin/nodekeeper get pods --root-dir "$root" >/dev/null 2>&1 || continue
		left=$(ctr --address "$root/containerd/containerd.sock" -n k8s.io containers ls -q 2>/dev/null) || continue
		# ... and no shim is left (a task's state goes when its shim exits).
		left+=$(ls "$root/containerd/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null)
		if [ -z "$left" ]; then
			# The agent stops its containerd when it stops; stop-runtime
			# stops one that an agent killed earlier left (none is left now).
			kill "$agent"
			wait "$agent" || true
			bin/nodekeeper stop-runtime --root-dir "$root"
			echo "run.sh: example pods stopped and removed"
			exit 0
		fi
	done
	echo "run.sh: containers still there after 2 minutes:" >&2
	echo "$left" >&2
	exit 1
fi
exec bin/nodekeeper "${args[@]}" --pod-manifest-path examples/pods
