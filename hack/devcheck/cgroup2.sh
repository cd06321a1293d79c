#!/bin/bash
# Device check (issue 27) on the cgroup v2 GPU lease (a real cgroup v2 host,
# kernel 6.18, where the lane's VM has Debian's 6.1): the real cgroup v2 tests
# of internal/machine/cgroups, internal/machine/pressure and internal/machine/stats (test binaries
# built by hack/devcheck/pack.sh into .devcheck/tests), then `nodekeeper run`
# with three pods: pod cgroup values, memory.oom.group on the containers,
# PSI in the Summary, the pressure notifier's mechanisms. `cgroup2.sh
# reaction` runs the live memory pressure reaction benchmark of test/e2e
# there instead (its test binary in .devcheck/pack/tests/e2e.test).
set -u
cd "$(dirname "$0")/../.."
P=${P:-/opt/nk}; mkdir -p $P; tar -C $P -xJf .devcheck/pack.tar.xz
[ -x /usr/lib/cni/bridge ] || { mkdir -p /opt/cni/bin; cp $P/cni/* /opt/cni/bin/; }
export PATH=$P/bin:$PATH
if ! command -v iptables >/dev/null; then
	mkdir -p /opt/ipt; for f in .devcheck/debs/*.deb; do dpkg -x $f /opt/ipt; done
	for b in iptables ip6tables iptables-save iptables-restore ip6tables-save ip6tables-restore; do ln -sf xtables-nft-multi /opt/ipt/usr/sbin/$b; done
	export PATH=/opt/ipt/usr/sbin:$PATH LD_LIBRARY_PATH=/opt/ipt/usr/lib/x86_64-linux-gnu:/opt/ipt/lib/x86_64-linux-gnu XTABLES_LIBDIR=/opt/ipt/usr/lib/x86_64-linux-gnu/xtables
fi
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "== host: $(uname -r) $(stat -fc %T /sys/fs/cgroup) cores=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) pid1=$(ps -p 1 -o comm=) swap=$(swapon --noheadings --show=NAME | tr '\n' ' ')"
echo "== root subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
export CI=true
if [ "${1:-}" = reaction ]; then
	export NODEKEEPER_E2E_BIN=$P/bin/nodekeeper NODEKEEPER_E2E_IMAGES=$P/images
	(cd test/e2e && timeout 170 $P/tests/e2e.test -test.run '^$' -test.bench MemoryPressureReaction -test.benchtime ${N:-10}x 2>&1 | grep -vE '^\s*time=' | tail -15)
	echo "== load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	exit 0
fi
t() { (cd internal/$1 && timeout ${3:-60} $P/tests/$1.test -test.count=1 -test.run "$2" -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|_test.go:' | tail -20); }
t cgroups '^(TestRealCgroupV2|TestRealPlace|TestRealSystemd)$'
t pressure '^(TestMemoryEventsReadAtOpen|TestMemoryEventsWakes|TestCgroupPSITrigger|TestPSITriggerWidened)$'
t stats '^(TestRealCgroupStatsV2|TestRealNode)$'
R=/tmp/nkroot; M=/tmp/nkman; mkdir -p $M
printf "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupRoot: /nkcheck\nfileCheckFrequency: 2s\nfailSwapOn: false\n" > /tmp/nkcheck.yaml
cp examples/pods/besteffort.yaml examples/pods/burstable.yaml examples/pods/guaranteed.yaml $M/
nodekeeper run --root-dir $R --image-dir $P/images --pod-manifest-path $M --hostname-override gpu --config /tmp/nkcheck.yaml --status-interval 0 >/tmp/agent.log 2>&1 & A=$!
for i in $(seq 1 120); do n=$(nodekeeper get pods --root-dir $R 2>/dev/null | grep -c Running); [ "$n" -ge 3 ] && break; sleep 0.5; done
nodekeeper get pods --root-dir $R
echo "== notifier: $(grep -o 'mechanisms=[^ ]*' /tmp/agent.log | head -1)"
for d in $(find /sys/fs/cgroup/nkcheck -maxdepth 3 -type d -name 'pod*'); do
	echo "$d: cpu.weight=$(cat $d/cpu.weight) cpu.max=$(cat $d/cpu.max) memory.max=$(cat $d/memory.max) pids.max=$(cat $d/pids.max)"
	for c in $d/*/; do echo "  ${c#$d/}: memory.oom.group=$(cat $c/memory.oom.group) memory.swap.max=$(cat $c/memory.swap.max 2>/dev/null)"; done
done
curl -s --unix-socket $R/nodekeeper.sock http://localhost/stats/summary | python3 -c '
import json,sys
s=json.load(sys.stdin); n=s["node"]
print("node psi:", json.dumps(n.get("cpu",{}).get("psi")), "memory psi:", json.dumps(n.get("memory",{}).get("psi")), "io psi:", json.dumps(n.get("io",{}).get("psi")))
for p in s["pods"]:
  print(p["podRef"]["name"], "ws", p.get("memory",{}).get("workingSetBytes"), "cpu psi", json.dumps(p.get("cpu",{}).get("psi")), "containers with psi:", sum(1 for c in p.get("containers",[]) if c.get("cpu",{}).get("psi")))'
curl -s --unix-socket $R/nodekeeper.sock http://localhost/metrics/cadvisor | grep -c '^container_pressure_' | sed 's/^/container_pressure_ series: /'
rm -f $M/*.yaml; for i in $(seq 1 120); do nodekeeper get pods --root-dir $R 2>/dev/null | grep -q Running || break; sleep 0.5; done
kill -INT $A; wait $A; echo "== agent exit on SIGINT: $?"
nodekeeper stop-runtime --root-dir $R; echo "stop-runtime rc=$?; left under nkcheck: $(cd /sys/fs/cgroup/nkcheck 2>/dev/null && find . -mindepth 1 -type d | tr "\n" " ")"
grep -E 'level=(WARN|ERROR)' /tmp/agent.log | head -8
echo "== load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
