#!/usr/bin/env bash
# vm.sh COMMAND [ARG...]: runs COMMAND as root in a throwaway VM whose
# /sys/fs/cgroup is cgroup2 only, every controller enabled in the root's
# cgroup.subtree_control, and exits with its exit code (124: the VM timed
# out, 125: it ended without one; then the console's tail goes to stderr).
#
# The guest boots Debian's stock kernel (fetched with apt-get download, never
# installed) from a busybox initramfs; its root is the host's / read-only over
# 9p under an overlay with a tmpfs upper, so it has the host's packages and
# binaries and nothing it writes reaches the host. /tmp /run /var/tmp /var/log
# /var/lib/containerd /var/lib/nodekeeper are fresh tmpfs, except that the
# working directory keeps its content. COMMAND runs in the working directory
# with the caller's exported environment; its output (stdout and stderr
# merged) streams to stdout. No network but lo.
#
# Env: CG2_WORK (cache, default /var/tmp/nodekeeper-cg2vm), CG2_MEM (MiB,
# default 2048), CG2_SMP (default nproc), CG2_TIMEOUT (s, default 2100),
# CG2_ACCEL (kvm|tcg|auto; auto takes kvm only with vmx/svm), CG2_DEBUG=1
# (kernel messages and the console on stderr).
set -euo pipefail
WORK=${CG2_WORK:-/var/tmp/nodekeeper-cg2vm}
MEM=${CG2_MEM:-2048}
SMP=${CG2_SMP:-$(nproc)}
TIMEOUT=${CG2_TIMEOUT:-2100}
ACCEL=${CG2_ACCEL:-auto}
DEBUG=${CG2_DEBUG:-0}
[ $# -gt 0 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
export PATH="$PATH:/usr/sbin:/sbin"
log() { printf 'cg2vm: %s\n' "$*" >&2; }
apt() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 "$@"; }

# Host packages. apt-get waits up to 15 min on the dpkg lock instead of failing.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
{ [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; } && need+=(busybox-static) # static: it runs before any library is there
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	apt update -qq
	apt install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Kernel and initramfs, cached in $WORK; one builder at a time.
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock 9
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kpkg)
[ -n "$KPKG" ] || { apt update -qq; KPKG=$(kpkg); }
KVER=${KPKG#linux-image-}
KDIR=$WORK/kernel-$KVER
iself() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
if [ ! -s "$KDIR/vmlinux" ]; then
	log "fetching $KPKG"
	rm -rf "$KDIR" "$KDIR.tmp"
	mkdir -p "$KDIR.tmp/deb"
	(cd "$KDIR.tmp/deb" && apt-get -o APT::Sandbox::User=root download "$KPKG" >/dev/null)
	dpkg-deb -x "$KDIR.tmp"/deb/*.deb "$KDIR.tmp/x"
	# qemu boots the ELF vmlinux through its PVH entry: no real-mode setup
	# and no decompression under emulation (half the boot time of a bzImage).
	z=$KDIR.tmp/x/boot/vmlinuz-$KVER
	for m in '\xfd7zXZ\x00:xz -dc' '\x28\xb5\x2f\xfd:zstd -dc' '\x1f\x8b\x08:gzip -dc'; do
		for off in $(LC_ALL=C grep -obUaP "${m%%:*}" "$z" | cut -d: -f1 | head -3); do
			tail -c +$((off + 1)) "$z" | ${m#*:} >"$KDIR.tmp/vmlinux" 2>/dev/null || true
			iself "$KDIR.tmp/vmlinux" && break 2
		done
	done
	iself "$KDIR.tmp/vmlinux" || { log "cannot unpack $z"; exit 125; }
	mkdir -p "$KDIR.tmp/lib"
	mv "$KDIR.tmp/x/lib/modules" "$KDIR.tmp/lib/modules"
	# No VM here needs graphics, media, radios or sound: 200 MB less.
	(cd "$KDIR.tmp/lib/modules/$KVER/kernel" && rm -rf drivers/gpu drivers/media drivers/net/wireless \
		drivers/infiniband drivers/staging drivers/iio drivers/bluetooth net/bluetooth net/wireless net/mac80211 sound)
	depmod -b "$KDIR.tmp" "$KVER"
	rm -rf "$KDIR.tmp/deb" "$KDIR.tmp/x"
	mv "$KDIR.tmp" "$KDIR"
fi
INITRD=$KDIR/initrd-$(sha256sum "$0" | cut -c1-12).cpio.gz # rebuilt when this script changes
if [ ! -s "$INITRD" ]; then
	log "building the initramfs"
	R=$(mktemp -d "$WORK/initrd.XXXXXX")
	mkdir -p "$R"/{bin,proc,sys,dev,lower,rw,newroot,keep,lib/modules}
	cp /bin/busybox "$R/bin/"
	for m in virtio_pci virtio_console 9pnet_virtio 9p overlay; do
		modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
	done | awk '!seen[$0]++' | while read -r ko; do
		cp "$ko" "$R/lib/modules/"
		echo "${ko##*/}" >>"$R/modules"
	done
	sed -n '/^# ---- stage 1/,/^# ---- end of stage 1/p' "$0" | sed '1s|.*|#!/bin/busybox sh|' >"$R/init"
	chmod +x "$R/init"
	(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD.tmp")
	mv "$INITRD.tmp" "$INITRD"
	rm -rf "$R"
	find "$KDIR" -name 'initrd-*.cpio.gz' ! -newer "$INITRD" ! -path "$INITRD" -mtime +1 -delete
fi
flock -u 9

# This run: its command, environment and stage 2 in $RUN, shared as /.cg2vm.
RUN=$(mktemp -d "$WORK/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
CWD=$(pwd -P)
printf '%s\n' "$CWD" >"$RUN/keep"
printf '%s\n' "$KDIR/lib/modules" >"$RUN/mods"
{
	printf 'CMD=('
	printf '%q ' "$@"
	printf ')\ncd %q || fin vmfail\n' "$CWD"
	env -0 | while IFS= read -r -d '' kv; do # the caller's environment, less what would mislead inside
		k=${kv%%=*}
		case $k in PWD | OLDPWD | SHLVL | _ | TERM | DISPLAY | SSH_* | XDG_RUNTIME_DIR | DBUS_* | INVOCATION_ID | JOURNAL_STREAM | \
			NOTIFY_SOCKET | LISTEN_* | CG2_* | TMPDIR | BASH_ENV | ENV | SHELLOPTS | BASHOPTS | BASH_FUNC_*) continue ;;
		esac
		[[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && printf 'export %s=%q\n' "$k" "${kv#*=}"
	done
} >"$RUN/cmd"
cat >"$RUN/stage2" <<'EOF'
# Stage 2: bash as PID 1 in the overlay root: runs the command, reports its exit code, powers off.
fin() { echo "$1" >/.cg2vm/rc; sync; /.cg2vm-bin/busybox poweroff -f; echo o >/proc/sysrq-trigger; sleep 30; }
source /.cg2vm/cmd
export TERM=dumb
out=/dev/ttyS0
for i in $(seq 100); do # the virtio-serial port named cg2out (probing is asynchronous)
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat $p/name 2>/dev/null)" = cg2out ] && [ -c /dev/${p##*/} ] && out=/dev/${p##*/} && break 2
	done
	sleep 0.05
done
read -r up _ </proc/uptime
echo "cg2vm: guest up ${up}s, kernel $(uname -r), cgroup2 subtree_control: $(</sys/fs/cgroup/cgroup.subtree_control)" >$out
"${CMD[@]}" </dev/null >$out 2>&1
fin $?
EOF

if [ "$ACCEL" = auto ]; then
	ACCEL=tcg
	grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && ACCEL=kvm
fi
case $ACCEL in
kvm) QACCEL=(-accel kvm -cpu host) ;;
tcg) QACCEL=(-accel tcg,thread=multi,tb-size=512 -cpu max) ;;
*) log "CG2_ACCEL=$ACCEL: want kvm, tcg or auto"; exit 2 ;;
esac
APPEND="console=ttyS0 panic=-1 oops=panic rdinit=/init cgroup_no_v1=all psi=1 random.trust_cpu=on nokaslr mitigations=off"
[ "$DEBUG" = 1 ] || APPEND="$APPEND quiet loglevel=1"
log "booting $KVER ($ACCEL, $SMP vCPU, $MEM MiB, timeout ${TIMEOUT}s)"
t0=$(date +%s)
# Output: a virtio-serial port (no tty, no CRLF; MB/s where the serial port
# crawls) into a FIFO that cat copies to stdout as it comes.
mkfifo "$RUN/out.in" "$RUN/out.out"
cat "$RUN/out.out" &
catpid=$!
trap 'kill $catpid 2>/dev/null || true; rm -rf "$RUN"' EXIT
set +e
# --foreground keeps qemu in the caller's process group: an interrupt of the
# lane (Ctrl-C, a CI job's kill) ends the VM too.
timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot \
	"${QACCEL[@]}" -smp "$SMP" -m "$MEM" -machine q35 \
	-kernel "$KDIR/vmlinux" -initrd "$INITRD" -append "$APPEND" -serial file:"$RUN/console.log" \
	-chardev pipe,id=out,path="$RUN/out" -device virtio-serial-pci -device virtserialport,chardev=out,name=cg2out \
	-fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
	-fsdev local,id=io,path="$RUN",security_model=none,multidevs=remap -device virtio-9p-pci,fsdev=io,mount_tag=cg2io \
	-device virtio-rng-pci </dev/null
qrc=$?
: <>"$RUN/out.out" # lets cat end even if qemu never opened the FIFO
wait $catpid
set -e
console() { sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g; s/\r$//; /^$/d' "$RUN/console.log" | tail -n "$1" | sed 's/^/console: /' >&2; }
[ "$DEBUG" != 1 ] || console 100000
rc=$(cat "$RUN/rc" 2>/dev/null || true)
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	[ "$DEBUG" = 1 ] || console 40
	log "VM timed out after ${TIMEOUT}s"
	exit 124
elif ! [[ $rc =~ ^[0-9]+$ ]]; then
	[ "$DEBUG" = 1 ] || console 40
	log "VM ended without an exit code (qemu exit $qrc) after $(($(date +%s) - t0))s"
	exit 125
fi
log "command exit $rc; VM $(($(date +%s) - t0))s from qemu start to power-off"
exit "$rc"

# ---- stage 1 (the initramfs's /init, static busybox) -----------------------------
# The host's / over 9p as the lower of an overlay with a tmpfs upper, every
# mount of the new root, then switch_root to bash. Execs of host binaries over
# 9p cost 0.1-0.5 s each under TCG, so busybox does the mounts.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
N=/newroot
die() { echo "cg2vm: stage 1: $*"; echo vmfail >$N/.cg2vm/rc 2>/dev/null; sync; poweroff -f; }
grep -qw quiet /proc/cmdline && echo 1 >/proc/sys/kernel/printk || set -x
for m in $(cat /modules); do insmod /lib/modules/$m || echo "cg2vm: insmod $m failed"; done
tag() { # waits for a 9p mount tag: virtio probing is asynchronous
	for i in $(seq 200); do
		grep -qs "$1" /sys/bus/virtio/drivers/9pnet_virtio/virtio*/mount_tag && return 0
		sleep 0.05
	done
	return 1
}
P9=trans=virtio,version=9p2000.L,msize=512000
tag hostroot && mount -t 9p -o $P9,ro,cache=loose hostroot /lower || die "9p root"
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay $N || die overlay
mkdir -p $N/.cg2vm
tag cg2io && mount -t 9p -o $P9,cache=none cg2io $N/.cg2vm || die "9p io"
mount -t proc proc $N/proc
mount -t sysfs sysfs $N/sys
mount -t devtmpfs devtmpfs $N/dev
mkdir -p $N/dev/pts $N/dev/shm $N/dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts $N/dev/pts
ln -sf pts/ptmx $N/dev/ptmx
mount -t tmpfs -o mode=1777 tmpfs $N/dev/shm
mount -t mqueue mqueue $N/dev/mqueue
[ -e $N/dev/fd ] || ln -s /proc/self/fd $N/dev/fd
mount -t cgroup2 -o nsdelegate cgroup2 $N/sys/fs/cgroup || die cgroup2
ctl=""
for c in $(cat $N/sys/fs/cgroup/cgroup.controllers); do ctl="$ctl +$c"; done
echo $ctl >$N/sys/fs/cgroup/cgroup.subtree_control || die "subtree_control $ctl"
mount -t securityfs securityfs $N/sys/kernel/security 2>/dev/null
mount -t bpf bpf $N/sys/fs/bpf 2>/dev/null
# The working directory stays visible (through the overlay: writable, and
# writes stay in the guest) even under one of the tmpfs below.
keep=$(cat $N/.cg2vm/keep)
[ "$keep" = / ] || mount --bind $N$keep /keep
for d in /tmp /run /var/tmp /var/log /var/lib/containerd /var/lib/nodekeeper; do
	mkdir -p $N$d
	mount -t tmpfs -o mode=0755 tmpfs $N$d
done
chmod 1777 $N/tmp $N/var/tmp
mkdir -p $N/run/lock $N/run/user $N$keep
[ "$keep" = / ] || mount --move /keep $N$keep
mods=$(cd $N/lib && pwd -P)/modules # the guest kernel's modules, so modprobe works
mkdir -p $N${mods#$N}
mount --bind /lower$(cat $N/.cg2vm/mods) $N${mods#$N}
ip link set lo up
hostname cg2vm
printf '127.0.0.1 localhost cg2vm\n::1 localhost ip6-localhost ip6-loopback\n' >$N/etc/hosts
[ -s $N/etc/machine-id ] || echo 0123456789abcdef0123456789abcdef >$N/etc/machine-id
mkdir -p $N/.cg2vm-bin
cp /bin/busybox $N/.cg2vm-bin/
exec switch_root $N /bin/bash /.cg2vm/stage2
# ---- end of stage 1
