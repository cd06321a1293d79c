// Package stats builds the kubelet's stats Summary
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1) from the node it runs on, for the
// eviction manager and /stats/summary. Every file is read under an injected
// root (Config.ProcRoot, Config.CgroupFSRoot), so tests read fixture trees.
//
// Node (cgroup paths relative to the hierarchy's mount; "/" is the root cgroup):
//
//	startTime        <proc>/stat btime
//	memory capacity  <proc>/meminfo MemTotal
//	memory, v1       memory/memory.usage_in_bytes (usage); memory/memory.stat
//	                 total_inactive_file, total_rss (rssBytes), pgfault, pgmajfault
//	memory, v2       memory.stat at the root: usage = anon + file (the root has no
//	                 memory.current; runc's cgroup library, which cadvisor uses,
//	                 derives it so), inactive_file, anon (rssBytes), pgfault, pgmajfault
//	workingSetBytes  usage − inactive file (at least 0), as cadvisor computes it
//	availableBytes   capacity − workingSet: what memory.available is observed from
//	swap             <proc>/meminfo SwapTotal − SwapFree (used), SwapFree (available)
//	cpu              v1 cpuacct/cpuacct.usage; v2 cpu.stat usage_usec × 1000;
//	                 usageNanoCores = Δusage / Δtime since the previous Summary
//	psi              v2: the root cgroup's cpu.pressure, memory.pressure, io.pressure;
//	                 v1, and for a file the root lacks: <proc>/pressure/{cpu,memory,io}
//	                 (the same figures), where the kernel has them; totals in µs
//	fs               statfs(RootDir): capacity = blocks × bsize, available = bavail × bsize,
//	                 used = (blocks − bfree) × bsize, inodes = files, inodesFree = ffree
//	runtime.imageFs  CRI ImageFsInfo usedBytes and inodesUsed of the first image
//	                 filesystem, capacity/available/inodes from statfs of its mountpoint;
//	                 containerFs likewise from the container filesystems, else = imageFs
//	rlimit           maxpid = min(<proc>/sys/kernel/pid_max, threads-max);
//	                 curproc = the total of <proc>/loadavg's 4th field (processes + threads)
//	"pods" container the kubepods cgroup (<CgroupRoot>/kubepods): cpu, memory and (v2) psi
//	                 read as for pods; availableBytes = its memory limit (or capacity) − workingSet
//	network          <proc>/net/dev (the agent's namespace, the node's): each interface's
//	                 rx/tx bytes and errors in interfaces, lo*, veth*, docker* and nerdctl*
//	                 left out as cadvisor does; absent when the file is
//
// Pods (the newest ready CRI sandbox of each pod UID):
//
//	podRef, startTime     sandbox metadata and creation time
//	cpu, memory           the pod cgroup (<CgroupRoot>/kubepods[/burstable|/besteffort]/pod<UID>):
//	                      v1 cpuacct.usage, memory.usage_in_bytes, memory.stat, memory.limit_in_bytes;
//	                      v2 cpu.stat, memory.current, memory.stat, memory.max;
//	                      availableBytes = limit − workingSet when the pod has a limit
//	process_stats         processes of the pod's containers: the lines of cgroup.procs in the
//	                      pod cgroup's descendants (pids hierarchy on v1), less the sandbox's
//	psi (v2 only)         the pod cgroup's cpu.pressure, memory.pressure, io.pressure
//	                      (cpu.psi, memory.psi, io.psi)
//	containers            the newest running CRI container of each name: cpu, memory
//	                      from CRI ListContainerStats (usageNanoCores computed when the
//	                      runtime gives none); psi (v2 only) from the pressure files of
//	                      the container's cgroup, <pod cgroup>/<container ID>;
//	                      rootfs = the writable layer's usage, with
//	                      the container filesystem's capacity; logs = du of
//	                      <LogDir>/<namespace>_<name>_<UID>/<container>/ with statfs(LogDir)
//	volume                emptyDir volumes of the pod's spec: du of
//	                      <RootDir>/pods/<UID>/volumes/kubernetes.io~empty-dir/<name>
//	ephemeral-storage     rootfs + logs + disk-backed emptyDir usage, with the node
//	                      filesystem's capacity
//	network               the sandbox's network namespace: <proc>/<pid>/net/dev of the
//	                      first process of the sandbox's cgroup (<pod cgroup>/<sandbox ID>),
//	                      as Containers reads it; eth0 also inline (the default interface);
//	                      absent for a pod in the node's namespace (hostNetwork)
//
// Containers (for /metrics/cadvisor) reads, apart from the Summary, every
// running container and ready sandbox from its own cgroup,
// <pod cgroup>/<container ID>, and its processes under ProcRoot: cpu (CFS
// throttling included), memory, PSI (v2), limits, processes, threads,
// descriptors, block I/O, and the sandbox's network interfaces;
// containerread.go lists the files.
//
// du counts st_blocks × 512 of every entry and one inode per entry, as du does.
// One Summary statfs's each filesystem (device) once, so every figure of one
// filesystem is the same sample: the eviction manager tells a dedicated image
// filesystem from the node's by comparing them.
package stats
