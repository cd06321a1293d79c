package stats

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// SandboxContainerName is the container name a pod's sandbox is reported
// under, as the kubelet's cadvisor names it.
const SandboxContainerName = "POD"

// ContainerSample is what one read of a container's cgroup and processes
// gives: the figures the kubelet's /metrics/cadvisor serves for it. Byte and
// count fields are 0 where the kernel does not keep the figure (no swap
// accounting, no pids controller).
type ContainerSample struct {
	// Namespace and Pod name the container's pod; Container is its name, or
	// SandboxContainerName for the pod's sandbox.
	Namespace, Pod, Container string
	// ID is the runtime's container (or sandbox) ID.
	ID string
	// Image is the image the container was created from (the sandbox
	// image, Config.SandboxImage, for a sandbox).
	Image string
	// Cgroup is the container's cgroup path ("/kubepods/burstable/pod<UID>/<ID>").
	Cgroup string
	// Time is when the figures were read; StartTime when the runtime
	// created the container.
	Time, StartTime time.Time

	CPU    CPUSample
	Memory MemorySample
	// PSI is the cgroup's pressure stall information (cgroup v2 only).
	PSI   Pressure
	Spec  SpecSample
	Procs ProcessSample
	// Blkio is the block I/O of the container's cgroup per device, in the
	// order the kernel lists the devices.
	Blkio []BlkioDevice
	// Fs is the container's writable layer as the runtime reports it; nil
	// for a sandbox or when the runtime gives none.
	Fs *FsSample
	// Network holds the interfaces of the sandbox's network namespace
	// (loopback left out); nil for containers, which share it, and for a
	// sandbox in the node's namespace.
	Network []InterfaceSample
}

// CPUSample is a cgroup's cumulative cpu time, in nanoseconds, and its CFS
// bandwidth control counters: the enforcement periods that elapsed while it
// had runnable tasks, those in which it was throttled and the time it was
// throttled for, and the periods in which it used its burst and the time it
// ran on it (0 on kernels that lack cpu.cfs_burst).
type CPUSample struct {
	Usage, User, System uint64

	Periods, ThrottledPeriods, ThrottledTime uint64
	BurstPeriods, BurstTime                  uint64
}

// Pressure is a cgroup's pressure stall information (PSI) for cpu, memory
// and I/O: the "some" and "full" lines of its cpu.pressure, memory.pressure
// and io.pressure, totals in microseconds as the kernel gives them (as the
// kubelet reports them). A field is nil where the kernel keeps no such
// figure: every field on cgroup v1, whose cgroups have no pressure files.
type Pressure struct {
	CPU, Memory, IO *statsapi.PSIStats
}

// MemorySample is a cgroup's memory figures, in bytes (Failcnt, the page
// faults and OOMKills are counts).
type MemorySample struct {
	Usage, MaxUsage, WorkingSet, RSS, Cache, MappedFile, Swap uint64
	// Failcnt counts the times usage hit the limit.
	Failcnt uint64
	// PgFault and PgMajFault are the cgroup's own page faults;
	// HierPgFault and HierPgMajFault include its descendants'.
	PgFault, PgMajFault, HierPgFault, HierPgMajFault uint64
	// OOMKills counts the processes the OOM killer killed in the cgroup.
	OOMKills uint64
}

// SpecSample is a cgroup's limits: cpu period and quota in microseconds
// (quota 0: none), shares; memory limits in bytes, 0 when unlimited.
type SpecSample struct {
	CPUPeriod, CPUQuota, CPUShares                  uint64
	MemoryLimit, MemoryReservation, MemorySwapLimit uint64
}

// ProcessSample counts what runs in a cgroup: processes, threads (and the
// pids limit, 0 when unlimited), open file descriptors and sockets of all
// its processes, and the soft limits of its first process.
type ProcessSample struct {
	Processes, Threads, ThreadsMax, FDs, Sockets uint64
	Ulimits                                      []Ulimit
}

// Ulimit is one soft resource limit of a process; -1 is unlimited. Name is
// cadvisor's ("max_open_files").
type Ulimit struct {
	Name string
	Soft int64
}

// BlkioDevice is a cgroup's block I/O on one device: bytes and operations
// by direction (Read, Write, and on cgroup v1 also Sync, Async, Discard and
// Total, as the kernel names them).
type BlkioDevice struct {
	Major, Minor uint64
	// Device is the device's node ("/dev/vda"), "" when the machine's
	// partition table does not list it.
	Device   string
	Bytes    map[string]uint64
	Serviced map[string]uint64
}

// FsSample is a container's writable layer: the bytes it uses on the
// filesystem of Device ("" when unknown).
type FsSample struct {
	Device     string
	UsageBytes uint64
}

// InterfaceSample is one network interface's counters from
// /proc/<pid>/net/dev.
type InterfaceSample struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// Containers reads every running container of the ready pods, and each
// pod's sandbox, from their cgroups and processes: one sample each, taken
// now. The sandboxes and containers are listed from the runtime, their
// cgroups found under the pod cgroup (<pod cgroup>/<ID>, the cgroupfs
// driver's layout). A container whose cgroup cannot be read (it just
// exited, say) is left out and logged once; a failing runtime is an error.
// The samples are sorted by namespace, pod, container name and ID.
func (p *Provider) Containers(ctx context.Context) ([]ContainerSample, error) {
	rt := p.deps.Runtime
	if rt == nil {
		return nil, nil
	}
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	cstats, err := rt.ListContainerStats(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list container stats: %w", err)
	}
	layers := make(map[string]*runtimeapi.FilesystemUsage, len(cstats))
	for _, c := range cstats {
		if wl := c.GetWritableLayer(); wl != nil {
			layers[c.GetAttributes().GetId()] = wl
		}
	}
	bySandbox := map[string][]*runtimeapi.Container{}
	for _, c := range ctrs {
		bySandbox[c.PodSandboxId] = append(bySandbox[c.PodSandboxId], c)
	}

	now := time.Now()
	env := p.sampleEnv()
	var out []ContainerSample
	seen := map[string]bool{}
	for _, sb := range sandboxes {
		md := sb.GetMetadata()
		podCg := p.podCgroup(types.UID(md.GetUid()))
		base := ContainerSample{Namespace: md.GetNamespace(), Pod: md.GetName(), Time: now}
		if podCg == "" {
			p.warnOnce(seen, sb.Id, "Container metrics: the pod has no cgroup; its containers are left out", "pod", base.Namespace+"/"+base.Pod)
			continue
		}
		s := base
		s.Container, s.ID, s.Image, s.StartTime = SandboxContainerName, sb.Id, p.cfg.SandboxImage, time.Unix(0, sb.CreatedAt)
		s.Cgroup = p.containerCgroup(podCg, sb.Id)
		if err := env.read(p.cg, &s, true); err != nil {
			p.warnOnce(seen, sb.Id, "Container metrics: cannot read the pod sandbox; its series are left out", "pod", base.Namespace+"/"+base.Pod, "cgroup", s.Cgroup, "err", err)
		} else {
			out = append(out, s)
		}
		for _, c := range bySandbox[sb.Id] {
			s := base
			s.Container, s.ID, s.Image, s.StartTime = c.GetMetadata().GetName(), c.Id, c.GetImage().GetImage(), time.Unix(0, c.CreatedAt)
			s.Cgroup = p.containerCgroup(podCg, c.Id)
			if err := env.read(p.cg, &s, false); err != nil {
				p.warnOnce(seen, c.Id, "Container metrics: cannot read the container; its series are left out", "pod", base.Namespace+"/"+base.Pod, "containerName", s.Container, "cgroup", s.Cgroup, "err", err)
				continue
			}
			if wl := layers[c.Id]; wl != nil && wl.UsedBytes != nil {
				s.Fs = &FsSample{Device: p.deviceName(env, wl.GetFsId().GetMountpoint()), UsageBytes: wl.UsedBytes.Value}
			}
			out = append(out, s)
		}
	}
	p.forgetWarnings(seen)
	slices.SortFunc(out, func(a, b ContainerSample) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// cgroupNames names the pod cgroups as the Manager with the agent's driver
// and cgroupRoot makes them.
func (p *Provider) cgroupNames() cgroups.Names {
	return cgroups.Names{Driver: p.cfg.CgroupDriver, Root: p.cfg.CgroupRoot}
}

// podCgroup returns the cgroup path of the pod with uid, whichever QoS tier
// holds it; "" when none does.
func (p *Provider) podCgroup(uid types.UID) string {
	for _, cg := range p.cgroupNames().PodPaths(uid) {
		if p.cg.exists(cg) {
			return cg
		}
	}
	return ""
}

// containerCgroup is the cgroup path of the container (or sandbox) id in the
// pod cgroup podCg, where the runtime puts it under the agent's driver:
// <podCg>/<id> under cgroupfs, <podCg>/cri-containerd-<id>.scope under
// systemd (cgroups.Names.Container).
func (p *Provider) containerCgroup(podCg, id string) string {
	return p.cgroupNames().Container(podCg, id)
}

// deviceName names the block device holding path ("" when unknown).
func (p *Provider) deviceName(env *sampleEnv, path string) string {
	if p.device == nil || path == "" {
		return ""
	}
	dev, err := p.device(path)
	if err != nil {
		return ""
	}
	return env.partitions()[devNum{uint64(unix.Major(dev)), uint64(unix.Minor(dev))}]
}

// warnOnce logs msg for the container id unless it was logged for it
// before, and marks id as seen in this call.
func (p *Provider) warnOnce(seen map[string]bool, id, msg string, args ...any) {
	seen[id] = true
	p.warnMu.Lock()
	defer p.warnMu.Unlock()
	if p.warned[id] {
		return
	}
	if p.warned == nil {
		p.warned = map[string]bool{}
	}
	p.warned[id] = true
	p.log.Warn(msg, append(args, "containerID", id)...)
}

// forgetWarnings keeps the logged-once marks of the containers that failed
// again in this call only, so a container that recovers and fails later is
// logged again.
func (p *Provider) forgetWarnings(seen map[string]bool) {
	p.warnMu.Lock()
	defer p.warnMu.Unlock()
	for id := range p.warned {
		if !seen[id] {
			delete(p.warned, id)
		}
	}
}
