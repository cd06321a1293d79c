#!/usr/bin/env bash
# systemd-guest.sh: run one command as a service of a systemd that runs as
# PID 1, for tests of cgroupDriver: systemd. Run it as root inside the cgroup
# v2 VM (the lane runs it after guest.sh for the tests listed after --systemd):
#
#   vm.sh hack/cgroup2vm/systemd-guest.sh COMMAND [ARG...]
#
# The VM's PID 1 is bash (the lane's stage 2), so systemd boots the way a
# container runtime boots it: as PID 1 of new pid, mount and cgroup
# namespaces, in a cgroup of its own (/sys/fs/cgroup/systemd-guest, with
# cgroup2 mounted again so that it is systemd's root), with a fresh /run and
# container=systemd-guest. Its default unit is a service that runs COMMAND in
# the current directory with the caller's environment and stdin at
# /dev/null; nothing else starts (no udev, no journald, no dbus-daemon:
# clients reach systemd on its private socket, /run/systemd/private).
# COMMAND's stdout and stderr come out on this script's stdout, and the
# script exits with COMMAND's exit status (125 when systemd ended without
# one). systemd-guest.sh changes nothing outside the VM it runs in.
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
[ "$(id -u)" = 0 ] || { echo "systemd-guest.sh: run as root (in the VM)" >&2; exit 2; }
[ -x /lib/systemd/systemd ] || { echo "systemd-guest.sh: no /lib/systemd/systemd" >&2; exit 125; }

io=$(mktemp -d /tmp/systemd-guest.XXXXXX)
trap 'rm -rf "$io"' EXIT
{
	printf 'cd %q\n' "$(pwd -P)"
	export -p | grep -vE '^declare -x (PWD|OLDPWD|SHLVL|_|container|NOTIFY_SOCKET|INVOCATION_ID|LISTEN_[A-Z]*)='
	printf 'exec'
	printf ' %q' "$@"
	printf ' </dev/null\n'
} >"$io/cmd"
# The unit: the command, its status in $io/rc, then the manager exits
# (`systemctl exit` ends a manager that runs as a container's init).
cat >"$io/systemd-guest.service" <<EOF
[Unit]
Description=systemd-guest.sh command
DefaultDependencies=no

[Service]
Type=oneshot
StandardOutput=file:$io/out
StandardError=inherit
ExecStart=/bin/bash -c 'bash $io/cmd; echo \$? > $io/rc'
ExecStartPost=/bin/systemctl --no-block exit 0
EOF
: >"$io/out"

cg=/sys/fs/cgroup/systemd-guest
mkdir -p "$cg"
# shellcheck disable=SC2016 # expanded by the inner bash
unshare --pid --fork --mount --cgroup --propagation private /bin/bash -c '
	set -e
	echo $$ > '"$cg"'/cgroup.procs
	exec unshare --cgroup /bin/bash -c "
		set -e
		mount -t proc proc /proc
		umount /sys/fs/cgroup
		mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
		mount -t tmpfs -o mode=0755 tmpfs /run
		mkdir -p /run/systemd/system /run/lock
		cp '"$io"'/systemd-guest.service /run/systemd/system/
		exec env -i container=systemd-guest PATH=/usr/sbin:/usr/bin:/sbin:/bin /lib/systemd/systemd --unit=systemd-guest.service --log-target=console --show-status=no
	"
' >"$io/systemd.log" 2>&1 &
sd=$!
tail -n +1 -f "$io/out" --pid=$sd &
tailpid=$!
set +e
wait $sd
sdrc=$?
wait $tailpid
set -e
if ! grep -qxE '[0-9]+' "$io/rc" 2>/dev/null; then
	echo "systemd-guest.sh: systemd ended (exit $sdrc) without the command's status; its log:" >&2
	tail -n 40 "$io/systemd.log" >&2
	exit 125
fi
exit "$(cat "$io/rc")"
