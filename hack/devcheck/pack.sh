#!/usr/bin/env bash
# Builds what hack/devcheck/runtime-v2.sh and cgroup2.sh need on a machine without
# containerd (the GPU lease: cgroup v2, Ubuntu 24.04): .devcheck/pack.tar.xz
# (nodekeeper, killtest, static containerd 1.7 from hack/containerd's cache,
# Debian's runc and libseccomp, the CNI plugins, the images) and
# .devcheck/debs (Debian's iptables and its libraries). Run on this machine
# kind as root after a test run has built containerd 1.7 (internal/testenv/containerdtest);
# then, with the device tool, carry .devcheck/pack.tar.xz,
# .devcheck/debs and run: bash hack/devcheck/runtime-v2.sh
# (about 85 s on a warm 16-core machine with N=25). .devcheck is ignored by git
# through .git/info/exclude: add "/.devcheck/" there first.
set -euo pipefail
cd "$(dirname "$0")/../.."
ctrd=$(dirname "$(ls -t "$HOME"/.cache/nodekeeper/containerd/*/containerd | head -1)")
make -s build
rm -rf .devcheck/pack .devcheck/debs
mkdir -p .devcheck/pack/bin .devcheck/pack/cni .devcheck/pack/images .devcheck/pack/lib .devcheck/debs
CGO_ENABLED=0 go build -o .devcheck/pack/bin/killtest ./test/killtest
mkdir -p .devcheck/pack/tests
for p in cgroups pressure stats; do CGO_ENABLED=0 go test -c -o .devcheck/pack/tests/$p.test ./internal/machine/$p; done
strip .devcheck/pack/tests/*.test
cp bin/nodekeeper "$ctrd"/containerd "$ctrd"/containerd-shim-runc-v2 "$ctrd"/ctr /usr/sbin/runc .devcheck/pack/bin/
strip .devcheck/pack/bin/{containerd,containerd-shim-runc-v2,ctr,killtest,nodekeeper}
cp /usr/lib/cni/{bridge,host-local,loopback,portmap} .devcheck/pack/cni/
cp bin/images/*.tar .devcheck/pack/images/
cp -L /lib/x86_64-linux-gnu/libseccomp.so.2 .devcheck/pack/lib/
tar -C .devcheck/pack -cf - . | xz -3 -T2 >.devcheck/pack.tar.xz
(cd .devcheck/debs && apt-get download iptables libxtables12 libip4tc2 libip6tc2 libnetfilter-conntrack3 libnfnetlink0 libnftnl11 libmnl0)
ls -la .devcheck/pack.tar.xz
