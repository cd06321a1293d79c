#!/bin/bash
# Device check (issue 26) on the cgroup v2 GPU lease, built by hack/devcheck/pack.sh: the managed containerd
# outlives a SIGKILLed agent, sits in its own cgroup, is adopted (same pid,
# 0 restarts), the root dirs are 0750, the socket is root-only and no TCP
# read-only port opens; then make killtest's loop (N kills).
set -u
cd "$(dirname "$0")/../.."
N=${N:-25}
P=${P:-/opt/nk}; mkdir -p $P; tar -C $P -xJf .devcheck/pack.tar.xz
[ -x /usr/lib/cni/bridge ] || { mkdir -p /opt/cni/bin; cp $P/cni/* /opt/cni/bin/; }
export PATH=$P/bin:$PATH
if ! command -v iptables >/dev/null; then
	mkdir -p /opt/ipt; for f in .devcheck/debs/*.deb; do dpkg -x $f /opt/ipt; done
	for b in iptables ip6tables iptables-save iptables-restore ip6tables-save ip6tables-restore; do ln -sf xtables-nft-multi /opt/ipt/usr/sbin/$b; done
	export PATH=/opt/ipt/usr/sbin:$PATH LD_LIBRARY_PATH=/opt/ipt/usr/lib/x86_64-linux-gnu:/opt/ipt/lib/x86_64-linux-gnu XTABLES_LIBDIR=/opt/ipt/usr/lib/x86_64-linux-gnu/xtables
fi
iptables --version
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "== host: $(uname -r) $(stat -fc %T /sys/fs/cgroup) cores=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg)"
runc --version | head -1; containerd --version
R=/tmp/nkroot; M=/tmp/nkman; mkdir -p $M
printf "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupRoot: /nkcheck\nfileCheckFrequency: 2s\n" > /tmp/nkcheck.yaml
cp examples/pods/besteffort.yaml examples/pods/guaranteed.yaml $M/
start() { nodekeeper run --root-dir $R --image-dir $P/images --pod-manifest-path $M --hostname-override gpu --config /tmp/nkcheck.yaml --status-interval 0 >>/tmp/agent.log 2>&1 & A=$!; }
waitrun() { for i in $(seq 1 120); do n=$(nodekeeper get pods --root-dir $R 2>/dev/null | grep -c Running); [ "$n" -ge 2 ] && return 0; sleep 0.5; done; echo "pods not Running"; nodekeeper get pods --root-dir $R; tail -20 /tmp/agent.log; return 1; }
t0=$(date +%s%N); start; waitrun; echo "== first start: 2 pods Running after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
nodekeeper get pods --root-dir $R
PF=$(find $R -name containerd.pid | head -1); cat $PF; echo
C=$(sed 's/.*"pid":\([0-9]*\).*/\1/' $PF)
echo "== containerd pid $C cgroup: $(cat /proc/$C/cgroup)"
echo "== agent cgroup: $(cat /proc/$A/cgroup)"
for s in $(pgrep -f containerd-shim-runc-v2); do echo "shim $s: $(cat /proc/$s/cgroup)"; done
echo "== TCP listeners (hex ports): $(awk 'NR>1 && $4=="0A" {print $2}' /proc/net/tcp | tr '\n' ' ')"; grep -q ":280F .* 0A" /proc/net/tcp && echo "10255 OPEN (bad)" || echo "10255 closed"
stat -c '%a %U %n' $R $R/pods $R/pods/* $R/nodekeeper.sock
echo "== as uid 65534:"; setpriv --reuid 65534 --regid 65534 --clear-groups ls $R 2>&1 | head -2; setpriv --reuid 65534 --regid 65534 --clear-groups $P/bin/nodekeeper get pods --root-dir $R 2>&1 | head -2
kill -9 $A; wait $A 2>/dev/null; sleep 1
kill -0 $C 2>/dev/null && echo "== after agent SIGKILL: containerd $C alive" || echo "== after agent SIGKILL: containerd $C DEAD (bad)"
t0=$(date +%s%N); start; waitrun; echo "== restart: Running after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
C2=$(sed 's/.*"pid":\([0-9]*\).*/\1/' $(find $R -name containerd.pid | head -1)); echo "== containerd pid after restart: $C2 (was $C)"
nodekeeper get pods --root-dir $R
rm -f $M/*.yaml; for i in $(seq 1 120); do nodekeeper get pods --root-dir $R 2>/dev/null | grep -q Running || break; sleep 0.5; done; echo "== pods removed: $(nodekeeper get pods --root-dir $R 2>&1 | wc -l) lines"
kill -INT $A; wait $A; echo "== agent exit on SIGINT: $?"; sleep 1
st=$(awk "{print \$3}" /proc/$C2/stat 2>/dev/null); echo "containerd $C2 after the agent's SIGINT: state ${st:-gone} (Z or gone: stopped)"
nodekeeper stop-runtime --root-dir $R; echo "stop-runtime rc=$?"
echo "== shims left: $(pgrep -fc containerd-shim-runc-v2)"
echo "== killtest N=$N"
timeout 270 killtest -bin $P/bin/nodekeeper -images $P/images -n $N 2>&1 | tail -25
echo "== load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
