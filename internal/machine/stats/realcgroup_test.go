package stats

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// childEnv makes the test binary run busyChild instead of the tests.
const childEnv = "NK_STATS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		busyChild()
		return
	}
	os.Exit(m.Run())
}

// The child's work, once it is in its cgroup.
const (
	childAnon = 24 << 20 // bytes of anonymous memory it touches and keeps
	childFile = 4 << 20  // bytes it writes to the file named by $NK_STATS_TEST_FILE
	childCPU  = 50e6     // ns of cpu time it burns once in its cgroup
	// bytes it writes to, then reads from, the block device named by
	// $NK_STATS_TEST_DEV, bypassing the page cache (O_DIRECT), so that the
	// I/O is its own on both cgroup versions
	childWrite, childRead = 1 << 20, 512 << 10
	ioBlock               = 64 << 10 // bytes per write or read
)

// busyChild is the process of TestRealCgroupStats: it says "ready", waits for
// a line on stdin (sent once it is in its cgroup), touches childAnon bytes,
// writes childFile bytes to a file, writes and reads a block device in
// ioBlock pieces, says "filled", waits for a line (sent
// once its cpu quota is set), burns childCPU of cpu time, says "done" and
// then idles until stdin closes, so that its cgroup's figures hold still
// while the test reads them.
func busyChild() {
	debug.SetGCPercent(-1) // nothing is freed: memory.current holds still
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(3)
	}
	keep := make([]byte, childAnon)
	for i := 0; i < len(keep); i += 4096 {
		keep[i] = 1
	}
	if err := os.WriteFile(os.Getenv("NK_STATS_TEST_FILE"), make([]byte, childFile), 0o600); err != nil {
		fmt.Println("write:", err)
		os.Exit(4)
	}
	if err := directIO(os.Getenv("NK_STATS_TEST_DEV")); err != nil {
		fmt.Println("io:", err)
		os.Exit(4)
	}
	fmt.Println("filled")
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(3)
	}
	cpu := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			os.Exit(5)
		}
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	for n, start := 0, cpu(); cpu()-start < childCPU; n++ {
		for range 100000 {
			n ^= n << 1
		}
	}
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, in)
	keep[0]++
}

// directIO writes childWrite bytes to the block device dev, then reads
// childRead bytes, ioBlock at a time, with O_DIRECT (from a buffer aligned
// to the page, as O_DIRECT wants).
func directIO(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	raw := make([]byte, ioBlock+4096)
	off := 0
	for uintptr(unsafe.Pointer(&raw[off]))%4096 != 0 {
		off++
	}
	buf := raw[off : off+ioBlock]
	for i := 0; i < childWrite; i += ioBlock {
		if _, err := f.WriteAt(buf, int64(i)); err != nil {
			return err
		}
	}
	for i := 0; i < childRead; i += ioBlock {
		if _, err := f.ReadAt(buf, int64(i)); err != nil {
			return err
		}
	}
	return nil
}

// loopDevice attaches a 16 MiB file of the test's to a free loop device
// (detached at the test's end) and returns its node and number.
func loopDevice(t *testing.T) (string, devNum) {
	t.Helper()
	if _, err := exec.LookPath("losetup"); err != nil {
		integration.Require(t, "the real cgroup stats test needs losetup (util-linux)")
	}
	// A machine booted without a distribution's static device nodes (the
	// cgroup v2 VM's busybox init) has no /dev/loop-control until the loop
	// module is loaded, which udev or systemd would do at boot.
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		if out, err := exec.Command("modprobe", "loop").CombinedOutput(); err != nil {
			integration.Require(t, fmt.Sprintf("no loop devices: modprobe loop: %v: %s", err, out))
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --find --show %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return dev, devNum{uint64(unix.Major(st.Rdev)), uint64(unix.Minor(st.Rdev))}
}

// cgroupFiles reads a cgroup's files for the test, the way the kernel
// writes them, independently of the provider's reader.
type cgroupFiles struct {
	t      *testing.T
	layout cgroups.Layout
}

// file returns the content of name in the cgroup at cg of controller's
// hierarchy.
func (f cgroupFiles) file(controller, cg, name string) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.layout.Dir(controller, cg), name))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// num returns the number in a one-number file.
func (f cgroupFiles) num(controller, cg, name string) uint64 {
	f.t.Helper()
	s := strings.TrimSpace(f.file(controller, cg, name))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		f.t.Fatalf("%s of %s: %q", name, cg, s)
	}
	return v
}

// key returns the value of key in a keyed file (memory.stat, cpu.stat).
func (f cgroupFiles) key(controller, cg, name, key string) uint64 {
	f.t.Helper()
	for line := range strings.Lines(f.file(controller, cg, name)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				f.t.Fatalf("%s of %s: %s %q", name, cg, key, v)
			}
			return n
		}
	}
	f.t.Fatalf("%s of %s: no %s", name, cg, key)
	return 0
}

// psiTotal returns the total of line ("some", "full") of a pressure file.
func (f cgroupFiles) psiTotal(cg, name, line string) uint64 {
	f.t.Helper()
	for l := range strings.Lines(f.file("", cg, name)) {
		if fields := strings.Fields(l); len(fields) == 5 && fields[0] == line {
			v, err := strconv.ParseUint(strings.TrimPrefix(fields[4], "total="), 10, 64)
			if err != nil {
				f.t.Fatalf("%s of %s: %q", name, cg, l)
			}
			return v
		}
	}
	f.t.Fatalf("%s of %s: no %s line", name, cg, line)
	return 0
}

// blkio returns the bytes read and written and the reads and writes of the
// cgroup on the device n: v2 io.stat rbytes, wbytes, rios, wios; v1
// blkio.throttle.io_service_bytes and io_serviced, Read and Write.
func (f cgroupFiles) blkio(cg string, n devNum) (rbytes, wbytes, rios, wios uint64) {
	f.t.Helper()
	dev := fmt.Sprintf("%d:%d", n.major, n.minor)
	parse := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			f.t.Fatalf("blkio of %s: %q", cg, s)
		}
		return v
	}
	if f.layout.Version == cgroups.V2 {
		for line := range strings.Lines(f.file("", cg, "io.stat")) {
			fields := strings.Fields(line)
			if len(fields) == 0 || fields[0] != dev {
				continue
			}
			for _, kv := range fields[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "rbytes":
					rbytes = parse(v)
				case "wbytes":
					wbytes = parse(v)
				case "rios":
					rios = parse(v)
				case "wios":
					wios = parse(v)
				}
			}
		}
		return
	}
	blkio := ""
	for _, top := range f.layout.Hierarchies() {
		if slices.Contains(strings.Split(filepath.Base(top), ","), "blkio") {
			blkio = filepath.Join(top, cg)
		}
	}
	get := func(name, op string) uint64 {
		b, err := os.ReadFile(filepath.Join(blkio, name))
		if err != nil {
			f.t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if fields := strings.Fields(line); len(fields) == 3 && fields[0] == dev && fields[1] == op {
				return parse(fields[2])
			}
		}
		return 0
	}
	return get("blkio.throttle.io_service_bytes", "Read"), get("blkio.throttle.io_service_bytes", "Write"),
		get("blkio.throttle.io_serviced", "Read"), get("blkio.throttle.io_serviced", "Write")
}

// cpuUsage is the cgroup's cpu time in ns: v2 cpu.stat usage_usec, v1
// cpuacct.usage.
func (f cgroupFiles) cpuUsage(cg string) uint64 {
	if f.layout.Version == cgroups.V2 {
		return f.key("", cg, "cpu.stat", "usage_usec") * 1000
	}
	return f.num("cpuacct", cg, "cpuacct.usage")
}

// cpuStat is a cpu.stat counter (the cpu hierarchy's on v1).
func (f cgroupFiles) cpuStat(cg, key string) uint64 { return f.key("cpu", cg, "cpu.stat", key) }

// memory reads usage (v2 memory.current, v1 memory.usage_in_bytes) and the
// memory.stat fields the working set, rss, cache and page faults come from.
func (f cgroupFiles) memory(cg string) (usage, inactiveFile, rss, cache, pgfault uint64) {
	if f.layout.Version == cgroups.V2 {
		return f.num("", cg, "memory.current"), f.key("", cg, "memory.stat", "inactive_file"), f.key("", cg, "memory.stat", "anon"),
			f.key("", cg, "memory.stat", "file"), f.key("", cg, "memory.stat", "pgfault")
	}
	return f.num("memory", cg, "memory.usage_in_bytes"), f.key("memory", cg, "memory.stat", "total_inactive_file"),
		f.key("memory", cg, "memory.stat", "total_rss"), f.key("memory", cg, "memory.stat", "total_cache"), f.key("memory", cg, "memory.stat", "pgfault")
}

// memTolerance is how far a memory figure the provider read may be from
// the test's reads just before and after it. The child is idle then (it
// touched its memory, its GC is off), so the cgroup's figures move only by
// the kernel's per-cpu charge batching (up to 64 pages a cpu) and its list
// rotation between active and inactive: 1 MiB covers both.
const memTolerance = 1 << 20

// within checks that got is within [min(a, b) − tol, max(a, b) + tol]: a
// figure read between the test's reads a and b. For a counter (tol 0) the
// bracket is exact whatever else runs on the machine.
func within(t *testing.T, what string, got, a, b, tol uint64) {
	t.Helper()
	lo, hi := min(a, b), max(a, b)
	if got+tol < lo || got > hi+tol {
		t.Errorf("%s = %d, want within [%d, %d] ± %d (the files before and after)", what, got, lo, hi, tol)
	}
}

// TestRealCgroupStatsV2 checks, on cgroup v2, the Summary's node, pods
// container, pod and container figures, and the container's
// /metrics/cadvisor sample, against the files of cgroups the test made (a
// pod cgroup by internal/machine/cgroups, a container cgroup <pod>/<ID> under it as
// the runtime makes it) holding a process of its own that used memory, cpu
// (throttled by the container's cpu.max), wrote a file and did direct I/O
// on a loop device: memory from memory.current and memory.stat (working set
// = current − inactive_file), cpu and CFS counters from cpu.stat,
// processes and threads, block I/O from io.stat, and PSI from the
// *.pressure files.
func TestRealCgroupStatsV2(t *testing.T) {
	integration.OnCgroup(t, 2)
	testRealCgroupStats(t)
}

// TestRealCgroupStatsV1 is TestRealCgroupStatsV2 on cgroup v1: the figures
// from memory.usage_in_bytes, memory.stat's total_* fields, cpuacct.usage,
// the cpu hierarchy's cpu.stat, blkio.throttle.io_service_bytes and
// io_serviced, and no PSI but the node's (/proc/pressure).
func TestRealCgroupStatsV1(t *testing.T) {
	integration.OnCgroup(t, 1)
	testRealCgroupStats(t)
}

func testRealCgroupStats(t *testing.T) {
	if os.Geteuid() != 0 {
		integration.Require(t, "the real cgroup stats test needs root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	m, err := cgroups.New(cgroups.Config{CgroupRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layout()
	t.Cleanup(func() { removeCgroupRoot(t, l, root) })
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	const uid = "uid-real-stats"
	podCg, err := m.EnsurePod(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "default", UID: uid},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("256Mi")}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's and the container's cgroups, as runc makes them: the
	// container's with a cpu quota of 1 ms per 20 ms period (5% of a cpu,
	// which the child exceeds whatever the machine's load: it gets its
	// share of a cpu, at load 18 on 2 cpus still 11%) and a 128 MiB limit.
	// The quota is set once the child has filled its memory (which takes
	// seconds of cpu under an emulated cpu). On v1 the kernel counts a
	// device's blkio.throttle.* only once a rule is set on it: a rule that
	// never limits (1 TiB/s).
	dev, devNo := loopDevice(t)
	sbCg, ctrCg := cgroups.Names{}.Container(podCg, "sb-real"), cgroups.Names{}.Container(podCg, "ctr-real") // the cgroupfs driver's
	makeContainerCgroup(t, l, sbCg, nil)
	quota := map[string]string{"cpu.cfs_period_us": "20000", "cpu.cfs_quota_us": "1000"}
	if l.Version == cgroups.V2 {
		makeContainerCgroup(t, l, ctrCg, map[string]string{"memory.max": strconv.Itoa(128 << 20)})
		quota = map[string]string{"cpu.max": "1000 20000"}
	} else {
		rule := fmt.Sprintf("%d:%d %d", devNo.major, devNo.minor, 1<<40)
		makeContainerCgroup(t, l, ctrCg, map[string]string{"memory.limit_in_bytes": strconv.Itoa(128 << 20),
			"blkio.throttle.read_bps_device": rule, "blkio.throttle.write_bps_device": rule})
	}
	start := time.Now()
	runChild(t, l, ctrCg, filepath.Join(t.TempDir(), "written"), dev, func() { writeCgroupFiles(t, l, ctrCg, quota) })
	t.Logf("the child ran for %v", time.Since(start))

	rt := fakeRuntime{apitest.NewFakeRuntimeService(), apitest.NewFakeImageService()}
	rt.SetFakeSandboxes([]*apitest.FakePodSandbox{sandbox("sb-real", "default", "busy", uid, runtimeapi.PodSandboxState_SANDBOX_READY, 1)})
	rt.SetFakeContainers([]*apitest.FakeContainer{container("ctr-real", "sb-real", "app", "app:1", runtimeapi.ContainerState_CONTAINER_RUNNING, 2)})
	rt.SetFakeContainerStats([]*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "ctr-real"},
		Cpu: &runtimeapi.CpuUsage{Timestamp: 3, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 1}}, Memory: &runtimeapi.MemoryUsage{Timestamp: 3}}})
	p, err := New(Config{RootDir: t.TempDir(), LogDir: t.TempDir(), CgroupRoot: root}, Deps{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	f := cgroupFiles{t, l}
	v2 := l.Version == cgroups.V2

	// The Summary, between two reads of the files.
	type snap struct {
		nodeCPU, nodePgfault, podsCPU, podCPU                 uint64
		podUsage, podInactive, podRSS, podPgfault             uint64
		nodePSI, podsPSI, podPSI, podMemPSI, ctrPSI, ctrIOPSI uint64
	}
	read := func() snap {
		var s snap
		s.nodeCPU = f.cpuUsage("/")
		s.nodePgfault = f.key("memory", "/", "memory.stat", "pgfault")
		s.podsCPU = f.cpuUsage(cgroups.KubepodsPath(root))
		s.podCPU = f.cpuUsage(podCg)
		s.podUsage, s.podInactive, s.podRSS, _, s.podPgfault = f.memory(podCg)
		if v2 {
			s.nodePSI = f.psiTotal("/", "cpu.pressure", "some")
			s.podsPSI = f.psiTotal(cgroups.KubepodsPath(root), "memory.pressure", "some")
			s.podPSI = f.psiTotal(podCg, "cpu.pressure", "some")
			s.podMemPSI = f.psiTotal(podCg, "memory.pressure", "full")
			s.ctrPSI = f.psiTotal(ctrCg, "cpu.pressure", "some")
			s.ctrIOPSI = f.psiTotal(ctrCg, "io.pressure", "some")
		}
		return s
	}
	a := read()
	sum, err := p.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b := read()

	n := sum.Node
	within(t, "node cpu usageCoreNanoSeconds", *n.CPU.UsageCoreNanoSeconds, a.nodeCPU, b.nodeCPU, 0)
	within(t, "node pageFaults", *n.Memory.PageFaults, a.nodePgfault, b.nodePgfault, 0)
	if len(n.SystemContainers) != 1 || n.SystemContainers[0].Name != "pods" {
		t.Fatalf("system containers %+v, want pods", n.SystemContainers)
	}
	pods := n.SystemContainers[0]
	within(t, "pods container cpu", *pods.CPU.UsageCoreNanoSeconds, a.podsCPU, b.podsCPU, 0)
	if len(sum.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(sum.Pods))
	}
	ps := sum.Pods[0]
	if ps.CPU == nil || ps.Memory == nil || ps.ProcessStats == nil || len(ps.Containers) != 1 {
		t.Fatalf("pod stats incomplete: cpu %+v, memory %+v, processes %+v, containers %+v", ps.CPU, ps.Memory, ps.ProcessStats, ps.Containers)
	}
	within(t, "pod cpu", *ps.CPU.UsageCoreNanoSeconds, a.podCPU, b.podCPU, 0)
	if *ps.CPU.UsageCoreNanoSeconds < childCPU {
		t.Errorf("pod cpu %d ns, want at least the child's %d", *ps.CPU.UsageCoreNanoSeconds, int64(childCPU))
	}
	within(t, "pod memory usage", *ps.Memory.UsageBytes, a.podUsage, b.podUsage, memTolerance)
	within(t, "pod memory working set", *ps.Memory.WorkingSetBytes, sub(a.podUsage, a.podInactive), sub(b.podUsage, b.podInactive), memTolerance)
	within(t, "pod memory rss", *ps.Memory.RSSBytes, a.podRSS, b.podRSS, memTolerance)
	within(t, "pod page faults", *ps.Memory.PageFaults, a.podPgfault, b.podPgfault, 0)
	// v2's memory.stat counts the descendants' page faults, v1's pgfault
	// the cgroup's own (0 in a pod cgroup), which cadvisor reports.
	// (The child's memory may be transparent huge pages: a fault per 2 MiB.)
	if *ps.Memory.RSSBytes < childAnon || (v2 && *ps.Memory.PageFaults == 0) {
		t.Errorf("pod rss %d, page faults %d: want at least the child's %d bytes, touched", *ps.Memory.RSSBytes, *ps.Memory.PageFaults, childAnon)
	}
	if ps.Memory.AvailableBytes == nil || *ps.Memory.AvailableBytes+*ps.Memory.WorkingSetBytes != 256<<20 {
		t.Errorf("pod memory available %v + working set %d, want the 256 MiB limit", ps.Memory.AvailableBytes, *ps.Memory.WorkingSetBytes)
	}
	if *ps.ProcessStats.ProcessCount != 1 {
		t.Errorf("pod processes %d, want 1 (the child; the sandbox's cgroup is left out)", *ps.ProcessStats.ProcessCount)
	}
	c := ps.Containers[0]
	if v2 {
		within(t, "node cpu psi some total", n.CPU.PSI.Some.Total, a.nodePSI, b.nodePSI, 0)
		within(t, "pods container memory psi some total", pods.Memory.PSI.Some.Total, a.podsPSI, b.podsPSI, 0)
		if pods.IO == nil || pods.IO.PSI == nil || pods.CPU.PSI == nil {
			t.Errorf("pods container psi: cpu %+v, io %+v", pods.CPU.PSI, pods.IO)
		}
		within(t, "pod cpu psi some total", ps.CPU.PSI.Some.Total, a.podPSI, b.podPSI, 0)
		within(t, "pod memory psi full total", ps.Memory.PSI.Full.Total, a.podMemPSI, b.podMemPSI, 0)
		if ps.IO == nil || ps.IO.PSI == nil {
			t.Errorf("pod io %+v, want its io.pressure", ps.IO)
		}
		if c.CPU.PSI == nil || c.Memory.PSI == nil || c.IO == nil || c.IO.PSI == nil {
			t.Fatalf("container psi: cpu %+v, memory %+v, io %+v", c.CPU.PSI, c.Memory.PSI, c.IO)
		}
		within(t, "container cpu psi some total", c.CPU.PSI.Some.Total, a.ctrPSI, b.ctrPSI, 0)
		within(t, "container io psi some total", c.IO.PSI.Some.Total, a.ctrIOPSI, b.ctrIOPSI, 0)
		for what, psi := range map[string]*statsapi.PSIStats{"node cpu": n.CPU.PSI, "node memory": n.Memory.PSI, "node io": n.IO.PSI, "container cpu": c.CPU.PSI} {
			for _, d := range []statsapi.PSIData{psi.Some, psi.Full} {
				if d.Avg10 < 0 || d.Avg10 > 100 || d.Avg60 < 0 || d.Avg60 > 100 || d.Avg300 < 0 || d.Avg300 > 100 {
					t.Errorf("%s psi %+v: averages out of 0..100", what, psi)
				}
			}
		}
	} else {
		// v1 cgroups keep no PSI; the node's comes from /proc/pressure where
		// the kernel has it.
		if ps.CPU.PSI != nil || ps.Memory.PSI != nil || ps.IO != nil || c.CPU.PSI != nil || c.IO != nil || pods.IO != nil {
			t.Errorf("PSI on cgroup v1: pod %+v %+v %+v, container %+v %+v, pods %+v", ps.CPU.PSI, ps.Memory.PSI, ps.IO, c.CPU.PSI, c.IO, pods.IO)
		}
		if _, err := os.Stat("/proc/pressure/cpu"); err == nil && (n.CPU.PSI == nil || n.IO == nil) {
			t.Errorf("node psi: cpu %+v, io %+v; want /proc/pressure's", n.CPU.PSI, n.IO)
		}
	}

	// The container's /metrics/cadvisor sample.
	type ctrSnap struct {
		cpu, periods, throttled, usage, inactive, rss, cache, pgfault, threads, psiCPUFull uint64
	}
	readCtr := func() ctrSnap {
		var s ctrSnap
		s.cpu = f.cpuUsage(ctrCg)
		s.periods, s.throttled = f.cpuStat(ctrCg, "nr_periods"), f.cpuStat(ctrCg, "nr_throttled")
		s.usage, s.inactive, s.rss, s.cache, s.pgfault = f.memory(ctrCg)
		s.threads = f.num("pids", ctrCg, "pids.current")
		if v2 {
			s.psiCPUFull = f.psiTotal(ctrCg, "cpu.pressure", "full")
		}
		return s
	}
	ca := readCtr()
	samples, err := p.Containers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cb := readCtr()
	i := slices.IndexFunc(samples, func(s ContainerSample) bool { return s.ID == "ctr-real" })
	if len(samples) != 2 || i < 0 {
		t.Fatalf("container samples %+v, want the sandbox and ctr-real", samples)
	}
	s := samples[i]
	within(t, "container cpu", s.CPU.Usage, ca.cpu, cb.cpu, 0)
	within(t, "container cfs periods", s.CPU.Periods, ca.periods, cb.periods, 0)
	within(t, "container cfs throttled periods", s.CPU.ThrottledPeriods, ca.throttled, cb.throttled, 0)
	// At 1 ms of quota a period, burning childCPU took about childCPU/1 ms
	// periods, and the child ran out of quota in some. About: the kernel
	// hands quota out in slices and lets a cgroup run a little past it (a
	// real 16-core v2 host counted 49 periods for 50 ms), so half of them
	// is the bound.
	if s.CPU.ThrottledPeriods == 0 || s.CPU.ThrottledTime == 0 || s.CPU.Periods < childCPU/1e6/2 {
		t.Errorf("container cfs: %d periods, %d throttled for %d ns; want the child throttled by its quota", s.CPU.Periods, s.CPU.ThrottledPeriods, s.CPU.ThrottledTime)
	}
	within(t, "container memory usage", s.Memory.Usage, ca.usage, cb.usage, memTolerance)
	within(t, "container memory working set", s.Memory.WorkingSet, sub(ca.usage, ca.inactive), sub(cb.usage, cb.inactive), memTolerance)
	within(t, "container memory rss", s.Memory.RSS, ca.rss, cb.rss, memTolerance)
	within(t, "container memory cache", s.Memory.Cache, ca.cache, cb.cache, memTolerance)
	within(t, "container page faults", s.Memory.PgFault, ca.pgfault, cb.pgfault, 0)
	within(t, "container threads", s.Procs.Threads, ca.threads, cb.threads, 0)
	if s.Procs.Processes != 1 || s.Spec.CPUQuota != 1000 || s.Spec.CPUPeriod != 20000 || s.Spec.MemoryLimit != 128<<20 {
		t.Errorf("container processes %d, spec %+v; want 1 process, quota 1000 of 20000, a 128 MiB limit", s.Procs.Processes, s.Spec)
	}
	// The child's I/O on the loop device, as io.stat (v2) or
	// blkio.throttle.io_service_bytes and io_serviced (v1) count it: every
	// byte, in ioBlock requests (or fewer, larger ones where the block
	// layer merged them).
	d := slices.IndexFunc(s.Blkio, func(b BlkioDevice) bool { return b.Major == devNo.major && b.Minor == devNo.minor })
	if d < 0 {
		t.Fatalf("container blkio %+v: no %s (%d:%d)", s.Blkio, dev, devNo.major, devNo.minor)
	}
	bio := s.Blkio[d]
	rb, wb, rios, wios := f.blkio(ctrCg, devNo)
	if bio.Device != dev || bio.Bytes["Read"] != rb || bio.Bytes["Write"] != wb || bio.Serviced["Read"] != rios || bio.Serviced["Write"] != wios {
		t.Errorf("container blkio %+v, want %s read %d bytes in %d, wrote %d in %d (the files)", bio, dev, rb, rios, wb, wios)
	}
	if rb != childRead || wb != childWrite || rios == 0 || rios > childRead/ioBlock || wios == 0 || wios > childWrite/ioBlock {
		t.Errorf("the files count read %d bytes in %d, wrote %d in %d; the child read %d, wrote %d in %d-byte requests", rb, rios, wb, wios, childRead, childWrite, ioBlock)
	}
	if v2 {
		if s.PSI.CPU == nil || s.PSI.Memory == nil || s.PSI.IO == nil {
			t.Fatalf("container psi %+v, want cpu, memory and io", s.PSI)
		}
		within(t, "container cpu psi full total", s.PSI.CPU.Full.Total, ca.psiCPUFull, cb.psiCPUFull, 0)
	} else if s.PSI != (Pressure{}) {
		t.Errorf("container psi %+v on cgroup v1, want none", s.PSI)
	}
}

// makeContainerCgroup makes the cgroup cg in every hierarchy but cpuset's
// (v1), as the runtime makes a container's: on v2 it enables the pods'
// controllers in the parent first, as runc does. It then writes files, each
// to the hierarchy that has it.
func makeContainerCgroup(t *testing.T, l cgroups.Layout, cg string, files map[string]string) {
	t.Helper()
	for _, top := range l.Hierarchies() {
		if l.Version == cgroups.V1 && strings.Contains(filepath.Base(top), "cpuset") {
			continue
		}
		dir := filepath.Join(top, cg)
		if _, err := os.Stat(filepath.Dir(dir)); err != nil {
			continue // a hierarchy the pod cgroup is not in
		}
		if l.Version == cgroups.V2 {
			if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control"), []byte("+cpu +memory +pids +io"), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeCgroupFiles(t, l, cg, files)
}

// writeCgroupFiles writes files in the cgroup cg, each to the hierarchy
// that has it (in the order of their names).
func writeCgroupFiles(t *testing.T, l cgroups.Layout, cg string, files map[string]string) {
	t.Helper()
	for _, top := range l.Hierarchies() {
		for _, name := range slices.Sorted(maps.Keys(files)) {
			p := filepath.Join(top, cg, name)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if err := os.WriteFile(p, []byte(files[name]), 0); err != nil {
				t.Fatalf("write %s: %v", p, err)
			}
		}
	}
}

// runChild starts busyChild, moves it into the cgroup cg (in every hierarchy
// that has cg), lets it fill its memory and do its I/O on dev, calls filled,
// lets it burn its cpu,
// and returns once it is done; it is stopped (its stdin closed) and waited
// for at the test's end, before the cgroups are removed.
func runChild(t *testing.T, l cgroups.Layout, cg, file, dev string, filled func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=1", "NK_STATS_TEST_FILE="+file, "NK_STATS_TEST_DEV="+dev)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	})
	out := bufio.NewReader(stdout)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("child said %q (%v), want %q", line, err, want)
		}
	}
	expect("ready")
	for _, top := range l.Hierarchies() {
		p := filepath.Join(top, cg, "cgroup.procs")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("move the child into %s: %v", p, err)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	expect("filled")
	filled()
	if _, err := io.WriteString(stdin, "burn\n"); err != nil {
		t.Fatal(err)
	}
	expect("done")
}
