package stats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// Runtime is the part of the CRI the provider calls; *cri.Client and the
// cri-api fakes (runtime and image service together) satisfy it.
type Runtime interface {
	// ImageFsInfo returns the usage of the image and container filesystems.
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	// ListPodSandbox lists the sandboxes filter selects.
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	// ListContainers lists the containers filter selects.
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	// ListContainerStats returns the stats of the containers filter selects.
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
}

// Config says where the provider reads.
type Config struct {
	// ProcRoot is the proc filesystem; "" is /proc.
	ProcRoot string
	// CgroupFSRoot is where the cgroup filesystems are mounted; "" is /sys/fs/cgroup.
	CgroupFSRoot string
	// CgroupRoot is the KubeletConfiguration cgroupRoot the kubepods tree is
	// under; "" is "/".
	CgroupRoot string
	// CgroupDriver is the cgroupDriver the pod cgroups are named by:
	// "systemd", else cgroupfs (cgroups.Names).
	CgroupDriver string
	// RootDir is the agent's root directory (the kubelet's --root-dir): the
	// node filesystem is the one holding it, and emptyDir volumes are under
	// RootDir/pods/<UID>/volumes/kubernetes.io~empty-dir. Required.
	RootDir string
	// LogDir holds the pods' logs in the kubelet's layout
	// (LogDir/<namespace>_<name>_<UID>/<container>/N.log); "" is /var/log/pods.
	LogDir string
	// NodeName is reported as the Summary's node name.
	NodeName string
	// SandboxImage is the pod sandbox's image, reported as the image of
	// each pod's sandbox by Containers; "" leaves it empty.
	SandboxImage string
	// Logger receives the runtime failures Summary works around; nil discards.
	Logger *slog.Logger
}

// Deps are the provider's collaborators.
type Deps struct {
	// Runtime is the CRI runtime. Nil: no runtime filesystems and no pods.
	Runtime Runtime
	// Pods returns the agent's pods, used for their volumes; nil: none. It
	// is called once per Summary and must be safe to call from any goroutine.
	Pods func() []*v1.Pod
	// Statfs is unix.Statfs when nil; tests give fixed figures.
	Statfs func(path string, st *unix.Statfs_t) error
	// Device returns the ID of the device (filesystem) holding path. One
	// Summary statfs's each filesystem once, so that the node's, the
	// runtime's, the logs' and the volumes' figures of one filesystem are
	// equal, as the eviction manager's layout detection expects. Nil: the
	// real device (stat's st_dev) when Statfs is nil too; with Statfs given,
	// every path is taken as its own filesystem.
	Device func(path string) (uint64, error)
}

// Provider builds stats Summaries of the node it runs on. It satisfies
// eviction.StatsSource. Summary may be called from several goroutines.
type Provider struct {
	cfg    Config
	deps   Deps
	cg     cgroupReader
	log    *slog.Logger
	statfs func(string, *unix.Statfs_t) error
	device func(string) (uint64, error) // nil: by path

	mu   sync.Mutex           // guards prev
	prev map[string]cpuSample // the last cpu sample per node, pod and container, for usageNanoCores

	warnMu sync.Mutex      // guards warned
	warned map[string]bool // containers whose failed read Containers has logged, by ID
}

// cpuSample is one cumulative cpu reading.
type cpuSample struct {
	usage uint64 // ns
	at    time.Time
}

// New checks cfg and detects the cgroup layout.
func New(cfg Config, deps Deps) (*Provider, error) {
	if cfg.RootDir == "" {
		return nil, errors.New("stats: RootDir is required (the node filesystem is the one holding it)")
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.LogDir == "" {
		cfg.LogDir = "/var/log/pods"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/"
	}
	l, err := cgroups.Detect(cfg.CgroupFSRoot)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	p := &Provider{cfg: cfg, deps: deps, cg: cgroupReader{layout: l}, log: cfg.Logger, statfs: deps.Statfs, prev: map[string]cpuSample{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("subsystem", "stats")
	p.device = deps.Device
	if p.statfs == nil {
		p.statfs = unix.Statfs
		if p.device == nil {
			p.device = statDevice
		}
	}
	return p, nil
}

// summary is the state of one Summary call.
type summary struct {
	env     *sampleEnv // for the pods' network namespaces; set by runtimeStats
	now     metav1.Time
	statfs  map[string]statfsResult // by path
	byDev   map[uint64]statfsResult // by device, where known
	samples []pendingCPU
}

// statDevice is the device holding path.
func statDevice(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Dev, nil
}

// pendingCPU is a cpu reading whose usageNanoCores is filled in once every
// reading of the call is taken.
type pendingCPU struct {
	key    string
	sample cpuSample
	out    *statsapi.CPUStats
}

// Summary returns the node's stats sampled now. Node memory, cpu, the node
// filesystem and the pid figures are required: failing to read them is an
// error. A failing runtime is logged and leaves out the runtime filesystems
// and the pods; a pod whose cgroup is gone lacks its cpu and memory.
// usageNanoCores is the rate since the previous Summary, absent on the first.
func (p *Provider) Summary(ctx context.Context) (*statsapi.Summary, error) {
	return p.summary(ctx, true)
}

// NodeSummary is Summary without the pods: Node is the same (the runtime
// filesystems included), Pods is empty. It reads no pod cgroup, lists no
// container and measures no log or volume, so the eviction manager's pass
// (eviction.NodeStatsSource) costs a few files and one CRI call when it
// needs no pod's stats. The node's usageNanoCores is the rate since the
// previous Summary or NodeSummary; the pods' rates are kept for the next
// Summary.
func (p *Provider) NodeSummary(ctx context.Context) (*statsapi.Summary, error) {
	return p.summary(ctx, false)
}

// summary is Summary, with the pods or without.
func (p *Provider) summary(ctx context.Context, withPods bool) (*statsapi.Summary, error) {
	s := &summary{now: metav1.NewTime(time.Now()), statfs: map[string]statfsResult{}}
	node, err := p.nodeStats(s)
	if err != nil {
		return nil, err
	}
	out := &statsapi.Summary{Node: *node, Pods: []statsapi.PodStats{}}
	if p.deps.Runtime != nil {
		if err := p.runtimeStats(ctx, s, out, withPods); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			p.log.Warn("Runtime stats unavailable; the summary has no pods", "err", err)
		}
	}
	p.rates(s, withPods)
	return out, nil
}

// nodeStats reads the node-level figures.
func (p *Provider) nodeStats(s *summary) (*statsapi.NodeStats, error) {
	n := &statsapi.NodeStats{NodeName: p.cfg.NodeName}
	proc := p.cfg.ProcRoot
	btime, err := readBootTime(filepath.Join(proc, "stat"))
	if err != nil {
		return nil, fmt.Errorf("node start time: %w", err)
	}
	n.StartTime = metav1.NewTime(time.Unix(btime, 0))

	mi, err := readMeminfo(filepath.Join(proc, "meminfo"))
	if err != nil {
		return nil, fmt.Errorf("node memory: %w", err)
	}
	root, err := p.cg.memory("/", true)
	if err != nil {
		return nil, fmt.Errorf("node memory: %w", err)
	}
	root.limit = mi.total
	n.Memory = memoryStats(root, s.now)
	if mi.hasSwap {
		used, free := sub(mi.swapTotal, mi.swapFree), mi.swapFree
		n.Swap = &statsapi.SwapStats{Time: s.now, SwapUsageBytes: &used, SwapAvailableBytes: &free}
	}
	usage, err := p.cg.cpuUsage("/")
	if err != nil {
		return nil, fmt.Errorf("node cpu: %w", err)
	}
	n.CPU = s.cpu("node", usage, time.Now())

	// PSI, where the kernel has it: the root cgroup's on v2 (as cadvisor
	// reads the root container), <proc>/pressure (the same figures) on v1
	// and where the root cgroup lacks a file.
	psi := p.cg.psi("/")
	for _, f := range []struct {
		into **statsapi.PSIStats
		name string
	}{{&psi.CPU, "cpu"}, {&psi.Memory, "memory"}, {&psi.IO, "io"}} {
		if *f.into == nil {
			*f.into, _ = readPSI(filepath.Join(proc, "pressure", f.name))
		}
	}
	n.IO = attachPSI(n.CPU, n.Memory, psi, s.now)

	st, err := s.statErr(p, p.cfg.RootDir)
	if err != nil {
		return nil, fmt.Errorf("node filesystem: statfs %s: %w", p.cfg.RootDir, err)
	}
	n.Fs = fsStats(st, s.now)

	maxPID, err := readPIDMax(proc)
	if err != nil {
		return nil, fmt.Errorf("node pid limit: %w", err)
	}
	threads, err := readThreads(filepath.Join(proc, "loadavg"))
	if err != nil {
		return nil, fmt.Errorf("node process count: %w", err)
	}
	n.Rlimit = &statsapi.RlimitStats{Time: s.now, MaxPID: &maxPID, NumOfRunningProcesses: &threads}

	if n.Network, err = p.nodeNetwork(s); err != nil {
		p.log.Debug("Node network stats unavailable", "err", err)
	}

	if pods, ok := p.podsContainer(s, mi.total); ok {
		n.SystemContainers = []statsapi.ContainerStats{pods}
	}
	return n, nil
}

// podsContainer returns the "pods" system container: the kubepods cgroup's
// cpu and memory, its availableBytes from its memory limit (the node's
// capacity when it has none). ok is false when kubepods does not exist.
func (p *Provider) podsContainer(s *summary, capacity uint64) (statsapi.ContainerStats, bool) {
	path := p.cgroupNames().Kubepods()
	if !p.cg.exists(path) {
		return statsapi.ContainerStats{}, false
	}
	c := statsapi.ContainerStats{Name: statsapi.SystemContainerPods, StartTime: s.now}
	if m, err := p.cg.memory(path, false); err == nil {
		if m.limit == 0 || m.limit > capacity {
			m.limit = capacity
		}
		c.Memory = memoryStats(m, s.now)
	}
	if u, err := p.cg.cpuUsage(path); err == nil {
		c.CPU = s.cpu("pods", u, time.Now())
	}
	c.IO = attachPSI(c.CPU, c.Memory, p.cg.psi(path), s.now)
	return c, true
}

// attachPSI sets the cpu and memory pressure of psi on cpu and memory
// (those that are not nil), and returns the IOStats of its I/O pressure,
// stamped t; nil when psi has none.
func attachPSI(cpu *statsapi.CPUStats, memory *statsapi.MemoryStats, psi Pressure, t metav1.Time) *statsapi.IOStats {
	if cpu != nil && psi.CPU != nil {
		cpu.PSI = psi.CPU
	}
	if memory != nil && psi.Memory != nil {
		memory.PSI = psi.Memory
	}
	if psi.IO == nil {
		return nil
	}
	return &statsapi.IOStats{Time: t, PSI: psi.IO}
}

// memoryStats turns m into MemoryStats; availableBytes = limit − workingSet
// when m has a limit.
func memoryStats(m memStats, t metav1.Time) *statsapi.MemoryStats {
	out := &statsapi.MemoryStats{
		Time:            t,
		UsageBytes:      &m.usage,
		WorkingSetBytes: &m.workingSet,
		RSSBytes:        &m.rss,
		PageFaults:      &m.pageFaults,
		MajorPageFaults: &m.majorPageFaults,
	}
	if m.limit > 0 {
		avail := sub(m.limit, m.workingSet)
		out.AvailableBytes = &avail
	}
	return out
}

// cpu returns CPUStats for a cumulative usage read at, and queues the sample
// so that rates fills in usageNanoCores. at is taken right after the read,
// not at the call's start: the files read before it (meminfo, memory.stat)
// take milliseconds on a busy machine, and a rate over two close calls
// would otherwise divide one interval's usage by another's time.
func (s *summary) cpu(key string, usage uint64, at time.Time) *statsapi.CPUStats {
	out := &statsapi.CPUStats{Time: metav1.NewTime(at), UsageCoreNanoSeconds: &usage}
	s.samples = append(s.samples, pendingCPU{key: key, sample: cpuSample{usage: usage, at: at}, out: out})
	return out
}

// rates fills in usageNanoCores from the previous samples and keeps this
// call's samples for the next. A sample older than the one kept (a
// concurrent call) is neither rated nor kept. A complete call (all) keeps
// only its own samples, which forgets pods and containers that are gone;
// a partial one keeps the others' too.
func (p *Provider) rates(s *summary, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]cpuSample, len(s.samples))
	if !all {
		next = p.prev
	}
	for _, c := range s.samples {
		prev, ok := p.prev[c.key]
		if ok && !c.sample.at.After(prev.at) {
			next[c.key] = prev
			continue
		}
		next[c.key] = c.sample
		if ok && c.out.UsageNanoCores == nil && c.sample.usage >= prev.usage {
			rate := uint64(float64(c.sample.usage-prev.usage) / c.sample.at.Sub(prev.at).Seconds())
			c.out.UsageNanoCores = &rate
		}
	}
	p.prev = next
}

// stat returns the statfs of path, once per call; nil when it fails.
func (s *summary) stat(p *Provider, path string) *unix.Statfs_t {
	st, _ := s.statErr(p, path)
	return st
}

// statErr is stat with the error.
func (s *summary) statErr(p *Provider, path string) (*unix.Statfs_t, error) {
	if r, ok := s.statfs[path]; ok {
		return r.st, r.err
	}
	dev, devErr := uint64(0), errors.ErrUnsupported
	if p.device != nil {
		dev, devErr = p.device(path)
		if r, ok := s.byDev[dev]; ok && devErr == nil {
			s.statfs[path] = r
			return r.st, r.err
		}
	}
	st := new(unix.Statfs_t)
	err := p.statfs(path, st)
	if err != nil {
		st = nil
	}
	r := statfsResult{st, err}
	s.statfs[path] = r
	if devErr == nil && err == nil {
		if s.byDev == nil {
			s.byDev = map[uint64]statfsResult{}
		}
		s.byDev[dev] = r
	}
	return st, err
}

// statfsResult is one statfs call's outcome.
type statfsResult struct {
	st  *unix.Statfs_t
	err error
}

// runtimeStats adds the runtime filesystems and, withPods, the pods.
func (p *Provider) runtimeStats(ctx context.Context, s *summary, out *statsapi.Summary, withPods bool) error {
	rt := p.deps.Runtime
	info, err := rt.ImageFsInfo(ctx)
	if err != nil {
		return err
	}
	imageFs, imageSt := p.runtimeFs(s, info.GetImageFilesystems())
	containerFs, containerSt := imageFs, imageSt
	if cfs := info.GetContainerFilesystems(); len(cfs) > 0 {
		containerFs, containerSt = p.runtimeFs(s, cfs)
	}
	if imageFs != nil {
		out.Node.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: containerFs}
	}
	if !withPods {
		return nil
	}

	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return err
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return err
	}
	cstats, err := rt.ListContainerStats(ctx, nil)
	if err != nil {
		return err
	}
	byID := make(map[string]*runtimeapi.ContainerStats, len(cstats))
	for _, c := range cstats {
		byID[c.GetAttributes().GetId()] = c
	}
	specs := map[types.UID]*v1.Pod{}
	if p.deps.Pods != nil {
		for _, pod := range p.deps.Pods() {
			specs[pod.UID] = pod
		}
	}

	// The newest ready sandbox of each pod, and the newest running container
	// of each name in it.
	pods := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range sandboxes {
		uid := sb.GetMetadata().GetUid()
		if old, ok := pods[uid]; !ok || sb.CreatedAt > old.CreatedAt {
			pods[uid] = sb
		}
	}
	bySandbox := map[string]map[string]*runtimeapi.Container{}
	for _, c := range ctrs {
		m := bySandbox[c.PodSandboxId]
		if m == nil {
			m = map[string]*runtimeapi.Container{}
			bySandbox[c.PodSandboxId] = m
		}
		name := c.GetMetadata().GetName()
		if old, ok := m[name]; !ok || c.CreatedAt > old.CreatedAt {
			m[name] = c
		}
	}

	s.env = p.sampleEnv()
	logSt := s.stat(p, p.cfg.LogDir)
	if logSt == nil {
		logSt = s.stat(p, p.cfg.RootDir)
	}
	for _, sb := range pods {
		ps := p.podStats(s, sb, bySandbox[sb.Id], byID, specs[types.UID(sb.GetMetadata().GetUid())], containerSt, logSt)
		out.Pods = append(out.Pods, ps)
	}
	slices.SortFunc(out.Pods, func(a, b statsapi.PodStats) int {
		return cmp.Or(cmp.Compare(a.PodRef.Namespace, b.PodRef.Namespace), cmp.Compare(a.PodRef.Name, b.PodRef.Name), cmp.Compare(a.PodRef.UID, b.PodRef.UID))
	})
	return nil
}

// runtimeFs returns the FsStats of the first filesystem in fss: usage from
// the runtime, capacity from statfs of its mountpoint (also returned).
func (p *Provider) runtimeFs(s *summary, fss []*runtimeapi.FilesystemUsage) (*statsapi.FsStats, *unix.Statfs_t) {
	if len(fss) == 0 {
		return nil, nil
	}
	f := fss[0]
	st := s.stat(p, f.GetFsId().GetMountpoint())
	out := capacityOf(st, metav1.NewTime(time.Unix(0, f.GetTimestamp())))
	if f.UsedBytes != nil {
		v := f.UsedBytes.Value
		out.UsedBytes = &v
	}
	if f.InodesUsed != nil {
		v := f.InodesUsed.Value
		out.InodesUsed = &v
	}
	return out, st
}

// podStats builds one pod's stats.
func (p *Provider) podStats(s *summary, sb *runtimeapi.PodSandbox, ctrs map[string]*runtimeapi.Container, byID map[string]*runtimeapi.ContainerStats, spec *v1.Pod, containerSt, logSt *unix.Statfs_t) statsapi.PodStats {
	md := sb.GetMetadata()
	ps := statsapi.PodStats{
		PodRef:     statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
		StartTime:  metav1.NewTime(time.Unix(0, sb.CreatedAt)),
		Containers: []statsapi.ContainerStats{},
	}
	var used, inodesUsed uint64
	logDir := filepath.Join(p.cfg.LogDir, md.GetNamespace()+"_"+md.GetName()+"_"+md.GetUid())
	podCg := p.podCgroup(types.UID(md.GetUid()))
	for _, c := range ctrs {
		cs := statsapi.ContainerStats{Name: c.GetMetadata().GetName(), StartTime: metav1.NewTime(time.Unix(0, c.CreatedAt))}
		if st := byID[c.Id]; st != nil {
			cs.CPU = s.criCPU("ctr/"+c.Id, st.GetCpu())
			cs.Memory = criMemory(st.GetMemory())
			if podCg != "" {
				cs.IO = attachPSI(cs.CPU, cs.Memory, p.cg.psi(p.containerCgroup(podCg, c.Id)), s.now)
			}
			if wl := st.GetWritableLayer(); wl != nil {
				cs.Rootfs = capacityOf(containerSt, metav1.NewTime(time.Unix(0, wl.Timestamp)))
				if wl.UsedBytes != nil {
					v := wl.UsedBytes.Value
					cs.Rootfs.UsedBytes = &v
					used += v
				}
				if wl.InodesUsed != nil {
					v := wl.InodesUsed.Value
					cs.Rootfs.InodesUsed = &v
					inodesUsed += v
				}
			}
		}
		cs.Logs = capacityOf(logSt, s.now)
		b, n, err := du(filepath.Join(logDir, cs.Name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Debug("Container log usage unavailable", "pod", md.GetNamespace()+"/"+md.GetName(), "containerName", cs.Name, "err", err)
		}
		cs.Logs.UsedBytes, cs.Logs.InodesUsed = &b, &n
		used, inodesUsed = used+b, inodesUsed+n
		ps.Containers = append(ps.Containers, cs)
	}
	slices.SortFunc(ps.Containers, func(a, b statsapi.ContainerStats) int { return cmp.Compare(a.Name, b.Name) })

	if spec != nil {
		for _, v := range spec.Spec.Volumes {
			if v.EmptyDir == nil {
				continue
			}
			dir := filepath.Join(p.cfg.RootDir, "pods", md.GetUid(), "volumes", "kubernetes.io~empty-dir", v.Name)
			b, n, err := du(dir)
			if err != nil {
				continue
			}
			vs := statsapi.VolumeStats{Name: v.Name, FsStats: *capacityOf(s.stat(p, dir), s.now)}
			vs.UsedBytes, vs.InodesUsed = &b, &n
			ps.VolumeStats = append(ps.VolumeStats, vs)
			if v.EmptyDir.Medium != v1.StorageMediumMemory {
				used, inodesUsed = used+b, inodesUsed+n
			}
		}
	}
	eph := capacityOf(s.stat(p, p.cfg.RootDir), s.now)
	eph.UsedBytes, eph.InodesUsed = &used, &inodesUsed
	ps.EphemeralStorage = eph

	if path := podCg; path != "" {
		if m, err := p.cg.memory(path, false); err == nil {
			ps.Memory = memoryStats(m, s.now)
		}
		if u, err := p.cg.cpuUsage(path); err == nil {
			ps.CPU = s.cpu("pod/"+md.GetUid(), u, time.Now())
		}
		if n, err := p.cg.processes(path, filepath.Base(p.containerCgroup(path, sb.Id))); err == nil {
			ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: &n}
		}
		ps.IO = attachPSI(ps.CPU, ps.Memory, p.cg.psi(path), s.now)
		if s.env != nil {
			var err error
			if ps.Network, err = p.sandboxNetwork(s.env, p.containerCgroup(path, sb.Id), s); err != nil {
				p.log.Debug("Pod network stats unavailable", "pod", md.GetNamespace()+"/"+md.GetName(), "err", err)
			}
		}
	}
	return ps
}

// criCPU turns the runtime's cpu figures into CPUStats; usageNanoCores is the
// runtime's when it reports one, else the rate since the previous sample.
func (s *summary) criCPU(key string, c *runtimeapi.CpuUsage) *statsapi.CPUStats {
	if c == nil {
		return nil
	}
	at := time.Unix(0, c.Timestamp)
	if c.UsageCoreNanoSeconds == nil {
		return &statsapi.CPUStats{Time: metav1.NewTime(at)}
	}
	out := s.cpu(key, c.UsageCoreNanoSeconds.Value, at)
	if c.UsageNanoCores != nil {
		v := c.UsageNanoCores.Value
		out.UsageNanoCores = &v
	}
	return out
}

// criMemory turns the runtime's memory figures into MemoryStats.
func criMemory(m *runtimeapi.MemoryUsage) *statsapi.MemoryStats {
	if m == nil {
		return nil
	}
	out := &statsapi.MemoryStats{Time: metav1.NewTime(time.Unix(0, m.Timestamp))}
	for _, f := range []struct {
		from *runtimeapi.UInt64Value
		to   **uint64
	}{
		{m.WorkingSetBytes, &out.WorkingSetBytes},
		{m.UsageBytes, &out.UsageBytes},
		{m.RssBytes, &out.RSSBytes},
		{m.PageFaults, &out.PageFaults},
		{m.MajorPageFaults, &out.MajorPageFaults},
		{m.AvailableBytes, &out.AvailableBytes},
	} {
		if f.from != nil {
			v := f.from.Value
			*f.to = &v
		}
	}
	return out
}
