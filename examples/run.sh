#!/usr/bin/env bash
# Runs nodekeeper on the example pods, for real: installs what a fresh Debian
# machine lacks (containerd, runc, the CNI plugins, iptables), builds
# nodekeeper and its images, then starts `nodekeeper run`, which starts its
# own containerd, imports the images and runs examples/pods/*.yaml as static
# pods, each in its own network namespace. It prints the pods' table whenever
# it changes; the agent's log goes to ROOT/nodekeeper.log.
#
#   ./examples/run.sh [-v] [--config FILE] [run|stop|uninstall] [-- RUN-FLAGS...]
#
#   run        (the default) check the tools and the ports, build, start the
#              agent; Ctrl-C stops the agent and its containerd; the pods
#              keep running, as a kubelet's do, and the next run adopts them
#   stop       remove every pod the example run or `nodekeeper apply` made,
#              stop nodekeeper's containerd
#   uninstall  stop, then remove the CNI bridge, the kubepods cgroups, the
#              state directory and its pods' iptables rules (not the apt
#              packages)
#   -v         show the agent's log too, interleaved with the table
#   --config FILE   the KubeletConfiguration (default examples/nodekeeper.yaml);
#              give stop and uninstall the same one as run
#
# Run it as root (sudo works too). docs/quickstart.md is the reference:
# ports, the log, what uninstall removes, how long each step takes.
#
# For tests only (the example itself keeps /var/lib/nodekeeper):
#   NODEKEEPER_EXAMPLE_ROOT=DIR   the state directory (absolute), instead of
#                                 /var/lib/nodekeeper; the bridge is named
#                                 after it, as `nodekeeper run` names it
#   -- RUN-FLAGS...               further `nodekeeper run` flags, for run and
#                                 for the agent stop starts
# Sourced (`source examples/run.sh`), it only defines its functions.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$repo/bin/nodekeeper
default_root=/var/lib/nodekeeper
# What run installs with apt-get when missing; uninstall leaves them.
packages=(containerd runc containernetworking-plugins iptables)
# dpkg's and apt's locks: held while another apt-get, dpkg or
# unattended-upgrades runs.
dpkg_locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
lock_wait=300 # seconds run waits for them
lock_every=15 # seconds between two messages while it waits
stop_wait=120 # seconds stop waits for the pods to go

say() { printf 'run.sh: %s\n' "$*" >&2; }

usage() {
	cat >&2 <<'EOF'
usage: ./examples/run.sh [-v] [--config FILE] [run|stop|uninstall]
  run        install what is missing, build, run the example pods (default)
  stop       remove every pod the example or `nodekeeper apply` made, stop its containerd
  uninstall  stop, then remove the bridge, the kubepods cgroups, the state directory
  -v         show the agent's log beside the table (it always goes to ROOT/nodekeeper.log)
  --config FILE  a KubeletConfiguration instead of examples/nodekeeper.yaml
See docs/quickstart.md.
EOF
}

# proc_name PID prints PID's command line, shortened.
proc_name() {
	local c
	c=$(tr '\0\n' '  ' <"/proc/$1/cmdline" 2>/dev/null) || c=
	c=${c% }
	printf '%s' "${c:0:60}"
}

# lock_holder FILE prints the pid of a process holding a lock (fcntl, flock
# or OFD, as dpkg and apt take) on FILE, from /proc/locks; nothing when none.
lock_holder() {
	local f=$1 dev ino key
	[ -e "$f" ] || return 0
	dev=$(stat -L -c %d "$f") && ino=$(stat -L -c %i "$f") || return 0
	key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$ino")
	awk -v k="$key" '{ for (i = 2; i <= NF; i++) if ($i == k) { print $(i - 1); exit } }' /proc/locks
}

# wait_for_locks TIMEOUT EVERY FILE... returns 0 once no process holds a lock
# on any FILE, saying every EVERY seconds who holds which; after TIMEOUT
# seconds it says so and returns 1.
wait_for_locks() {
	# Microseconds from EPOCHREALTIME: SECONDS counts whole seconds of the
	# clock, so it can step by 2 a little more than a second after a start.
	local timeout=$1 every=$2 start=${EPOCHREALTIME//[!0-9]/} said=-1 f pid waited us
	shift 2
	while :; do
		pid=
		for f in "$@"; do
			pid=$(lock_holder "$f")
			[ -z "$pid" ] || break
		done
		[ -n "$pid" ] || return 0
		us=$((${EPOCHREALTIME//[!0-9]/} - start))
		waited=$((us / 1000000))
		if [ "$us" -ge $((timeout * 1000000)) ]; then
			say "$f is still locked by pid $pid ($(proc_name "$pid")) after ${timeout}s: let that apt-get or dpkg finish, then run this again"
			return 1
		fi
		if [ $((waited / every)) -ne "$said" ]; then
			said=$((waited / every))
			say "waiting for the dpkg lock: $f is held by pid $pid ($(proc_name "$pid")); ${waited}s of at most ${timeout}s"
		fi
		sleep 1
	done
}

# apt_get ARGS... runs apt-get once dpkg's locks are free (waiting up to
# lock_wait seconds), apt-get itself waiting as long for a lock taken meanwhile.
apt_get() {
	wait_for_locks "$lock_wait" "$lock_every" "${dpkg_locks[@]}" || exit 1
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$lock_wait" "$@"
}

# install_missing installs, with apt-get, the packages whose commands are missing.
install_missing() {
	local need=() p
	command -v containerd >/dev/null 2>&1 || need+=(containerd)
	command -v runc >/dev/null 2>&1 || need+=(runc)
	for p in bridge host-local loopback portmap; do
		[ -x "/usr/lib/cni/$p" ] || { need+=(containernetworking-plugins) && break; }
	done
	command -v iptables >/dev/null 2>&1 || need+=(iptables) # the bridge's ipMasq
	[ "${#need[@]}" -gt 0 ] || return 0
	if ! command -v apt-get >/dev/null 2>&1; then
		say "missing: ${need[*]}; install them (this script uses apt-get, on Debian or Ubuntu), then run it again"
		exit 1
	fi
	say "installing ${need[*]} with apt-get"
	apt_get update -qq
	apt_get install -y -qq --no-install-recommends "${need[@]}"
}

# check_tools exits 1 naming what run needs and lacks.
check_tools() {
	local t
	for t in containerd ctr runc iptables make flock; do
		command -v "$t" >/dev/null 2>&1 || { say "$t not found in PATH; it is needed to run the example"; exit 1; }
	done
	[ -x /usr/lib/cni/bridge ] || { say "the CNI bridge plugin /usr/lib/cni/bridge is missing (Debian package containernetworking-plugins)"; exit 1; }
	if ! command -v go >/dev/null 2>&1; then
		say "go not found (PATH and /usr/local/go/bin): install Go 1.26.8 or later from https://go.dev/dl (a Go of 1.21 or later downloads 1.26.8 itself), then run this again"
		exit 1
	fi
}

# conf_get KEY DEFAULT prints the top-level field KEY of the configuration
# file (YAML or JSON, one field a line, as examples/nodekeeper.yaml), or
# DEFAULT when it is not set.
conf_get() {
	local v
	v=$(sed -nE 's/^[[:space:]]*"?'"$1"'"?[[:space:]]*:[[:space:]]*"?([^",#[:space:]]*).*/\1/p' "$config" | head -n 1)
	printf '%s' "${v:-$2}"
}

# port_taken ADDR PORT succeeds when a process accepts connections there.
port_taken() {
	local a=$1
	case $a in 0.0.0.0 | "") a=127.0.0.1 ;; :: | "[::]") a=::1 ;; esac
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$a" "$2" 2>/dev/null
}

# port_holder PORT prints who listens on PORT, when ss can tell.
port_holder() {
	command -v ss >/dev/null 2>&1 || return 0
	ss -Hltnp "sport = :$1" 2>/dev/null | sed -nE '1s/.*users:\(\("([^"]*)",pid=([0-9]+).*/\1 (pid \2)/p'
}

# check_port FIELD PORT ADDR exits 1 when PORT (set by FIELD) is taken.
check_port() {
	local field=$1 port=$2 addr=$3 who
	[ "$port" != 0 ] || return 0
	port_taken "$addr" "$port" || return 0
	who=$(port_holder "$port") || who=
	say "port $port ($field, on $addr) is taken${who:+ by $who}: set $field in a copy of examples/nodekeeper.yaml and pass --config FILE (0 turns it off)"
	exit 1
}

# check_ports checks every TCP port a standalone `nodekeeper run` listens on
# with the configuration: healthzPort (its listener retries while the port
# is taken, as the kubelet's: nothing but this check would say so) and
# readOnlyPort when set (the agent checks it too, before it starts
# containerd). Port 10250, the kubelet API, is served only with --kubeconfig.
check_ports() {
	check_port healthzPort "$(conf_get healthzPort 10248)" "$(conf_get healthzBindAddress 127.0.0.1)"
	check_port readOnlyPort "$(conf_get readOnlyPort 0)" "$(conf_get address 127.0.0.1)"
}

# agent_pid prints the pid of the nodekeeper that holds root's lock, if one runs.
agent_pid() {
	local lock=$root/nodekeeper.lock
	[ -e "$lock" ] || return 0
	flock -n "$lock" true && return 0
	head -n 1 "$lock" 2>/dev/null || echo '?'
}

# log_start appends a start marker for what to the log and prints the log's
# size before it.
log_start() {
	mkdir -p "$root"
	chmod 0750 "$root"
	touch "$log"
	stat -c %s "$log"
	printf '\n===== %s run.sh %s: %s =====\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mode" "$*" >>"$log"
}

# log_tail FROM prints the last 20 lines the log got after byte FROM.
log_tail() { tail -c +"$(($1 + 1))" "$log" | tail -n 20 >&2; }

build() {
	say "building nodekeeper and its images (about 3 min the first time, seconds after)"
	make -s -C "$repo" build
}

do_run() {
	install_missing
	check_tools
	check_ports
	local pid
	pid=$(agent_pid)
	if [ -n "$pid" ]; then
		say "a nodekeeper already runs on $root (pid $pid): stop it first (Ctrl-C where it runs)"
		exit 1
	fi
	build
	local args=(run --root-dir "$root" --image-dir "$repo/bin/images" --hostname-override example
		--config "$config" --pod-manifest-path "$repo/examples/pods" "${extra[@]}")
	local from rc=0
	from=$(log_start "${args[*]}")
	say "starting nodekeeper; its log: $log"
	say "the pods run within seconds (containerd starts, the images are imported); Ctrl-C stops nodekeeper, the pods keep running"
	if [ "$verbose" = 1 ]; then
		# The log through tee, which ignores Ctrl-C (the agent logs while it
		# stops), and is waited for (its last lines before ours).
		local fifo tee
		fifo=$(mktemp -u)
		mkfifo -m 0600 "$fifo"
		(trap '' INT TERM && exec tee -a "$log" <"$fifo" >&2) &
		tee=$!
		"$bin" "${args[@]}" 2>"$fifo" || rc=$?
		wait "$tee" || true
		rm -f "$fifo"
	else
		"$bin" "${args[@]}" 2>>"$log" || rc=$?
	fi
	case $rc in
	0 | 130)
		say "nodekeeper stopped; the pods keep running and the next run adopts them (./examples/run.sh stop removes them)"
		;;
	*)
		say "nodekeeper exited with status $rc; the last lines of its log, $log:"
		log_tail "$from"
		;;
	esac
	exit "$rc"
}

# containerd_leftovers prints, one a line, the sandboxes, containers and shims
# of root's containerd; it fails when containerd does not answer.
containerd_leftovers() {
	local out
	out=$(ctr --address "$root/containerd/containerd.sock" -n k8s.io containers ls 2>/dev/null) || return 1
	awk 'NR > 1 { print ($2 ~ /nodekeeper\/pause/ ? "sandbox " : "container ") $1 }' <<<"$out"
	local d
	for d in "$root"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*; do
		[ -e "$d" ] && echo "shim of ${d##*/}"
	done
	return 0
}

# agent_pods prints "NAMESPACE NAME" of each pod the agent lists; it fails
# when the agent does not answer.
agent_pods() {
	local out
	out=$("$bin" get pods --root-dir "$root" 2>/dev/null) || return 1
	awk 'NR == 1 && $1 != "NAMESPACE" { exit } NR > 1 { print $1, $2 }' <<<"$out"
}

stop_agent=
stop_cleanup() {
	if [ -n "$stop_agent" ] && kill -0 "$stop_agent" 2>/dev/null; then
		kill -TERM "$stop_agent" 2>/dev/null || true
		wait "$stop_agent" 2>/dev/null || true
	fi
	[ -z "${stop_empty:-}" ] || rm -rf "$stop_empty"
}

# do_stop removes every pod on root: it starts an agent with no manifests,
# which stops the example's static pods as orphans and re-creates the pods
# `nodekeeper apply` made (it keeps them in ROOT/local-pods.json); those it
# deletes through the agent, as `nodekeeper delete pod` does. Once containerd
# holds no sandbox, container or shim, it stops the agent and its containerd.
do_stop() {
	if [ ! -d "$root" ]; then
		say "nothing to stop: $root does not exist"
		return 0
	fi
	local pid
	pid=$(agent_pid)
	if [ -n "$pid" ]; then
		say "nodekeeper is running on $root (pid $pid): stop it first (Ctrl-C where it runs), then run stop again"
		exit 1
	fi
	[ -x "$bin" ] || build
	stop_empty=$(mktemp -d)
	trap stop_cleanup EXIT
	# No manifests, and no TCP port: a port another process took since
	# must not keep stop from removing the pods.
	mkdir "$stop_empty/pods" "$stop_empty/conf.d"
	printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\nreadOnlyPort: 0\n' >"$stop_empty/conf.d/50-stop.conf"
	local args=(run --root-dir "$root" --hostname-override example --config "$config" --config-dir "$stop_empty/conf.d"
		--pod-manifest-path "$stop_empty/pods" --status-interval 0 "${extra[@]}")
	local from
	from=$(log_start "${args[*]}")
	say "stopping the pods (usually under a minute; at most $((stop_wait / 60)) min)"
	local deadline=$((SECONDS + stop_wait)) pods left applied=0 ns name kind id d
	local -A asked=() sandboxes=()
	# The pods: their sandboxes, as containerd's CRI plugin keeps them.
	for d in "$root"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*; do
		if [ -d "$d" ]; then sandboxes[${d##*/}]=1; fi
	done
	"$bin" "${args[@]}" 2>>"$log" &
	stop_agent=$!
	while :; do
		if ! kill -0 "$stop_agent" 2>/dev/null; then
			say "the agent that removes the pods stopped before they were gone; the last lines of its log, $log:"
			log_tail "$from"
			exit 1
		fi
		if pods=$(agent_pods) && left=$(containerd_leftovers); then
			while read -r kind id; do
				if [ "$kind" = sandbox ]; then sandboxes[$id]=1; fi
			done <<<"$left"
			while read -r ns name; do
				[ -n "$name" ] && [ -z "${asked[$ns/$name]:-}" ] || continue
				asked[$ns/$name]=1
				applied=$((applied + 1))
				"$bin" delete pod "$name" -n "$ns" --root-dir "$root" >/dev/null 2>>"$log" &
			done <<<"$pods"
			if [ -z "$pods" ] && [ -z "$left" ]; then
				break
			fi
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "after $((stop_wait / 60)) min these are still there (the agent's log: $log):"
			[ -z "${pods:-}" ] || sed 's/^\([^ ]*\) \(.*\)/  pod \1\/\2 (being deleted)/' <<<"$pods" >&2
			[ -z "${left:-}" ] || sed 's/^/  /' <<<"$left" >&2
			say "run ./examples/run.sh stop again; if they stay, the log says why"
			exit 1
		fi
		sleep 1
	done
	kill -TERM "$stop_agent"
	wait "$stop_agent" || true
	stop_agent=
	wait # the deletes, which end with the agent
	stop_cleanup
	trap - EXIT
	# The agent stopped its containerd; this stops one an agent killed
	# earlier left.
	if ! "$bin" stop-runtime --root-dir "$root" >/dev/null 2>>"$log"; then
		say "nodekeeper stop-runtime failed; the last lines of the log, $log:"
		log_tail "$from"
		exit 1
	fi
	if [ "${#sandboxes[@]}" -eq 0 ] && [ "$applied" -eq 0 ]; then
		say "stopped: no pod was left; nodekeeper's containerd is stopped"
	else
		say "stopped: removed ${#sandboxes[@]} pods ($applied of them made by nodekeeper apply); nodekeeper's containerd is stopped"
	fi
}

# bridge_name is `nodekeeper run`'s bridge for root (daemon.BridgeName).
bridge_name() {
	if [ "$root" = "$default_root" ]; then
		echo nk0
	else
		printf 'nk%s\n' "$(printf '%s' "$root" | sha256sum | cut -c 1-8)"
	fi
}

# runtime_cgroup is the managed containerd's cgroup under cgroupRoot
# (daemon.RuntimeCgroup).
runtime_cgroup() {
	local b
	b=$(bridge_name)
	if [ "$root" = "$default_root" ]; then echo nodekeeper-containerd; else echo "nodekeeper-containerd-${b#nk}"; fi
}

# remove_pod_rules removes the iptables rules of pods whose CNI DEL did not
# run (their address is still allocated in host-local's directory under
# root): the rules that name the sandbox's ID, and the chains they jump to
# (not the CNI-HOSTPORT-* chains, which every CNI user shares). It prints
# how many it removed.
remove_pod_rules() {
	local ids=() f id table line chain target n=0
	for f in "$root"/containerd/cni/networks/*/*; do
		case ${f##*/} in lock | last_reserved_ip.*) continue ;; esac
		if [ -f "$f" ]; then
			id=$(head -n 1 "$f")
			if [ -n "$id" ]; then ids+=("$id"); fi
		fi
	done
	if [ "${#ids[@]}" -eq 0 ] || ! command -v iptables-save >/dev/null 2>&1; then
		echo 0
		return 0
	fi
	for table in nat filter; do
		local dels=() chains=()
		while IFS= read -r line; do
			for id in "${ids[@]}"; do
				[[ $line == *"$id"* ]] || continue
				chain=${line#-A }
				chain=${chain%% *}
				target=$(sed -nE 's/.* -j (CNI-[^ ]+).*/\1/p' <<<"$line")
				if [[ $chain == CNI-* && $chain != CNI-HOSTPORT-* ]]; then
					chains+=("$chain")
				else
					dels+=("-D ${line#-A }")
				fi
				[[ -z $target || $target == CNI-HOSTPORT-* ]] || chains+=("$target")
				n=$((n + 1))
			done
		done < <(iptables-save -t "$table" | grep '^-A ')
		[ "${#dels[@]}" -gt 0 ] || [ "${#chains[@]}" -gt 0 ] || continue
		{
			echo "*$table"
			[ "${#dels[@]}" -eq 0 ] || printf '%s\n' "${dels[@]}"
			[ "${#chains[@]}" -eq 0 ] || printf '%s\n' "${chains[@]}" | sort -u | sed 's/^/-F /'
			[ "${#chains[@]}" -eq 0 ] || printf '%s\n' "${chains[@]}" | sort -u | sed 's/^/-X /'
			echo COMMIT
		} | iptables-restore --noflush
	done
	echo "$n"
}

# remove_cgroups removes the kubepods trees and the managed containerd's
# cgroup under cgroupRoot in every hierarchy, each only when no process is
# in it, then cgroupRoot itself when it is not / and nothing else is in it.
remove_cgroups() {
	local croot h top rel procs
	croot=$(conf_get cgroupRoot /)
	croot=/${croot#/}
	croot=${croot%/}
	local -A removed=() busy=()
	for h in /sys/fs/cgroup /sys/fs/cgroup/*; do
		[ -e "$h/cgroup.procs" ] || continue # a hierarchy's root
		for rel in "$croot/kubepods" "$croot/kubepods.slice" "$croot/$(runtime_cgroup)"; do
			top=$h$rel
			[ -d "$top" ] || continue
			procs=$(find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null | head -n 5 | tr '\n' ' ') || true
			if [ -n "$procs" ]; then
				busy[$rel]="pids ${procs% }"
				continue
			fi
			find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[ -d "$top" ] && busy[$rel]="could not remove it" || removed[$rel]=1
		done
		if [ -n "$croot" ] && [ -d "$h$croot" ] && rmdir "$h$croot" 2>/dev/null; then
			removed[$croot]=1
		fi
	done
	if [ "${#removed[@]}" -gt 0 ]; then
		say "removed the cgroups ${!removed[*]} (in every hierarchy that had them)"
	else
		say "no cgroup of nodekeeper's to remove"
	fi
	for rel in "${!busy[@]}"; do
		say "left the cgroup $rel: processes still run in it (${busy[$rel]})"
	done
}

do_uninstall() {
	local n br mounts
	do_stop
	if [ -d "$root" ]; then
		n=$(remove_pod_rules)
		if [ "$n" -gt 0 ]; then
			say "removed $n iptables rules of pods whose network was not torn down"
		else
			say "no iptables rule of its pods is left (the CNI plugins removed them when the pods stopped)"
		fi
	fi
	br=$(bridge_name)
	if [ ! -e "/sys/class/net/$br" ]; then
		:
	elif ! command -v ip >/dev/null 2>&1; then
		say "left the bridge $br: ip (Debian package iproute2) not found; ip link delete $br removes it"
	else
		ip link delete "$br"
		say "removed the bridge $br"
	fi
	remove_cgroups
	if [ -d "$root" ]; then
		# Mounts an interrupted run left under root (ours): unmounted first,
		# and rm never crosses into another filesystem.
		mounts=$(awk -v r="$root/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
		[ -z "$mounts" ] || xargs -r -d '\n' umount -l <<<"$mounts"
		rm -rf --one-file-system "$root"
		say "removed $root"
	fi
	say "uninstalled; the apt packages stay (apt-get remove ${packages[*]} removes them), and so does $repo/bin"
}

main() {
	verbose=0
	config=$repo/examples/nodekeeper.yaml
	mode=
	extra=()
	while [ "$#" -gt 0 ]; do
		case $1 in
		-v) verbose=1 ;;
		--config)
			[ "$#" -ge 2 ] || { say "--config needs a FILE" && usage && exit 2; }
			config=$2
			shift
			;;
		--config=*) config=${1#--config=} ;;
		-h | --help) usage && exit 0 ;;
		run | stop | uninstall)
			[ -z "$mode" ] || { say "one of run, stop or uninstall, not $mode and $1" && usage && exit 2; }
			mode=$1
			;;
		--)
			shift
			extra=("$@")
			break
			;;
		*) say "unknown argument $1" && usage && exit 2 ;;
		esac
		shift
	done
	mode=${mode:-run}
	if [ ! -f "$config" ] || [ ! -r "$config" ]; then
		say "--config $config: no such readable file"
		exit 2
	fi
	if [ "$(id -u)" -ne 0 ]; then
		say "nodekeeper runs containers and manages cgroups: run this as root (as root, or with sudo)"
		exit 2
	fi
	config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
	root=${NODEKEEPER_EXAMPLE_ROOT:-$default_root}
	case $root in
	/*) ;;
	*) say "NODEKEEPER_EXAMPLE_ROOT=$root: want an absolute path" && exit 2 ;;
	esac
	root=${root%/}
	log=$root/nodekeeper.log
	case $mode in
	run) do_run ;;
	stop) do_stop ;;
	uninstall) do_uninstall ;;
	esac
}

# Sourced, return succeeds: define the functions only.
if ! (return 0 2>/dev/null); then
	main "$@"
fi
