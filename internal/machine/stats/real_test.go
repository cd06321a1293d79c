package stats

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// memTotal reads MemTotal from this machine's /proc/meminfo, in bytes.
func memTotal(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// TestRealNode checks that the Summary of this machine is sane.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		integration.Require(t, "the real-node stats test needs root (cgroup files)")
	}
	rootDir := t.TempDir()
	p, err := New(Config{RootDir: rootDir, NodeName: "real"}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A measuring window, not a wait for a goroutine: the rate is checked
	// against NumCPU cores, and over a window of a few microseconds the gap
	// between reading the usage and reading the clock (a preemption on a
	// busy machine) would dominate it.
	time.Sleep(200 * time.Millisecond)
	s, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	capacity := memTotal(t)
	m := n.Memory
	if *m.WorkingSetBytes > capacity || *m.AvailableBytes+*m.WorkingSetBytes != capacity {
		t.Errorf("memory: available %d + working set %d != MemTotal %d", *m.AvailableBytes, *m.WorkingSetBytes, capacity)
	}
	if *m.UsageBytes < *m.WorkingSetBytes || *m.WorkingSetBytes == 0 {
		t.Errorf("memory: usage %d, working set %d; want 0 < working set <= usage", *m.UsageBytes, *m.WorkingSetBytes)
	}
	if f := n.Fs; *f.CapacityBytes == 0 || *f.AvailableBytes > *f.CapacityBytes || *f.UsedBytes > *f.CapacityBytes || *f.Inodes == 0 {
		t.Errorf("node fs: capacity %d, available %d, used %d, inodes %d", *f.CapacityBytes, *f.AvailableBytes, *f.UsedBytes, *f.Inodes)
	}
	if r := n.Rlimit; *r.NumOfRunningProcesses <= 0 || *r.NumOfRunningProcesses >= *r.MaxPID {
		t.Errorf("rlimit: curproc %d, maxpid %d", *r.NumOfRunningProcesses, *r.MaxPID)
	}
	if *n.CPU.UsageCoreNanoSeconds < *first.Node.CPU.UsageCoreNanoSeconds || n.CPU.UsageNanoCores == nil ||
		*n.CPU.UsageNanoCores > uint64(runtime.NumCPU())*2e9 {
		t.Errorf("cpu: usage %d then %d, nanocores %v", *first.Node.CPU.UsageCoreNanoSeconds, *n.CPU.UsageCoreNanoSeconds, n.CPU.UsageNanoCores)
	}
	if n.StartTime.IsZero() || n.StartTime.After(s.Node.CPU.Time.Time) {
		t.Errorf("node start time %v", n.StartTime)
	}
	// The root container's filesystems: the node fs (the block device
	// holding RootDir, when it is one) is among them with its statfs
	// figures; every device has done some I/O since boot.
	fss, err := p.NodeFilesystems()
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range fss {
		if fs.Capacity == 0 || fs.Usage > fs.Capacity || fs.Inodes == 0 || fs.IO.ReadsCompleted == 0 || !strings.HasPrefix(fs.Device, "/dev/") {
			t.Errorf("node filesystem %+v", fs)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(rootDir, &st); err != nil {
		t.Fatal(err)
	}
	if f := n.Fs; unix.Major(st.Dev) != 0 && !slices.ContainsFunc(fss, func(fs NodeFilesystem) bool { return fs.Capacity == *f.CapacityBytes }) {
		t.Errorf("node filesystems %+v: none of %d bytes, the node fs", fss, *f.CapacityBytes)
	}
}

// TestRealRuntime checks the runtime parts against a private containerd:
// its image filesystem, and a running pod's container stats.
func TestRealRuntime(t *testing.T) {
	ctd := containerdtest.Start(t)
	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/stats-app:1", Runnable: true, Pad: 4096})
	ctd.Import(t, app)
	pod := ctd.RunPod(t, "web", "uid-stats-1")
	ctd.CreateContainer(t, pod, "app", 0, app.Ref, nil, true)

	p, err := New(Config{RootDir: t.TempDir(), LogDir: t.TempDir(), NodeName: "real", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))},
		Deps{Runtime: ctd.CRI})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// containerd refreshes snapshot usage periodically (every 10 s in 1.6), so
	// used bytes may still be 0 this early: only their presence is checked.
	rt := s.Node.Runtime
	if rt == nil || rt.ImageFs == nil || rt.ImageFs.CapacityBytes == nil || *rt.ImageFs.CapacityBytes == 0 || rt.ImageFs.UsedBytes == nil || rt.ImageFs.InodesUsed == nil {
		t.Fatalf("runtime image fs: %+v", rt.ImageFs)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1: %+v", len(s.Pods), s.Pods)
	}
	ps := s.Pods[0]
	if ps.PodRef.UID != "uid-stats-1" || ps.PodRef.Name != "web" || ps.PodRef.Namespace != "default" || ps.StartTime.IsZero() {
		t.Errorf("pod ref %+v, start %v", ps.PodRef, ps.StartTime)
	}
	if len(ps.Containers) != 1 || ps.Containers[0].Name != "app" {
		t.Fatalf("containers %+v, want app", ps.Containers)
	}
	c := ps.Containers[0]
	if c.CPU == nil || c.CPU.UsageCoreNanoSeconds == nil || c.Memory == nil || c.Memory.WorkingSetBytes == nil || *c.Memory.WorkingSetBytes == 0 {
		t.Errorf("container cpu %+v, memory %+v", c.CPU, c.Memory)
	}
	if c.Rootfs == nil || c.Rootfs.UsedBytes == nil || c.Rootfs.CapacityBytes == nil || *c.Rootfs.CapacityBytes != *rt.ContainerFs.CapacityBytes {
		t.Errorf("container rootfs %+v", c.Rootfs)
	}
	if e := ps.EphemeralStorage; e == nil || e.UsedBytes == nil || *e.UsedBytes != *c.Rootfs.UsedBytes+*c.Logs.UsedBytes {
		t.Errorf("ephemeral storage %+v, want rootfs + logs", e)
	}
}

// TestRealPodCgroup runs a pod sandbox and container in a pod cgroup made by
// internal/machine/cgroups under a root of the test's own, and checks the pod's
// cgroup figures: the cgroupParent EnsurePod returns is the one runc takes.
func TestRealPodCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		integration.Require(t, "the pod cgroup test needs root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	m, err := cgroups.New(cgroups.Config{CgroupRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	uid := "uid-stats-2"
	// Registered before containerd starts, so it runs after containerd's
	// cleanup has removed the pod.
	t.Cleanup(func() {
		if err := m.RemovePod(types.UID(uid)); err != nil {
			t.Errorf("remove pod cgroup: %v", err)
		}
		removeCgroupRoot(t, m.Layout(), root)
	})
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	parent, err := m.EnsurePod(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "guaranteed", Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}

	ctd := containerdtest.Start(t)
	app := ctd.Build(t, containerdtest.Image{Ref: "docker.io/nodekeeper/stats-app:2", Runnable: true})
	ctd.Import(t, app)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "guaranteed", Uid: uid, Namespace: "default"},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: parent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	id, err := ctd.CRI.RunPodSandbox(t.Context(), cfg, "")
	if err != nil {
		t.Fatalf("run pod: %v\n%s", err, ctd.Log())
	}
	ctd.CreateContainer(t, containerdtest.Pod{ID: id, Config: cfg}, "app", 0, app.Ref, nil, true)

	p, err := New(Config{RootDir: t.TempDir(), LogDir: t.TempDir(), CgroupRoot: root}, Deps{Runtime: ctd.CRI})
	if err != nil {
		t.Fatal(err)
	}
	// The pod's figures against its cgroup's files, read just before and
	// after the Summary (its processes are idle: see memTolerance).
	f := cgroupFiles{t, m.Layout()}
	v2 := m.Layout().Version == cgroups.V2
	type snap struct{ cpu, usage, inactive, rss, psi uint64 }
	read := func() (s snap) {
		s.cpu = f.cpuUsage(parent)
		s.usage, s.inactive, s.rss, _, _ = f.memory(parent)
		if v2 {
			s.psi = f.psiTotal(parent, "memory.pressure", "some")
		}
		return s
	}
	before := read()
	s, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	after := read()
	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(s.Pods))
	}
	ps := s.Pods[0]
	if ps.CPU == nil || ps.Memory == nil || ps.Memory.AvailableBytes == nil || ps.ProcessStats == nil {
		t.Fatalf("pod cgroup stats missing: cpu %+v, memory %+v, processes %+v", ps.CPU, ps.Memory, ps.ProcessStats)
	}
	within(t, "pod cpu", *ps.CPU.UsageCoreNanoSeconds, before.cpu, after.cpu, 0)
	within(t, "pod memory usage", *ps.Memory.UsageBytes, before.usage, after.usage, memTolerance)
	within(t, "pod working set", *ps.Memory.WorkingSetBytes, sub(before.usage, before.inactive), sub(after.usage, after.inactive), memTolerance)
	within(t, "pod rss", *ps.Memory.RSSBytes, before.rss, after.rss, memTolerance)
	if len(ps.Containers) != 1 {
		t.Fatalf("pod containers %+v, want app", ps.Containers)
	}
	if c := ps.Containers[0]; v2 {
		// cgroup v2: PSI of the pod and of its container (its cgroup under
		// the pod's, as runc made it).
		if ps.Memory.PSI == nil || ps.CPU.PSI == nil || ps.IO == nil || c.CPU == nil || c.CPU.PSI == nil || c.Memory == nil || c.Memory.PSI == nil || c.IO == nil {
			t.Errorf("v2 psi: pod cpu %+v, memory %+v, io %+v; container %+v", ps.CPU.PSI, ps.Memory.PSI, ps.IO, c)
		} else {
			within(t, "pod memory psi some total", ps.Memory.PSI.Some.Total, before.psi, after.psi, 0)
		}
	} else if ps.CPU.PSI != nil || ps.Memory.PSI != nil || ps.IO != nil || (c.CPU != nil && c.CPU.PSI != nil) || c.IO != nil {
		t.Errorf("psi on cgroup v1: pod cpu %+v, memory %+v, io %+v; container %+v", ps.CPU.PSI, ps.Memory.PSI, ps.IO, c)
	}
	if *ps.Memory.AvailableBytes+*ps.Memory.WorkingSetBytes != 64<<20 || *ps.Memory.WorkingSetBytes == 0 {
		t.Errorf("pod memory: available %d + working set %d, want the 64 MiB limit", *ps.Memory.AvailableBytes, *ps.Memory.WorkingSetBytes)
	}
	if *ps.ProcessStats.ProcessCount != 1 {
		t.Errorf("pod processes %d, want 1: the app's, not the sandbox's pause", *ps.ProcessStats.ProcessCount)
	}
	if s.Node.SystemContainers[0].Name != "pods" || s.Node.SystemContainers[0].Memory.WorkingSetBytes == nil {
		t.Errorf("system containers %+v, want pods", s.Node.SystemContainers)
	}

	// The per-container figures (/metrics/cadvisor) of the same pod, from the
	// cgroups runc made under the pod's: the sandbox's pause and the app.
	samples, err := p.Containers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2 || samples[0].Container != SandboxContainerName || samples[1].Container != "app" {
		t.Fatalf("container samples %+v, want the sandbox and app", samples)
	}
	for _, c := range samples {
		if c.Cgroup != parent+"/"+c.ID {
			t.Errorf("%s: cgroup %s, want %s/<ID>", c.Container, c.Cgroup, parent)
		}
		if (c.PSI.CPU != nil && c.PSI.Memory != nil && c.PSI.IO != nil) != v2 || (!v2 && c.PSI != Pressure{}) {
			t.Errorf("%s: psi %+v on cgroup v%d, want cpu, memory and io on v2 alone", c.Container, c.PSI, m.Layout().Version)
		}
		if c.Memory.WorkingSet == 0 || c.Memory.Usage < c.Memory.WorkingSet || c.CPU.Usage == 0 || c.Procs.Processes != 1 || c.Procs.Threads == 0 || c.Procs.FDs == 0 {
			t.Errorf("%s: memory %+v, cpu %+v, processes %+v", c.Container, c.Memory, c.CPU, c.Procs)
		}
		if len(c.Procs.Ulimits) != 1 || c.Procs.Ulimits[0].Soft == 0 {
			t.Errorf("%s: ulimits %+v, want max_open_files", c.Container, c.Procs.Ulimits)
		}
		if c.Spec.CPUPeriod == 0 || c.Spec.CPUShares == 0 {
			t.Errorf("%s: spec %+v", c.Container, c.Spec)
		}
	}
	// The sandbox is in the node's network namespace: no interfaces of its own.
	if samples[0].Network != nil {
		t.Errorf("sandbox interfaces %+v, want none (host network)", samples[0].Network)
	}
}

// removeCgroupRoot removes the test's cgroup root, and only it, from every
// hierarchy, children first.
func removeCgroupRoot(t *testing.T, l cgroups.Layout, root string) {
	tops := l.Hierarchies()
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(top, root), func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil {
				t.Errorf("remove test cgroup %s: %v", dirs[i], err)
			}
		}
	}
}

// BenchmarkSummaryRealNode times one Summary of this machine without pods.
func BenchmarkSummaryRealNode(b *testing.B) {
	p, err := New(Config{RootDir: b.TempDir()}, Deps{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Summary(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
