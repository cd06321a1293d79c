package stats

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// containerFixture copies testdata/containers/<version> to a temporary
// directory and adds the links a real /proc has, which the repository does
// not keep: each process's ns/net and fd entries, and self/ns/net (the
// agent's, the node's namespace).
func containerFixture(t testing.TB, version string, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata/containers", version))); err != nil {
		t.Fatal(err)
	}
	links["proc/self/ns/net"] = "net:[4026531840]"
	for name, target := range links {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// containerProvider is a provider over the fixture at dir whose runtime
// lists sandboxes and containers, whose writable layers are on device
// 254:1 (vda1 in the fixture's partitions), logging to log.
func containerProvider(t testing.TB, dir string, sandboxes []*apitest.FakePodSandbox, ctrs []*apitest.FakeContainer, stats []*runtimeapi.ContainerStats, log *bytes.Buffer) *Provider {
	t.Helper()
	rt := fakeRuntime{apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()}
	rt.SetFakeSandboxes(sandboxes)
	rt.SetFakeContainers(ctrs)
	rt.SetFakeContainerStats(stats)
	p, err := New(Config{ProcRoot: dir + "/proc", CgroupFSRoot: dir + "/cgroup", RootDir: t.TempDir(), SandboxImage: "nodekeeper.local/pause:1",
		Logger: slog.New(slog.NewTextHandler(log, nil))},
		Deps{Runtime: rt, Device: func(path string) (uint64, error) {
			if path == "/snapshots" {
				return unix.Mkdev(254, 1), nil
			}
			return 0, errors.New("unknown")
		}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sandbox(id, ns, name, uid string, state runtimeapi.PodSandboxState, created int64) *apitest.FakePodSandbox {
	return &apitest.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: id, State: state, CreatedAt: created,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid}}}
}

func container(id, sb, name, image string, state runtimeapi.ContainerState, created int64) *apitest.FakeContainer {
	return &apitest.FakeContainer{SandboxID: sb, ContainerStatus: runtimeapi.ContainerStatus{Id: id, State: state, CreatedAt: created,
		Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: image}}}
}

// TestContainersV1 reads the fixture's cgroup v1 tree and /proc: pod web's
// sandbox (own network namespace) and app container, pod hostnet's sandbox
// (the node's namespace: no interfaces); hostnet's container, whose cgroup
// is gone, is left out and logged once over two reads.
func TestContainersV1(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := containerFixture(t, "v1", map[string]string{
			"proc/100/ns/net": "net:[4026532200]", "proc/100/fd/0": "/dev/null",
			"proc/200/ns/net": "net:[4026532200]", "proc/200/fd/0": "/dev/null", "proc/200/fd/1": "pipe:[7]", "proc/200/fd/2": "socket:[11]", "proc/200/fd/3": "socket:[12]",
			"proc/199/ns/net": "net:[4026532200]", "proc/199/fd/0": "/dev/null", "proc/199/fd/1": "socket:[13]",
			"proc/300/ns/net": "net:[4026531840]",
		})
		var log bytes.Buffer
		p := containerProvider(t, dir,
			[]*apitest.FakePodSandbox{
				sandbox("sb1", "default", "web", "1111", runtimeapi.PodSandboxState_SANDBOX_READY, 1700000100e9),
				sandbox("sb2", "kube-system", "hostnet", "2222", runtimeapi.PodSandboxState_SANDBOX_READY, 1700000150e9),
				sandbox("sb0", "default", "web", "1111", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, 1),
			},
			[]*apitest.FakeContainer{
				container("c1", "sb1", "app", "docker.io/library/app:1", runtimeapi.ContainerState_CONTAINER_RUNNING, 1700000200e9),
				container("c0", "sb1", "app", "docker.io/library/app:1", runtimeapi.ContainerState_CONTAINER_EXITED, 2),
				container("c2", "sb2", "broken", "docker.io/library/broken:1", runtimeapi.ContainerState_CONTAINER_RUNNING, 1700000250e9),
			},
			[]*runtimeapi.ContainerStats{{
				Attributes:    &runtimeapi.ContainerAttributes{Id: "c1"},
				WritableLayer: &runtimeapi.FilesystemUsage{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/snapshots"}, UsedBytes: &runtimeapi.UInt64Value{Value: 40960}},
			}},
			&log)

		noLimit := SpecSample{CPUPeriod: 100000, CPUShares: 2}
		want := []ContainerSample{
			{
				Namespace: "default", Pod: "web", Container: "POD", ID: "sb1", Image: "nodekeeper.local/pause:1",
				Cgroup: "/kubepods/burstable/pod1111/sb1", Time: t0, StartTime: time.Unix(0, 1700000100e9),
				CPU: CPUSample{Usage: 20000000, User: 10000000, System: 10000000},
				Memory: MemorySample{Usage: 1048576, MaxUsage: 2097152, WorkingSet: 1048576, RSS: 786432,
					PgFault: 300, HierPgFault: 300},
				Spec:  noLimit,
				Procs: ProcessSample{Processes: 1, Threads: 1, FDs: 1, Ulimits: []Ulimit{{"max_open_files", 1024}}},
				// lo and the veth are left out.
				Network: []InterfaceSample{
					{Name: "eth0", RxBytes: 9876, RxPackets: 54, RxErrors: 1, RxDropped: 2, TxBytes: 5432, TxPackets: 32, TxErrors: 3, TxDropped: 4},
					{Name: "net1", RxBytes: 7, RxPackets: 1},
				},
			},
			{
				Namespace: "default", Pod: "web", Container: "app", ID: "c1", Image: "docker.io/library/app:1",
				Cgroup: "/kubepods/burstable/pod1111/c1", Time: t0, StartTime: time.Unix(0, 1700000200e9),
				// cpuacct.stat user 100, system 50 ticks of 10 ms.
				// cpu.stat of the cpu hierarchy: throttled 5 of 50 periods, for 0.3 s.
				CPU: CPUSample{Usage: 1500000000, User: 1000000000, System: 500000000, Periods: 50, ThrottledPeriods: 5, ThrottledTime: 300000000},
				// working set = usage 5e7 − total_inactive_file 5e6.
				Memory: MemorySample{Usage: 50000000, MaxUsage: 60000000, WorkingSet: 45000000, RSS: 30000000, Cache: 10000000,
					MappedFile: 4096000, Swap: 8192, Failcnt: 3, PgFault: 1234, PgMajFault: 5, HierPgFault: 2345, HierPgMajFault: 6, OOMKills: 1},
				Spec: SpecSample{CPUPeriod: 100000, CPUQuota: 20000, CPUShares: 102, MemoryLimit: 67108864, MemoryReservation: 33554432, MemorySwapLimit: 67108864},
				// 200 has 4 descriptors (2 sockets), its child 199 (a lower pid:
				// the pid counter wrapped) 2 (1 socket). 200's parent is outside
				// the cgroup, so its limits are read (unlimited), not 199's (4096).
				Procs: ProcessSample{Processes: 2, Threads: 3, ThreadsMax: 1024, FDs: 6, Sockets: 3, Ulimits: []Ulimit{{"max_open_files", -1}}},
				Blkio: []BlkioDevice{
					{Major: 254, Minor: 0, Device: "/dev/vda",
						Bytes:    map[string]uint64{"Read": 4096, "Write": 8192, "Sync": 8192, "Async": 4096, "Discard": 0, "Total": 12288},
						Serviced: map[string]uint64{"Read": 1, "Write": 2, "Sync": 2, "Async": 1, "Discard": 0, "Total": 3}},
					{Major: 7, Minor: 1, Device: "", // not in the partition table
						Bytes:    map[string]uint64{"Read": 512, "Write": 0, "Sync": 0, "Async": 512, "Discard": 0, "Total": 512},
						Serviced: map[string]uint64{"Read": 1, "Write": 0, "Sync": 0, "Async": 1, "Discard": 0, "Total": 1}},
				},
				Fs: &FsSample{Device: "/dev/vda1", UsageBytes: 40960},
			},
			{
				Namespace: "kube-system", Pod: "hostnet", Container: "POD", ID: "sb2", Image: "nodekeeper.local/pause:1",
				Cgroup: "/kubepods/besteffort/pod2222/sb2", Time: t0, StartTime: time.Unix(0, 1700000150e9),
				CPU:    CPUSample{Usage: 10000000, System: 10000000},
				Memory: MemorySample{Usage: 524288, MaxUsage: 524288, WorkingSet: 524288, RSS: 262144, PgFault: 100, HierPgFault: 100},
				Spec:   noLimit,
				Procs:  ProcessSample{Processes: 1, Threads: 1, Ulimits: []Ulimit{{"max_open_files", 1024}}},
			},
		}
		for range 2 {
			got, err := p.Containers(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
		}
		if n := strings.Count(log.String(), "level=WARN"); n != 1 || !strings.Contains(log.String(), "containerID=c2") {
			t.Errorf("want one warning, for c2, over two reads; log:\n%s", log.String())
		}
	})
}

// TestContainersV2 reads the cgroup v2 equivalents: cpu.stat (its
// throttling counters included), memory.current and .peak, memory.events,
// cpu.max and cpu.weight, io.stat, and the pressure files.
func TestContainersV2(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := containerFixture(t, "v2", map[string]string{
			"proc/400/ns/net": "net:[4026532300]",
			"proc/500/ns/net": "net:[4026532300]", "proc/500/fd/0": "/dev/null", "proc/500/fd/1": "socket:[21]",
		})
		var log bytes.Buffer
		p := containerProvider(t, dir,
			[]*apitest.FakePodSandbox{sandbox("sb3", "default", "db", "3333", runtimeapi.PodSandboxState_SANDBOX_READY, 1700000100e9)},
			[]*apitest.FakeContainer{container("c3", "sb3", "db", "docker.io/library/db:1", runtimeapi.ContainerState_CONTAINER_RUNNING, 1700000200e9)},
			nil, &log)
		want := []ContainerSample{
			{
				Namespace: "default", Pod: "db", Container: "POD", ID: "sb3", Image: "nodekeeper.local/pause:1",
				Cgroup: "/kubepods/pod3333/sb3", Time: t0, StartTime: time.Unix(0, 1700000100e9),
				CPU:    CPUSample{Usage: 3000000, User: 1000000, System: 2000000},
				Memory: MemorySample{Usage: 409600, WorkingSet: 409600, RSS: 204800, PgFault: 50, HierPgFault: 50},
				// cpu.weight 1 is 2 shares; "max" limits read as none.
				Spec:    SpecSample{CPUPeriod: 100000, CPUShares: 2},
				Procs:   ProcessSample{Processes: 1, Threads: 1, Ulimits: []Ulimit{{"max_open_files", 1024}}},
				Network: []InterfaceSample{{Name: "eth0", RxBytes: 1000, RxPackets: 10, RxDropped: 1, TxBytes: 2000, TxPackets: 20}},
			},
			{
				Namespace: "default", Pod: "db", Container: "db", ID: "c3", Image: "docker.io/library/db:1",
				Cgroup: "/kubepods/pod3333/c3", Time: t0, StartTime: time.Unix(0, 1700000200e9),
				// cpu.stat: throttled 4 of 10 periods for 250000 µs, one burst of 1000 µs.
				CPU: CPUSample{Usage: 2500000000, User: 2000000000, System: 500000000, Periods: 10, ThrottledPeriods: 4, ThrottledTime: 250000000, BurstPeriods: 1, BurstTime: 1000000},
				// The pressure files as they are; the sandbox's cgroup has none (a
				// kernel without PSI): its PSI is empty.
				PSI: Pressure{
					CPU:    &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 12.5, Avg60: 6.25, Avg300: 1, Total: 5000000}, Full: statsapi.PSIData{Avg10: 3, Avg60: 1.5, Avg300: 0.25, Total: 1000000}},
					Memory: &statsapi.PSIStats{Some: statsapi.PSIData{Avg10: 0.4, Avg60: 0.2, Avg300: 0.05, Total: 2000}, Full: statsapi.PSIData{Avg10: 0.2, Avg60: 0.1, Avg300: 0.02, Total: 1000}},
					IO:     &statsapi.PSIStats{Some: statsapi.PSIData{Total: 300}, Full: statsapi.PSIData{Total: 100}},
				},
				// working set = memory.current 8e7 − inactive_file 1.5e7;
				// failcnt = memory.events max.
				Memory: MemorySample{Usage: 80000000, MaxUsage: 85000000, WorkingSet: 65000000, RSS: 60000000, Cache: 20000000,
					MappedFile: 1048576, Swap: 4096, Failcnt: 2, PgFault: 4000, PgMajFault: 7, HierPgFault: 4000, HierPgMajFault: 7, OOMKills: 1},
				// cpu.weight 79 (2048 shares as the kubelet writes them) reads back as 2046.
				Spec:  SpecSample{CPUPeriod: 100000, CPUQuota: 50000, CPUShares: 2046, MemoryLimit: 104857600, MemoryReservation: 52428800},
				Procs: ProcessSample{Processes: 1, Threads: 5, ThreadsMax: 4096, FDs: 2, Sockets: 1, Ulimits: []Ulimit{{"max_open_files", 65536}}},
				Blkio: []BlkioDevice{{Major: 254, Minor: 0, Device: "/dev/vda",
					Bytes: map[string]uint64{"Read": 40960, "Write": 81920}, Serviced: map[string]uint64{"Read": 10, "Write": 20}}},
			},
		}
		got, err := p.Containers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("containers (-want +got):\n%s", diff)
		}
		if log.Len() != 0 {
			t.Errorf("unexpected log:\n%s", log.String())
		}
	})
}

// A runtime that cannot list is an error: the scrape reports it, rather
// than an empty node.
func TestContainersRuntimeError(t *testing.T) {
	t.Parallel()
	dir := containerFixture(t, "v1", map[string]string{})
	p := containerProvider(t, dir, nil, nil, nil, &bytes.Buffer{})
	p.deps.Runtime.(fakeRuntime).FakeRuntimeService.InjectError("ListContainers", errors.New("runtime down"))
	if _, err := p.Containers(t.Context()); err == nil || !strings.Contains(err.Error(), "runtime down") {
		t.Errorf("Containers = %v, want the runtime's error", err)
	}
}

// BenchmarkContainersV2 times one read of the v2 fixture's pod: its sandbox
// and one container, each from its own cgroup and /proc (a /metrics/cadvisor
// scrape's work).
func BenchmarkContainersV2(b *testing.B) {
	dir := containerFixture(b, "v2", map[string]string{
		"proc/400/ns/net": "net:[4026532300]",
		"proc/500/ns/net": "net:[4026532300]", "proc/500/fd/0": "/dev/null", "proc/500/fd/1": "socket:[21]",
	})
	p := containerProvider(b, dir,
		[]*apitest.FakePodSandbox{sandbox("sb3", "default", "db", "3333", runtimeapi.PodSandboxState_SANDBOX_READY, 1700000100e9)},
		[]*apitest.FakeContainer{container("c3", "sb3", "db", "docker.io/library/db:1", runtimeapi.ContainerState_CONTAINER_RUNNING, 1700000200e9)},
		nil, &bytes.Buffer{})
	for b.Loop() {
		if _, err := p.Containers(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
