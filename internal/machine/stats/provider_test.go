package stats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/internal/machine/cri"
)

// The provider satisfies the consumers' interfaces, and the real client and
// the cri-api fakes satisfy the provider's.
var (
	_ eviction.StatsSource     = (*Provider)(nil)
	_ eviction.NodeStatsSource = (*Provider)(nil)
	_ Runtime                  = (*cri.Client)(nil)
	_ Runtime                  = fakeRuntime{}
)

// fakeRuntime joins the cri-api fakes of the runtime and image services.
type fakeRuntime struct {
	*apitest.FakeRuntimeService
	*apitest.FakeImageService
}

func u(v uint64) *uint64 { return &v }
func i(v int64) *int64   { return &v }

var (
	// capacity 4096000000, available 1433600000, used 2457600000; inodes 65536, free 60000
	rootStatfs = unix.Statfs_t{Bsize: 4096, Blocks: 1000000, Bfree: 400000, Bavail: 350000, Files: 65536, Ffree: 60000}
	// capacity 8192000000, available 3686400000; inodes 131072, free 100000
	imageStatfs = unix.Statfs_t{Bsize: 4096, Blocks: 2000000, Bfree: 1000000, Bavail: 900000, Files: 131072, Ffree: 100000}
	// capacity 409600000, available 204800000; inodes 1000, free 900
	logStatfs = unix.Statfs_t{Bsize: 4096, Blocks: 100000, Bfree: 60000, Bavail: 50000, Files: 1000, Ffree: 900}
)

// statfsByPrefix answers statfs from the entry whose key is the longest
// prefix of the path; ENOENT when none is.
func statfsByPrefix(m map[string]unix.Statfs_t) func(string, *unix.Statfs_t) error {
	return func(path string, st *unix.Statfs_t) error {
		best := ""
		for k := range m {
			if (path == k || strings.HasPrefix(path, k+"/")) && len(k) > len(best) {
				best = k
			}
		}
		if best == "" {
			return syscall.ENOENT
		}
		*st = m[best]
		return nil
	}
}

func rootFs(t metav1.Time) *statsapi.FsStats {
	return &statsapi.FsStats{Time: t, CapacityBytes: u(4096000000), AvailableBytes: u(1433600000), UsedBytes: u(2457600000), Inodes: u(65536), InodesFree: u(60000), InodesUsed: u(5536)}
}

var (
	psiCPU = &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 2, Avg60: 1, Avg300: 0.5, Total: 111}}
	psiMem = &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 1.5, Avg60: 0.75, Avg300: 0.1, Total: 12345}, Full: statsapi.PSIData{Avg10: 0.5, Avg60: 0.25, Avg300: 0.05, Total: 6789}}
	psiIO  = &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 0.1, Avg60: 0.2, Avg300: 0.3, Total: 400}, Full: statsapi.PSIData{Avg10: 0.05, Avg60: 0.1, Avg300: 0.15, Total: 200}}
)

// t0 is synctest's epoch, the time.Now of a bubble at its start: the tests
// that compare the samples' times run in a bubble (synctest.Test).
var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// TestNodeStats checks every node figure computed from the v1 and v2
// fixtures (no runtime); v1 has no <proc>/net/dev, so no network.
func TestNodeStats(t *testing.T) {
	t.Parallel()
	now := metav1.NewTime(t0)
	tests := []struct {
		name string
		dir  string
		want statsapi.NodeStats
	}{
		{
			// v1: working set = memory.usage_in_bytes 2e9 − total_inactive_file 5e8;
			// available = MemTotal 4000000 kB − working set; rss = total_rss;
			// page faults = pgfault, pgmajfault (not the total_ ones).
			name: "v1", dir: "testdata/v1",
			want: statsapi.NodeStats{
				NodeName:  "n1",
				StartTime: metav1.NewTime(time.Unix(1700000000, 0)),
				CPU:       &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(5000000000000), PSI: psiCPU},
				Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(4096000000 - 1500000000), UsageBytes: u(2000000000), WorkingSetBytes: u(1500000000),
					RSSBytes: u(1200000000), PageFaults: u(1000), MajorPageFaults: u(10), PSI: psiMem},
				IO:     &statsapi.IOStats{Time: now, PSI: psiIO},
				Fs:     rootFs(now),
				Rlimit: &statsapi.RlimitStats{Time: now, MaxPID: i(63000), NumOfRunningProcesses: i(345)},
				Swap:   &statsapi.SwapStats{Time: now, SwapAvailableBytes: u(0), SwapUsageBytes: u(0)},
				SystemContainers: []statsapi.ContainerStats{{
					Name: "pods", StartTime: now,
					CPU: &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(3000000000000)},
					// kubepods has no limit: available = capacity − working set (8e8 − 1e8).
					Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(4096000000 - 700000000), UsageBytes: u(800000000), WorkingSetBytes: u(700000000),
						RSSBytes: u(600000000), PageFaults: u(5), MajorPageFaults: u(1)},
				}},
			},
		},
		{
			// v2 root: usage = anon 1e9 + file 9e8 of memory.stat; working set =
			// usage − inactive_file 4e8; cpu = cpu.stat usage_usec × 1000; PSI
			// from the root cgroup's cpu.pressure and memory.pressure, and
			// from /proc/pressure/io for the io.pressure it lacks.
			name: "v2", dir: "testdata/v2",
			want: statsapi.NodeStats{
				NodeName:  "n1",
				StartTime: metav1.NewTime(time.Unix(1700000000, 0)),
				CPU: &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(7000000000000),
					PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 4, Avg60: 2, Avg300: 1, Total: 222}}},
				Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(8192000000 - 1500000000), UsageBytes: u(1900000000), WorkingSetBytes: u(1500000000),
					RSSBytes: u(1000000000), PageFaults: u(2000), MajorPageFaults: u(20),
					PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 3, Avg60: 1.5, Avg300: 0.2, Total: 23456}, Full: statsapi.PSIData{Avg10: 1, Avg60: 0.5, Avg300: 0.1, Total: 7890}}},
				IO:     &statsapi.IOStats{Time: now, PSI: psiIO},
				Fs:     rootFs(now),
				Rlimit: &statsapi.RlimitStats{Time: now, MaxPID: i(63000), NumOfRunningProcesses: i(345)},
				// <proc>/net/dev less lo and the veth; no eth0 to give inline.
				Network: &statsapi.NetworkStats{Time: now, Interfaces: []statsapi.InterfaceStats{
					{Name: "cni0", RxBytes: u(4096), RxErrors: u(0), TxBytes: u(8192), TxErrors: u(1)},
					{Name: "ens3", RxBytes: u(123456789), RxErrors: u(2), TxBytes: u(87654321), TxErrors: u(4)},
				}},
				Swap: &statsapi.SwapStats{Time: now, SwapAvailableBytes: u(524288 * 1024), SwapUsageBytes: u(524288 * 1024)},
				// kubepods' pressure files.
				SystemContainers: []statsapi.ContainerStats{{
					Name: "pods", StartTime: now,
					CPU: &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(3000000000),
						PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 1, Avg60: 0.5, Avg300: 0.25, Total: 55}}},
					Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(8192000000 - 100000000), UsageBytes: u(150000000), WorkingSetBytes: u(100000000),
						RSSBytes: u(80000000), PageFaults: u(4), MajorPageFaults: u(0),
						PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 0.5, Avg60: 0.25, Avg300: 0.05, Total: 6000}, Full: statsapi.PSIData{Avg10: 0.25, Avg60: 0.1, Avg300: 0.01, Total: 3000}}},
					IO: &statsapi.IOStats{Time: now, PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 0.05, Avg60: 0.1, Avg300: 0.15, Total: 200}, Full: statsapi.PSIData{Avg10: 0.01, Avg60: 0.02, Avg300: 0.03, Total: 100}}},
				}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p, err := New(Config{ProcRoot: tc.dir + "/proc", CgroupFSRoot: tc.dir + "/cgroup", RootDir: "/root", NodeName: "n1"},
					Deps{Statfs: statfsByPrefix(map[string]unix.Statfs_t{"/root": rootStatfs})})
				if err != nil {
					t.Fatal(err)
				}
				got, err := p.Summary(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got.Node); diff != "" {
					t.Errorf("node stats (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]statsapi.PodStats{}, got.Pods); diff != "" {
					t.Errorf("pods without a runtime (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// mkfile writes size bytes at p and returns the disk usage du counts for it.
func mkfile(t testing.TB, p string, size int) uint64 {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return blocks(t, p)
}

// blocks is the st_blocks × 512 of p.
func blocks(t testing.TB, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

// podFixture is a node with one pod (uid 1111, v1 fixture cgroups) running
// container "app" (with runtime stats) and "sidecar" (without), an exited
// older "app", a stale not-ready sandbox, logs and two emptyDir volumes.
type podFixture struct {
	rt                           fakeRuntime
	rootDir, logDir              string
	appLogs, cacheVol, memVol    uint64 // du bytes
	appLogInodes, cacheVolInodes uint64
	pods                         []*v1.Pod
	sandboxCreated, appCreated   int64
	sidecarCreated, statsTaken   int64
	imageFsTaken                 int64
	appCPU                       uint64
	statfs                       func(string, *unix.Statfs_t) error
}

func newPodFixture(t testing.TB) *podFixture {
	t.Helper()
	f := &podFixture{rootDir: t.TempDir(), logDir: t.TempDir(),
		sandboxCreated: 1700000100e9, appCreated: 1700000200e9, sidecarCreated: 1700000250e9, statsTaken: 1700000300e9, imageFsTaken: 1700000400e9, appCPU: 500}
	f.rt = fakeRuntime{apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()}
	md := &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "1111"}
	f.rt.SetFakeSandboxes([]*apitest.FakePodSandbox{
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb1", Metadata: md, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: f.sandboxCreated}},
		{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb0", Metadata: md, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: 1}},
	})
	f.rt.SetFakeContainers([]*apitest.FakeContainer{
		{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 1}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: f.appCreated}},
		{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{Id: "c0", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_EXITED, CreatedAt: 2}},
		{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{Id: "c2", Metadata: &runtimeapi.ContainerMetadata{Name: "sidecar"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: f.sidecarCreated}},
	})
	f.setAppStats()
	f.rt.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{Timestamp: f.imageFsTaken, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/img"}, UsedBytes: &runtimeapi.UInt64Value{Value: 1e9}, InodesUsed: &runtimeapi.UInt64Value{Value: 1000}}})

	appDir := filepath.Join(f.logDir, "default_web_1111", "app")
	f.appLogs = mkfile(t, filepath.Join(appDir, "1.log"), 10000) + blocks(t, appDir)
	f.appLogInodes = 2
	vols := filepath.Join(f.rootDir, "pods", "1111", "volumes", "kubernetes.io~empty-dir")
	f.cacheVol = mkfile(t, filepath.Join(vols, "cache", "a", "f"), 5000) + blocks(t, filepath.Join(vols, "cache", "a")) + blocks(t, filepath.Join(vols, "cache"))
	f.cacheVolInodes = 3
	f.memVol = mkfile(t, filepath.Join(vols, "mem", "f"), 100) + blocks(t, filepath.Join(vols, "mem"))
	f.pods = []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "1111"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}},
		}},
	}}
	f.statfs = statfsByPrefix(map[string]unix.Statfs_t{f.rootDir: rootStatfs, f.logDir: logStatfs, "/img": imageStatfs})
	return f
}

func (f *podFixture) setAppStats() {
	f.rt.SetFakeContainerStats([]*runtimeapi.ContainerStats{{
		Attributes: &runtimeapi.ContainerAttributes{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 1}},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: f.statsTaken, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: f.appCPU}},
		Memory: &runtimeapi.MemoryUsage{Timestamp: f.statsTaken, WorkingSetBytes: &runtimeapi.UInt64Value{Value: 4096}, UsageBytes: &runtimeapi.UInt64Value{Value: 8192},
			RssBytes: &runtimeapi.UInt64Value{Value: 2048}, PageFaults: &runtimeapi.UInt64Value{Value: 1}, MajorPageFaults: &runtimeapi.UInt64Value{Value: 0}},
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: f.statsTaken, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/img"},
			UsedBytes: &runtimeapi.UInt64Value{Value: 4096}, InodesUsed: &runtimeapi.UInt64Value{Value: 3}},
	}})
}

func (f *podFixture) provider(t *testing.T, dir string) *Provider {
	t.Helper()
	p, err := New(Config{ProcRoot: dir + "/proc", CgroupFSRoot: dir + "/cgroup", RootDir: f.rootDir, LogDir: f.logDir, NodeName: "n1"},
		Deps{Runtime: f.rt, Pods: func() []*v1.Pod { return f.pods }, Statfs: f.statfs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodStats checks every figure of a pod: cpu, memory and processes from
// the pod cgroup, containers from the runtime (newest running one per name),
// logs and emptyDir volumes from disk, ephemeral storage as their sum.
func TestPodStats(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newPodFixture(t)
		now := metav1.NewTime(t0)
		p := f.provider(t, "testdata/v1")
		got, err := p.Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		statsAt := metav1.NewTime(time.Unix(0, f.statsTaken))
		imageFs := &statsapi.FsStats{Time: metav1.NewTime(time.Unix(0, f.imageFsTaken)), CapacityBytes: u(8192000000), AvailableBytes: u(3686400000), Inodes: u(131072), InodesFree: u(100000), UsedBytes: u(1e9), InodesUsed: u(1000)}
		if diff := cmp.Diff(&statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs}, got.Node.Runtime); diff != "" {
			t.Errorf("runtime filesystems (-want +got):\n%s", diff)
		}
		logs := func(used, inodes uint64) *statsapi.FsStats {
			return &statsapi.FsStats{Time: now, CapacityBytes: u(409600000), AvailableBytes: u(204800000), Inodes: u(1000), InodesFree: u(900), UsedBytes: u(used), InodesUsed: u(inodes)}
		}
		onRoot := func(used, inodes uint64) statsapi.FsStats {
			return statsapi.FsStats{Time: now, CapacityBytes: u(4096000000), AvailableBytes: u(1433600000), Inodes: u(65536), InodesFree: u(60000), UsedBytes: u(used), InodesUsed: u(inodes)}
		}
		eph := onRoot(4096+f.appLogs+f.cacheVol, 3+f.appLogInodes+f.cacheVolInodes)
		want := []statsapi.PodStats{{
			PodRef:    statsapi.PodReference{Name: "web", Namespace: "default", UID: "1111"},
			StartTime: metav1.NewTime(time.Unix(0, f.sandboxCreated)),
			Containers: []statsapi.ContainerStats{
				{
					Name: "app", StartTime: metav1.NewTime(time.Unix(0, f.appCreated)),
					CPU:    &statsapi.CPUStats{Time: statsAt, UsageCoreNanoSeconds: u(500)},
					Memory: &statsapi.MemoryStats{Time: statsAt, WorkingSetBytes: u(4096), UsageBytes: u(8192), RSSBytes: u(2048), PageFaults: u(1), MajorPageFaults: u(0)},
					Rootfs: &statsapi.FsStats{Time: statsAt, CapacityBytes: u(8192000000), AvailableBytes: u(3686400000), Inodes: u(131072), InodesFree: u(100000), UsedBytes: u(4096), InodesUsed: u(3)},
					Logs:   logs(f.appLogs, f.appLogInodes),
				},
				{Name: "sidecar", StartTime: metav1.NewTime(time.Unix(0, f.sidecarCreated)), Logs: logs(0, 0)},
			},
			// pod cgroup kubepods/burstable/pod1111: working set 3e8 − 5e7; limit 512 MiB.
			CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(1000000000)},
			Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(536870912 - 250000000), UsageBytes: u(300000000), WorkingSetBytes: u(250000000), RSSBytes: u(200000000), PageFaults: u(7), MajorPageFaults: u(2)},
			VolumeStats: []statsapi.VolumeStats{
				{Name: "cache", FsStats: onRoot(f.cacheVol, f.cacheVolInodes)},
				{Name: "mem", FsStats: onRoot(f.memVol, 2)},
			},
			EphemeralStorage: &eph,
			ProcessStats:     &statsapi.ProcessStats{ProcessCount: u(3)}, // c1 2, c2 1; not the sandbox sb1
		}}
		if diff := cmp.Diff(want, got.Pods); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
	})
}

// TestUsageNanoCores checks the cpu rates between two Summaries: node and pod
// from the cgroup counters over the clock's step, a container from the
// runtime's counter over its timestamps; none on the first Summary.
func TestUsageNanoCores(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS("testdata/v1")); err != nil {
			t.Fatal(err)
		}
		f := newPodFixture(t)
		p := f.provider(t, dir)
		first, err := p.Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		rates := func(s *statsapi.Summary) []*uint64 {
			return []*uint64{s.Node.CPU.UsageNanoCores, s.Node.SystemContainers[0].CPU.UsageNanoCores, s.Pods[0].CPU.UsageNanoCores, s.Pods[0].Containers[0].CPU.UsageNanoCores}
		}
		if diff := cmp.Diff([]*uint64{nil, nil, nil, nil}, rates(first)); diff != "" {
			t.Errorf("first usageNanoCores (-want +got):\n%s", diff)
		}

		time.Sleep(10 * time.Second)
		for file, v := range map[string]string{
			"cgroup/cpuacct/cpuacct.usage":                            "5020000000000", // +20 s of cpu in 10 s
			"cgroup/cpuacct/kubepods/cpuacct.usage":                   "3005000000000", // +5 s
			"cgroup/cpuacct/kubepods/burstable/pod1111/cpuacct.usage": "2000000000",    // +1 s
		} {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f.statsTaken += 4e9 // the runtime sampled 4 s later, 1 s of cpu more
		f.appCPU += 1e9
		f.setAppStats()
		second, err := p.Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]*uint64{u(2e9), u(5e8), u(1e8), u(25e7)}, rates(second)); diff != "" {
			t.Errorf("second usageNanoCores (-want +got):\n%s", diff)
		}
	})
}

// TestRuntimeDown checks that a failing runtime leaves the node stats and
// drops only the runtime filesystems and the pods.
func TestRuntimeDown(t *testing.T) {
	t.Parallel()
	f := newPodFixture(t)
	f.rt.FakeRuntimeService.InjectError("ListPodSandbox", errors.New("connection refused"))
	got, err := f.provider(t, "testdata/v2").Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.Node.Memory == nil || len(got.Pods) != 0 {
		t.Errorf("summary with the runtime down: node memory %v, %d pods; want node memory and no pods", got.Node.Memory, len(got.Pods))
	}
}

// TestSummaryErrors checks the one-line errors for unreadable node figures.
func TestSummaryErrors(t *testing.T) {
	t.Parallel()
	broken := func(t *testing.T, file, content string) string {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS("testdata/v1")); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, file)
		if content == "" {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tests := []struct {
		name, file, content, want string
	}{
		{"bad meminfo value", "proc/meminfo", "MemTotal: lots kB\n", `proc/meminfo: field MemTotal: value "lots" is not a number`},
		{"no MemTotal", "proc/meminfo", "MemFree: 1 kB\n", "proc/meminfo: no MemTotal field"},
		{"bad memory.stat", "cgroup/memory/memory.stat", "total_rss x\n", `cgroup/memory/memory.stat: field total_rss: value "x" is not a number`},
		{"bad cpuacct.usage", "cgroup/cpuacct/cpuacct.usage", "-1\n", `cgroup/cpuacct/cpuacct.usage: value "-1" is not a number`},
		{"bad loadavg", "proc/loadavg", "0.1 0.2 0.3 12 99\n", `proc/loadavg: field 4: value "12" is not running/total`},
		{"no pid_max", "proc/sys/kernel/pid_max", "", "node pid limit: open"},
		{"no btime", "proc/stat", "cpu 1\n", "proc/stat: no btime field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := broken(t, tc.file, tc.content)
			p, err := New(Config{ProcRoot: dir + "/proc", CgroupFSRoot: dir + "/cgroup", RootDir: "/root"},
				Deps{Statfs: statfsByPrefix(map[string]unix.Statfs_t{"/root": rootStatfs})})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Summary(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Summary: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	p, err := New(Config{ProcRoot: "testdata/v1/proc", CgroupFSRoot: "testdata/v1/cgroup", RootDir: "/nonexistent"},
		Deps{Statfs: statfsByPrefix(map[string]unix.Statfs_t{"/root": rootStatfs})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Summary(context.Background()); err == nil || !strings.Contains(err.Error(), "node filesystem: statfs /nonexistent") {
		t.Errorf("Summary with RootDir missing: %v, want a statfs error naming it", err)
	}
	if _, err := New(Config{}, Deps{}); err == nil || !strings.Contains(err.Error(), "RootDir is required") {
		t.Errorf("New without RootDir: %v", err)
	}
}

// BenchmarkSummary times one Summary of the v1 fixture node without pods.
func BenchmarkSummary(b *testing.B) {
	p, err := New(Config{ProcRoot: "testdata/v1/proc", CgroupFSRoot: "testdata/v1/cgroup", RootDir: "/root"},
		Deps{Statfs: statfsByPrefix(map[string]unix.Statfs_t{"/root": rootStatfs})})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Summary(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConcurrentSummaries runs Summaries at once (the eviction loop and
// /stats/summary do), for the race detector.
func TestConcurrentSummaries(t *testing.T) {
	t.Parallel()
	f := newPodFixture(t)
	p := f.provider(t, "testdata/v2")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := p.Summary(t.Context())
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkSummaryPod times one Summary of the v1 fixture node with one pod
// of two containers from a fake runtime (logs and emptyDir volumes on disk).
func BenchmarkSummaryPod(b *testing.B) {
	f := newPodFixture(b)
	p, err := New(Config{ProcRoot: "testdata/v1/proc", CgroupFSRoot: "testdata/v1/cgroup", RootDir: f.rootDir, LogDir: f.logDir},
		Deps{Runtime: f.rt, Pods: func() []*v1.Pod { return f.pods }, Statfs: f.statfs})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Summary(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSummaryPodV2 times one Summary of the v2 fixture node with one
// Guaranteed pod (kubepods/pod2222) of one container.
func BenchmarkSummaryPodV2(b *testing.B) {
	f := newPodFixture(b)
	f.rt.SetFakeSandboxes([]*apitest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "sb2", Metadata: &runtimeapi.PodSandboxMetadata{Name: "db", Namespace: "prod", Uid: "2222"}, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: f.sandboxCreated}}})
	f.rt.SetFakeContainers([]*apitest.FakeContainer{{SandboxID: "sb2", ContainerStatus: runtimeapi.ContainerStatus{Id: "c3",
		Metadata: &runtimeapi.ContainerMetadata{Name: "db"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: f.appCreated}}})
	p, err := New(Config{ProcRoot: "testdata/v2/proc", CgroupFSRoot: "testdata/v2/cgroup", RootDir: f.rootDir, LogDir: f.logDir},
		Deps{Runtime: f.rt, Statfs: f.statfs})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Summary(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPodCgroupV2 checks the pod figures read from a v2 pod cgroup
// (Guaranteed, kubepods/pod2222): memory.current, memory.max, memory.stat,
// cpu.stat, cgroup.procs and the pressure files; and its container's
// pressure, from the pressure files of its cgroup (pod2222/c3), beside the
// runtime's cpu and memory figures.
func TestPodCgroupV2(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newPodFixture(t)
		f.rt.SetFakeSandboxes([]*apitest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
			Id: "sb2", Metadata: &runtimeapi.PodSandboxMetadata{Name: "db", Namespace: "prod", Uid: "2222"}, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: f.sandboxCreated}}})
		f.rt.SetFakeContainers([]*apitest.FakeContainer{{SandboxID: "sb2", ContainerStatus: runtimeapi.ContainerStatus{Id: "c3",
			Metadata: &runtimeapi.ContainerMetadata{Name: "db"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: f.appCreated}}})
		f.rt.SetFakeContainerStats([]*runtimeapi.ContainerStats{{
			Attributes: &runtimeapi.ContainerAttributes{Id: "c3", Metadata: &runtimeapi.ContainerMetadata{Name: "db"}},
			Cpu:        &runtimeapi.CpuUsage{Timestamp: f.statsTaken, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 700}},
			Memory:     &runtimeapi.MemoryUsage{Timestamp: f.statsTaken, WorkingSetBytes: &runtimeapi.UInt64Value{Value: 4096}},
		}})
		got, err := f.provider(t, "testdata/v2").Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Pods) != 1 {
			t.Fatalf("%d pods, want 1", len(got.Pods))
		}
		now := metav1.NewTime(t0)
		ps := got.Pods[0]
		type podCgroup struct {
			CPU       *statsapi.CPUStats
			Memory    *statsapi.MemoryStats
			IO        *statsapi.IOStats
			Processes *statsapi.ProcessStats
		}
		want := podCgroup{
			CPU: &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u(2000000000), PSI: psiCPU},
			// working set = memory.current 1e8 − inactive_file 3e7; limit memory.max 200 MiB.
			Memory: &statsapi.MemoryStats{Time: now, AvailableBytes: u(209715200 - 70000000), UsageBytes: u(100000000), WorkingSetBytes: u(70000000),
				RSSBytes: u(60000000), PageFaults: u(3), MajorPageFaults: u(0), PSI: psiMem},
			IO:        &statsapi.IOStats{Time: now, PSI: psiIO},
			Processes: &statsapi.ProcessStats{ProcessCount: u(1)}, // c3; not the sandbox sb2
		}
		if diff := cmp.Diff(want, podCgroup{ps.CPU, ps.Memory, ps.IO, ps.ProcessStats}); diff != "" {
			t.Errorf("v2 pod cgroup stats (-want +got):\n%s", diff)
		}
		statsTaken := metav1.NewTime(time.Unix(0, f.statsTaken))
		wantCtr := []statsapi.ContainerStats{{
			Name: "db", StartTime: metav1.NewTime(time.Unix(0, f.appCreated)),
			CPU: &statsapi.CPUStats{Time: statsTaken, UsageCoreNanoSeconds: u(700),
				PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 12.5, Avg60: 6.25, Avg300: 1, Total: 5000000}, Full: statsapi.PSIData{Avg10: 3, Avg60: 1.5, Avg300: 0.25, Total: 1000000}}},
			Memory: &statsapi.MemoryStats{Time: statsTaken, WorkingSetBytes: u(4096),
				PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 0.4, Avg60: 0.2, Avg300: 0.05, Total: 2000}, Full: statsapi.PSIData{Avg10: 0.2, Avg60: 0.1, Avg300: 0.02, Total: 1000}}},
			IO: &statsapi.IOStats{Time: now, PSI: &statsapi.PSIStats{Some: statsapi.PSIData{Total: 300}, Full: statsapi.PSIData{Total: 100}}},
		}}
		if diff := cmp.Diff(wantCtr, ps.Containers, cmpopts.IgnoreFields(statsapi.ContainerStats{}, "Logs")); diff != "" {
			t.Errorf("v2 container stats (-want +got):\n%s", diff)
		}
	})
}

// TestPodCgroupV2Systemd: under the systemd cgroup driver the same pod
// cgroup is the slice kubepods.slice/kubepods-pod2222.slice, its containers'
// the scopes cri-containerd-<ID>.scope; the figures are the same, the
// sandbox's scope left out of the process count, and the "pods" system
// container is read from kubepods.slice.
func TestPodCgroupV2Systemd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v2")); err != nil {
		t.Fatal(err)
	}
	for _, mv := range [][2]string{
		{"cgroup/kubepods/pod2222/c3", "cgroup/kubepods/pod2222/cri-containerd-c3.scope"},
		{"cgroup/kubepods/pod2222/sb2", "cgroup/kubepods/pod2222/cri-containerd-sb2.scope"},
		{"cgroup/kubepods/pod2222", "cgroup/kubepods/kubepods-pod2222.slice"},
		{"cgroup/kubepods", "cgroup/kubepods.slice"},
	} {
		if err := os.Rename(filepath.Join(dir, mv[0]), filepath.Join(dir, mv[1])); err != nil {
			t.Fatal(err)
		}
	}
	f := newPodFixture(t)
	f.rt.SetFakeSandboxes([]*apitest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "sb2", Metadata: &runtimeapi.PodSandboxMetadata{Name: "db", Namespace: "prod", Uid: "2222"}, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: f.sandboxCreated}}})
	p, err := New(Config{ProcRoot: dir + "/proc", CgroupFSRoot: dir + "/cgroup", CgroupDriver: "systemd", RootDir: f.rootDir, LogDir: f.logDir, NodeName: "n1"},
		Deps{Runtime: f.rt, Pods: func() []*v1.Pod { return f.pods }, Statfs: f.statfs})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(got.Pods))
	}
	ps := got.Pods[0]
	if ps.Memory == nil || ps.Memory.WorkingSetBytes == nil || *ps.Memory.WorkingSetBytes != 70000000 {
		t.Errorf("pod memory %+v, want a working set of 70000000 from kubepods-pod2222.slice", ps.Memory)
	}
	if ps.CPU == nil || ps.CPU.UsageCoreNanoSeconds == nil || *ps.CPU.UsageCoreNanoSeconds != 2000000000 {
		t.Errorf("pod cpu %+v, want 2000000000 ns from kubepods-pod2222.slice", ps.CPU)
	}
	if ps.ProcessStats == nil || ps.ProcessStats.ProcessCount == nil || *ps.ProcessStats.ProcessCount != 1 {
		t.Errorf("pod processes %+v, want 1 (cri-containerd-c3.scope; not the sandbox's scope)", ps.ProcessStats)
	}
	if len(got.Node.SystemContainers) != 1 || got.Node.SystemContainers[0].Name != statsapi.SystemContainerPods {
		t.Errorf("node system containers %+v, want the pods container from kubepods.slice", got.Node.SystemContainers)
	}
}

// TestNodeSummary checks that NodeSummary is Summary's node (the runtime
// filesystems and the node's cpu rate included) without pods, asks the
// runtime nothing but ImageFsInfo, and keeps the pods' cpu samples, so the
// next Summary rates them over the time since the previous Summary.
func TestNodeSummary(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newPodFixture(t)
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS("testdata/v1")); err != nil {
			t.Fatal(err)
		}
		p, full := f.provider(t, dir), f.provider(t, dir) // full: Summary only, for comparison
		for _, pr := range []*Provider{p, full} {
			if _, err := pr.Summary(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		write := func(file, v string) {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Second)
		write("cgroup/cpuacct/cpuacct.usage", "5020000000000")                  // +20 s of cpu in 10 s
		f.rt.FakeRuntimeService.Called, f.rt.FakeImageService.Called = nil, nil // no call is in flight
		got, err := p.NodeSummary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.rt.FakeRuntimeService.AssertCalls(nil); err != nil {
			t.Errorf("runtime service: %v", err)
		}
		if diff := cmp.Diff([]string{"ImageFsInfo"}, f.rt.FakeImageService.Called); diff != "" {
			t.Errorf("image service calls (-want +got):\n%s", diff)
		}
		want, err := full.Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Node, got.Node); diff != "" {
			t.Errorf("NodeSummary's node (-Summary's +got):\n%s", diff)
		}
		if got.Node.CPU.UsageNanoCores == nil || *got.Node.CPU.UsageNanoCores != 2e9 {
			t.Errorf("node usageNanoCores %v, want 2e9", got.Node.CPU.UsageNanoCores)
		}
		if diff := cmp.Diff([]statsapi.PodStats{}, got.Pods); diff != "" {
			t.Errorf("NodeSummary's pods (-want +got):\n%s", diff)
		}

		time.Sleep(10 * time.Second)
		write("cgroup/cpuacct/kubepods/burstable/pod1111/cpuacct.usage", "2000000000") // +1 s in 20 s
		next, err := p.Summary(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := next.Pods[0].CPU.UsageNanoCores; r == nil || *r != 5e7 {
			t.Errorf("pod usageNanoCores after a NodeSummary: %v, want 5e7 (1 s of cpu over the 20 s since the last Summary)", r)
		}
	})
}

// One Summary statfs's each filesystem once: with the image filesystem's
// mountpoint on RootDir's device, the node's and the runtime's figures are
// the same sample even while the free space changes between statfs calls,
// so the eviction manager sees no dedicated image filesystem; on another
// device it does.
func TestOneStatfsPerFilesystem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		imageDev uint64
		want     eviction.DiskLayout
	}{
		{"image filesystem on the node's", 1, eviction.NoImageFs},
		{"image filesystem of its own", 2, eviction.DedicatedImageFs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newPodFixture(t)
			var calls uint64
			statfs := func(path string, st *unix.Statfs_t) error {
				*st = rootStatfs
				calls++
				st.Bavail -= calls // the free space shrinks at every call
				return nil
			}
			devs := map[string]uint64{f.rootDir: 1, f.logDir: 1, "/img": tc.imageDev}
			p, err := New(Config{ProcRoot: "testdata/v1/proc", CgroupFSRoot: "testdata/v1/cgroup", RootDir: f.rootDir, LogDir: f.logDir},
				Deps{Runtime: f.rt, Statfs: statfs,
					Device: func(path string) (uint64, error) {
						if d, ok := devs[path]; ok {
							return d, nil
						}
						return 0, os.ErrNotExist
					}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := p.NodeSummary(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got := eviction.DetectLayout(s); got != tc.want {
				t.Errorf("layout %v, want %v (node fs available %d, image fs %d)", got, tc.want, *s.Node.Fs.AvailableBytes, *s.Node.Runtime.ImageFs.AvailableBytes)
			}
		})
	}
}
