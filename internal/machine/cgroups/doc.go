// Package cgroups keeps the pod cgroup hierarchy of the kubelet's
// cgroupsPerQOS layout, on cgroup v1 and v2. With the cgroupfs driver:
//
//	<cgroupRoot>/kubepods                     Guaranteed pods: kubepods/pod<UID>
//	<cgroupRoot>/kubepods/burstable           Burstable pods:  kubepods/burstable/pod<UID>
//	<cgroupRoot>/kubepods/besteffort          BestEffort pods: kubepods/besteffort/pod<UID>
//
// The runtime then puts each container in a child of its pod's cgroup (the
// cgroupParent EnsurePod returns).
//
// On cgroup v1 every path exists once per mounted hierarchy: limits are
// written in cpu, cpuacct, cpuset, memory, pids and hugetlb (cpu and cpuacct
// may be one co-mounted hierarchy); the others (blkio, devices, freezer,
// name=systemd, and the unified tree of a hybrid machine) get the directories
// only, because runc makes each container's cgroup in every hierarchy and the
// pod's must be there to be removed with it. On cgroup v2 (FSRoot holds cgroup.controllers) it
// exists once, and the controllers are enabled in each parent's
// cgroup.subtree_control.
//
// Values written for a pod (the kubelet's rules):
//
//	cpu shares   sum of the cpu requests: milli*1024/1000, at least 2, at most 262144;
//	             2 for BestEffort pods (v1 cpu.shares; v2 cpu.weight, converted as
//	             the kubelet since 1.35: 2 shares is 1, 1024 is 100, 262144 is 10000)
//	cpu quota    only when every container has a cpu limit (Guaranteed always):
//	             limit milli * 100000/1000 µs per 100000 µs period, at least 1000
//	             (v1 cpu.cfs_period_us, cpu.cfs_quota_us; v2 cpu.max "quota 100000")
//	memory       only when every container has a memory limit: the sum of the limits
//	             (v1 memory.limit_in_bytes; v2 memory.max)
//	pids         Config.PodPidsLimit when it is positive (pids.max)
//	hugepages    for every page size the machine has, the pod's hugepages-<size>
//	             request, 0 when it has none (v1 hugetlb.<size>.limit_in_bytes,
//	             v2 hugetlb.<size>.max)
//
// QoS tiers (EnsureQoS, UpdateQoS): besteffort gets 2 cpu shares, burstable
// the shares of the sum of its pods' cpu requests; kubepods is limited only
// when Config.KubepodsLimits asks. The agent calls EnsureQoS at start but
// nothing calls UpdateQoS yet (the kubelet's QoS manager does on every pod
// change), so the burstable tier keeps the cgroup's default shares.
//
// With the systemd driver (Config.Driver "systemd", systemd.go) the same tree
// is made of transient slices systemd starts over D-Bus, named as the
// kubelet's CgroupName.ToSystemd names them (each name part's "-" as "_",
// the parts joined by "-", nested by systemd):
//
//	/kubepods.slice                                          Guaranteed: kubepods-pod<UID>.slice
//	/kubepods.slice/kubepods-burstable.slice                 kubepods-burstable-pod<UID>.slice
//	/kubepods.slice/kubepods-besteffort.slice                kubepods-besteffort-pod<UID>.slice
//
// with the values below also set as unit properties; the pod's slice path is
// the cgroupParent, whose last element names the slice the runtime puts the
// containers' scopes in. Names gives the paths to readers.
//
// Requests absent where a limit is set default to the limit, as the API
// server's defaulting does. A Manager never kills processes and never removes a
// cgroup it would not create (only pod<UID> directories under the tiers).
package cgroups
