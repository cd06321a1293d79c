package main

import (
	"cmp"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// coreFocus is the subset `make conformance` runs when no focus is given:
// the [NodeConformance] specs of probes, the container runtime, lifecycle
// hooks, init and sidecar containers, pods, mirror pods and device plugins.
var coreFocus = []string{
	`Probing container`,
	`Container Runtime`,
	`Container Lifecycle Hook`,
	`InitContainer`,
	`SidecarContainers`,
	`\[sig-node\] Pods should`,
	`MirrorPod`,
	`Device Plugin`,
}

// coreSkip leaves the [Slow] specs out of the core subset: "Pods should cap
// back-off at MaxContainerBackOff" alone takes 27 min. FOCUS or -chunk runs
// them.
var coreSkip = []string{`\[Slow\]`}

// machineSkip is a spec this machine cannot run, whichever agent runs it.
type machineSkip struct {
	re     string // matched against the spec's full text
	reason string
}

// machineSkips are the specs that need hardware or kernel features this
// machine kind lacks. (The specs that restart the kubelet through systemctl
// run: the harness's systemctl restarts either agent, unit.go.)
var machineSkips = []machineSkip{
	{`Container Runtime blackbox test when running a container with a new image \[Serial\] should be able to pull from private registry with secret \[NodeConformance\]`,
		"pulls localhost:5000/pause:testing with a pull secret from agnhost's fake-registry-server, which serves the images upstream's agnhost image gets from the internet when it is built (prepare_registry.sh); the agnhost stand-in has none, so the pull fails (it failed on the kubelet after 5 min)"},
	{`should be able to pull from private registry with credential provider`,
		"installs a credential-provider plugin and pulls localhost:5000/pause:testing from agnhost's fake-registry-server, which in the agnhost stand-in holds no image (upstream's image gets them from the internet when it is built)"},
	{`MirrorPodWithGracePeriod when create a mirror pod and the container runtime is temporarily down during pod termination`,
		"stops and starts the container runtime through systemd (dbus), which the harness runs without here"},
	{`MirrorPod when recreating a static pod it should launch successfully even if it temporarily failed termination due to volume failing to unmount`,
		"runs an NFS server from registry.k8s.io/e2e-test-images/volume/nfs and mounts NFS: its stand-in is only a placeholder for the suite's prepull, without the NFS server (it needs the kernel NFS server and its exports)"},
	{`PrivilegedPod \[NodeConformance\] should enable privileged commands`,
		"runs `ip link add dummy1 type dummy` in a privileged container: this machine kind's kernel has no dummy network device (\"Unknown device type\" on the host, \"Operation not supported\" in the container)"},
}

// machineSkipped reports whether spec is one of the machine's skips.
func machineSkipped(spec string) bool {
	for _, s := range machineSkips {
		if regexp.MustCompile(s.re).MatchString(spec) {
			return true
		}
	}
	return false
}

// skipRegexps are the -skip of every run: the machine's skips, whatever the
// focus. (The ip-leak spec, which SIGKILLs "the container runtime", finds the
// run's own containerd through the driver's pid file: runtimepid.go.)
func skipRegexps() []string {
	var out []string
	for _, s := range machineSkips {
		out = append(out, s.re)
	}
	return out
}

// bothFail explains specs that fail on the real kubelet here too.
type bothFail struct {
	re     *regexp.Regexp
	reason string
}

var bothFails = []bothFail{
	{regexp.MustCompile(`Summary API \[NodeConformance\] when querying /stats/summary should report resource usage through the stats api`),
		"expects the kubelet, runtime and misc system containers, which exist only when the harness moves the kubelet and the runtime into cgroups of their own (the driver turns that off with --system-cgroups= --kubelet-cgroups= --runtime-cgroups=, so that no process of the machine is moved), and PSI per container, which cgroup v1 does not have"},
	{regexp.MustCompile(`(ConfigMap|Secrets) should be consumable via the environment \[NodeConformance\] \[Conformance\]`),
		"the container's sh lists its environment, which holds the variable data-1: the stand-in busybox is Debian's 1.35.0, whose sh drops variables whose names are not shell identifiers (the suite's busybox 1.37 keeps them; so does bash)"},
	{regexp.MustCompile(`Networking Granular Checks: Pods should function for node-pod communication: udp`),
		"dials the pod with `nc -u` from the agnhost stand-in, whose nc is Debian busybox's, without UDP (-u); the suite's agnhost image carries netcat-openbsd"},
	{regexp.MustCompile(`Swap \[LinuxOnly\] \[Feature:NodeSwap\] \[Serial\] \[NodeConformance\] with a critical pod - should avoid swap`),
		"reads the container's swap limit from the cgroup v2 file memory.swap.max, which a cgroup v1 machine does not have (cat exits 1 on both agents)"},
	{regexp.MustCompile(`ImageGarbageCollect \[Serial\] \[NodeConformance\] when ImageMaximumGCAge is set should`),
		"the It passes; the AfterEach's prepull wants the suite's busybox by digest (busybox@sha256:a9155b13...), a stand-in the harness can only import: image GC removed it, and no registry can serve content under a digest it does not have (loopback registry, docs/conformance-harness.md)"},
	{regexp.MustCompile(`ImageGCNoEviction \[Slow\] \[Serial\] \[Disruptive\] \[Feature:Eviction\]`),
		"sets the inodesFree threshold 100000 inodes below what is free and expects image GC of the prepulled images to free that many, so that no pod is evicted; the 22 stand-ins hold 5967 files in all (2026-11-28), upstream's images (perl, etcd, the node-perf workloads...) far more, so image GC frees too few inodes and the inode-hog pod is evicted on both agents (\"priority 0 pod: container-inode-pod failed\")"},
	{regexp.MustCompile(`Container Manager Misc \[Serial\] Validate OOM score adjustments \[Feature:OOMScoreAdj\] once the node is setup (Kubelet's|container runtime's) oom-score-adj should be -999`),
		"wants oom_score_adj -999 on the agent and on containerd: this machine refuses a negative oom_score_adj (the harness's containerd runs with restrict_oom_score_adj), so both stay at their parent's score (on nodekeeper the Kubelet's spec also finds no process named kubelet: the agent is nodekeeper)"},
}

// bothFailReason returns why spec fails on both agents here, "" if unknown.
func bothFailReason(spec string) string {
	for _, b := range bothFails {
		if b.re.MatchString(spec) {
			return b.reason
		}
	}
	return ""
}

func gitOutput(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	return strings.TrimSpace(string(out)), err
}

// The subsystems set (`-set subsystems`): the suite's specs beyond
// [NodeConformance] that test the subsystems nodekeeper is for (issue 30).

// subsystemsLabels is the label filter the set is drawn from.
const subsystemsLabels = "!NodeConformance"

// subsystemSpec is one part of the set: the specs whose full text matches
// re, what part of the agent they test and how long one usually takes on
// this machine kind (kubelet restarts included), for chunking.
type subsystemSpec struct {
	re       *regexp.Regexp
	part     string
	expected time.Duration
}

// subsystemSpecs are the parts of the set, the first match giving a spec's
// expected duration. Durations: the prototype (eviction 3-11 min,
// OOMKiller 35 s) and the suite's own waits.
var subsystemSpecs = []subsystemSpec{
	{regexp.MustCompile(`^\[sig-node\] MemoryAllocatableEviction`), "eviction", 11 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] LocalStorageCapacityIsolationEviction`), "eviction", 3 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] (PriorityMemoryEvictionOrdering|MemoryAllocatableEvictionPodLevelResources)`), "eviction", 10 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] PriorityPidEvictionOrdering`), "eviction", 6 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] ([A-Za-z]*Eviction[A-Za-z]*|ImageGC[A-Za-z]*|KubeletSeparateDiskGC|LocalStorageCapacityIsolationFSQuotaMonitoring|SystemNodeCriticalPod) `), "eviction, image GC", 8 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] CriticalPod`), "critical pods (preemption)", 2 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] OOMKiller`), "OOM", time.Minute},
	{regexp.MustCompile(`^\[sig-node\] (Device Plugin|Device Manager)`), "device plugins", 4 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] POD Resources API`), "pod resources", 2 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] Probe Stress`), "probe stress", 4 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] (Restart |Unknown Pods|RestartAllContainersWithKubeletRestarts|Lock contention)`), "agent restarts", 5 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] Node Container Manager`), "node allocatable (eviction)", 3 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] Container Manager Misc \[Serial\] Validate OOM score adjustments`), "OOM scores", time.Minute},
	{regexp.MustCompile(`^\[sig-node\] PodPidsLimit`), "PID limits (eviction)", 2 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] (Pod Extended \(RestartAllContainers\)|Pod Extended \(container restart policy\)|Container Restart \[Feature:CriProxy\])`), "restart rules and back-off", 3 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] (Pull Image \[Feature:CriProxy\]|\[Feature:CriProxy\] \[Serial\] Inject)`), "image pulls (image manager)", 2 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] Pod conditions managed by Kubelet .*\[Feature:CriProxy\]`), "pod status (image pulls)", 2 * time.Minute},
	{regexp.MustCompile(`^\[sig-node\] \[Feature:CriProxy\] \[Serial\]`), "CRI (alpha features)", 2 * time.Minute},
}

// subsystemPart returns the part of the set spec belongs to and its
// expected duration; ok is false for a spec outside the set.
func subsystemPart(spec string) (part string, expected time.Duration, ok bool) {
	for _, s := range subsystemSpecs {
		if s.re.MatchString(spec) {
			return s.part, s.expected, true
		}
	}
	return "", 0, false
}

// subsystemSkips are the specs of the set that are not run here, with why.
// They are skipped like machineSkips, in the set's runs only.
var subsystemSkips = []machineSkip{
	{`POD Resources API .*(CPU manager Static policy|checking core resource managers assignments)`,
		"the CPU and memory managers' static policies: this machine kind has 2 CPUs (the specs want more allocatable CPUs than that) and nodekeeper has no CPU or memory manager"},
	{`POD Resources API .*with SRIOV devices`, "needs SR-IOV devices and the sriov-device-plugin image; this machine kind has neither"},
	{`KubeletSeparateDiskGC`, "needs the image filesystem on a disk of its own (split disk); this machine kind has one filesystem"},
	{`LocalStorageCapacityIsolationFSQuotaMonitoring`, "needs project quotas (an XFS or ext4 filesystem mounted with prjquota) and user namespaces; this machine kind's filesystem has none"},
	{`\[Feature:OffByDefault\]`, "tests an alpha feature that is off by default (CRIListStreaming, ImageVolumeWithDigest): neither agent runs with it"},
	{`Node Container Manager \[Serial\] Validate CGroup management .*with systemd`, "needs the systemd cgroup driver; the harness runs both agents with cgroupfs, without the machine's systemd"},
}

// subsystemSkipped reports whether spec is one of the set's skips, and why.
func subsystemSkipped(spec string) (string, bool) {
	for _, s := range subsystemSkips {
		if regexp.MustCompile(s.re).MatchString(spec) {
			return s.reason, true
		}
	}
	return "", false
}

// specFocus is the ginkgo focus of exactly the spec or container named name
// (a name as listSpecInfo gives it: its texts joined by single spaces). Ginkgo
// matches --focus against its own full text, which leaves out the empty
// texts that our names keep as a double space (the eviction specs' "should
// cause MemoryPressure  should eventually evict"): such a run of spaces
// matches one or more.
func specFocus(name string) string {
	return regexp.MustCompile(`  +`).ReplaceAllLiteralString(regexp.QuoteMeta(name), " +")
}

// durationChunk is the focus of the K-th of N chunks of names by expected
// duration: units (see units) are dealt, longest first, each to the chunk
// whose total is least so far (ties: the lower chunk), so that the chunks
// take about as long as each other. It also returns the chunk's expected
// total. The deal depends only on names and expected: the same set gives
// the same chunks run after run.
func durationChunk(names []string, ordered map[string]string, expected func(string) time.Duration, k, n int) ([]string, time.Duration) {
	type unit struct {
		focus string
		took  time.Duration
	}
	var us []unit
	index := map[string]int{}
	for _, name := range names {
		u := name
		if c, ok := ordered[name]; ok {
			u = c
		}
		if i, ok := index[u]; ok {
			us[i].took += expected(name)
			continue
		}
		index[u] = len(us)
		us = append(us, unit{specFocus(u), expected(name)})
	}
	slices.SortStableFunc(us, func(a, b unit) int { return cmp.Compare(b.took, a.took) })
	totals := make([]time.Duration, n)
	var out []string
	for _, u := range us {
		c := 0
		for i := range totals {
			if totals[i] < totals[c] {
				c = i
			}
		}
		totals[c] += u.took
		if c == k-1 {
			out = append(out, u.focus)
		}
	}
	slices.Sort(out)
	return out, totals[k-1]
}
