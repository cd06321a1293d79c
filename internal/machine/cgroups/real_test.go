package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// childEnv makes the test binary run allocate instead of the tests.
const childEnv = "NK_CGROUPS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		allocate()
		return
	}
	os.Exit(m.Run())
}

// allocate is the child process of TestRealCgroup: it says "ready", waits for
// a line on stdin (sent once it is in the pod cgroup), then touches 256 MiB
// and says "survived".
func allocate() {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(3)
	}
	var keep [][]byte
	for range 256 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Println("survived", len(keep))
	os.Exit(0)
}

// TestRealCgroup makes a Guaranteed pod's cgroup on this machine's cgroup v1
// filesystem under a root of its own, moves a process in, and checks that the
// kernel enforces the memory limit and that RemovePod refuses while the
// process lives and succeeds after. TestRealCgroupV2 is its v2 counterpart.
func TestRealCgroup(t *testing.T) {
	integration.OnCgroup(t, 1)
	if os.Geteuid() != 0 {
		integration.Require(t, "cgroup tests need root")
	}
	if _, err := os.Stat(DefaultFSRoot); err != nil {
		integration.Require(t, "no cgroup filesystem at "+DefaultFSRoot)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	m, err := New(Config{CgroupRoot: root, PodPidsLimit: 128, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRoot(t, m.Layout(), root) })
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	p := pod("nk-real-1", ctr(rl("200m", "64Mi"), rl("200m", "64Mi")))
	parent, err := m.EnsurePod(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := root + "/kubepods/podnk-real-1"; parent != want {
		t.Fatalf("cgroup parent %q, want %q", parent, want)
	}

	c := startChild(t)
	cmd, pid := c.cmd, strconv.Itoa(c.cmd.Process.Pid)
	for _, h := range m.Layout().hierarchies() {
		if err := write(filepath.Join(h.dir, parent), "cgroup.procs", pid); err != nil {
			t.Fatal(err)
		}
	}

	// The process is in the pod cgroup of each hierarchy and sees its limits.
	got := cgroupOf(t, cmd.Process.Pid)
	for _, c := range []string{"memory", "cpu", "pids", "cpuset"} {
		if got[c] != parent {
			t.Errorf("child's %s cgroup is %q, want %q", c, got[c], parent)
		}
	}
	for _, f := range []struct{ ctrl, file, want string }{
		{"memory", "memory.limit_in_bytes", "67108864"},
		{"cpu", "cpu.cfs_quota_us", "20000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"cpu", "cpu.shares", "204"},
		{"pids", "pids.max", "128"},
	} {
		dir := m.Layout().Dir(f.ctrl, got[f.ctrl])
		b, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) != f.want {
			t.Errorf("%s of the child's cgroup is %q, want %s", f.file, strings.TrimSpace(string(b)), f.want)
		}
	}

	if err := m.RemovePod(p.UID); !errors.Is(err, ErrLiveProcesses) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("RemovePod while the child lives: %v, want ErrLiveProcesses naming pid %s", err, pid)
	}

	// Past its memory limit the kernel kills it.
	c.allocate(t)

	if err := m.RemovePod(p.UID); err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Layout().hierarchies() {
		if _, err := os.Stat(filepath.Join(h.dir, parent)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after RemovePod: %v", filepath.Join(h.dir, parent), err)
		}
	}
}

// TestRealCgroupV2 is TestRealCgroup on cgroup v2: the kubelet's layout
// (kubepods, burstable, besteffort, pod<UID>) with the v2 files' values
// under a root of its own; a process in a leaf cgroup under the pod's (where
// the runtime puts containers: the pod cgroup enables controllers for its
// children, so by v2's no-internal-process rule it holds none) is limited by
// the pod's memory.max and killed past it; RemovePod refuses while it lives
// and removes the pod cgroup with the leftover leaf after.
func TestRealCgroupV2(t *testing.T) {
	integration.OnCgroup(t, 2)
	if os.Geteuid() != 0 {
		integration.Require(t, "cgroup tests need root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	m, err := New(Config{CgroupRoot: root, PodPidsLimit: 128, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRoot(t, m.Layout(), root) })
	if m.Layout().Version != V2 {
		t.Fatalf("Detect says cgroup v%d on a cgroup2 machine", m.Layout().Version)
	}
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	// A small limit: each page the child touches costs much in an emulated
	// guest (the kill at 64Mi took 23 s in the TCG guest of the v2 lane).
	g := pod("nk-real-g", ctr(rl("200m", "16Mi"), rl("200m", "16Mi")))
	b := pod("nk-real-b", ctr(rl("100m", "32Mi"), rl("", "")))
	e := pod("nk-real-e", ctr(nil, nil))
	parents := map[string]string{}
	for _, p := range []*v1.Pod{g, b, e} {
		parent, err := m.EnsurePod(p)
		if err != nil {
			t.Fatal(err)
		}
		parents[string(p.UID)] = parent
	}
	if diff := cmp.Diff(map[string]string{
		"nk-real-g": root + "/kubepods/podnk-real-g",
		"nk-real-b": root + "/kubepods/burstable/podnk-real-b",
		"nk-real-e": root + "/kubepods/besteffort/podnk-real-e",
	}, parents); diff != "" {
		t.Errorf("cgroup parents (-want +got):\n%s", diff)
	}
	if err := m.UpdateQoS([]*v1.Pod{g, b, e}); err != nil {
		t.Fatal(err)
	}
	fsRoot := m.Layout().Root
	read := func(cgroup, file string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(fsRoot, cgroup, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	// The kernel's view of what EnsureQoS and EnsurePod wrote.
	got := map[string]string{}
	want := map[string]string{
		"kubepods/besteffort/cpu.weight":              "1",
		"kubepods/burstable/cpu.weight":               "17", // 100m: 102 shares
		"kubepods/podnk-real-g/cpu.weight":            "29", // 200m: 204 shares
		"kubepods/podnk-real-g/cpu.max":               "20000 100000",
		"kubepods/podnk-real-g/memory.max":            "16777216",
		"kubepods/podnk-real-g/pids.max":              "128",
		"kubepods/burstable/podnk-real-b/cpu.max":     "max 100000",
		"kubepods/burstable/podnk-real-b/memory.max":  "max",
		"kubepods/burstable/podnk-real-b/pids.max":    "128",
		"kubepods/besteffort/podnk-real-e/cpu.weight": "1",
		"kubepods/besteffort/podnk-real-e/memory.max": "max",
	}
	for f := range want {
		got[f] = read(root, f)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cgroup files (-want +got):\n%s", diff)
	}
	// Every cgroup from the root down to the pods enables the controllers
	// pods need for its children.
	for _, cg := range []string{"/", root, root + "/kubepods", root + "/kubepods/burstable", root + "/kubepods/besteffort", parents["nk-real-g"]} {
		on := strings.Fields(read(cg, "cgroup.subtree_control"))
		for _, c := range requiredControllers {
			if !slices.Contains(on, c) {
				t.Errorf("%s/cgroup.subtree_control = %q, want %s in it", cg, on, c)
			}
		}
	}

	// The runtime's part: the container's cgroup, a leaf under the pod's.
	leaf := parents["nk-real-g"] + "/ctr"
	if err := os.Mkdir(filepath.Join(fsRoot, leaf), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startChild(t)
	pid := strconv.Itoa(c.cmd.Process.Pid)
	if err := write(filepath.Join(fsRoot, leaf), "cgroup.procs", pid); err != nil {
		t.Fatal(err)
	}
	proc, err := os.ReadFile(fmt.Sprintf("/proc/%s/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::" + leaf + "\n"; string(proc) != want {
		t.Errorf("/proc/%s/cgroup = %q, want %q", pid, proc, want)
	}
	if err := m.RemovePod(g.UID); !errors.Is(err, ErrLiveProcesses) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("RemovePod while the child lives: %v, want ErrLiveProcesses naming pid %s", err, pid)
	}

	// Past the pod's memory.max the kernel kills it, and counts the kill.
	c.allocate(t)
	if ev := read(parents["nk-real-g"], "memory.events"); !strings.Contains(ev, "oom_kill 1") {
		t.Errorf("pod memory.events after the kill:\n%s\nwant oom_kill 1", ev)
	}

	for _, p := range []*v1.Pod{g, b, e} {
		if err := m.RemovePod(p.UID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(fsRoot, parents[string(p.UID)])); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after RemovePod: %v", parents[string(p.UID)], err)
		}
	}
}

// child is a process of the test binary running allocate.
type child struct {
	cmd    *exec.Cmd
	stdin  io.Writer
	lines  *bufio.Reader
	waited bool
}

// startChild starts the test binary as allocate's child and waits for its
// "ready"; a cleanup kills and reaps it unless allocate did.
func startChild(t *testing.T) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !c.waited {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	c.stdin, c.lines = stdin, bufio.NewReader(out)
	if l, err := c.lines.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("child said %q, %v; want ready", l, err)
	}
	return c
}

// allocate lets the child touch 256 MiB and fails t unless the kernel
// SIGKILLs it for that.
func (c *child) allocate(t *testing.T) {
	t.Helper()
	if _, err := c.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	rest, _ := c.lines.ReadString('\n')
	err := c.cmd.Wait()
	c.waited = true
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v after saying %q; want it killed (SIGKILL) by the memory limit", err, rest)
	}
}

// cgroupOf returns the cgroup path of pid per v1 controller, from
// /proc/PID/cgroup.
func cgroupOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			got[c] = f[2]
		}
		if f[1] == "" {
			got["unified"] = f[2]
		}
	}
	return got
}

// removeRoot removes the test's cgroup root, and only it, from every
// hierarchy, children first.
func removeRoot(t *testing.T, l Layout, root string) {
	for _, h := range l.hierarchies() {
		top := filepath.Join(h.dir, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil {
				t.Errorf("remove test cgroup %s: %v", dirs[i], err)
			}
		}
	}
}

// TestRealPlace places a process of its own in a cgroup under a root of its
// own on this machine, beside the pods' tree: it is there in every hierarchy
// (v1), or in that one cgroup (v2). It runs on both versions.
func TestRealPlace(t *testing.T) {
	if os.Geteuid() != 0 {
		integration.Require(t, "cgroup tests need root")
	}
	if _, err := os.Stat(DefaultFSRoot); err != nil {
		integration.Require(t, "no cgroup filesystem at "+DefaultFSRoot)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	root := "/nk-test-" + hex.EncodeToString(rnd[:])
	m, err := New(Config{CgroupRoot: root, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRoot(t, m.Layout(), root) })
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // before removeRoot
	// The agent's order: the pods' tree, then the runtime beside it (on v2
	// the root enables controllers for both, and rt stays a leaf).
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	rt := root + "/nodekeeper-containerd"
	if err := m.Place(rt, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	got := cgroupOf(t, cmd.Process.Pid)
	for _, h := range m.Layout().hierarchies() {
		b, err := os.ReadFile(filepath.Join(h.dir, rt, "cgroup.procs"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(cmd.Process.Pid) {
			t.Errorf("%s/cgroup.procs = %q, %v; want %d", filepath.Join(h.dir, rt), b, err, cmd.Process.Pid)
		}
	}
	ctrls := []string{"memory", "cpu", "pids"} // v1: the process's cgroup in each hierarchy
	if integration.CgroupVersion() == 2 {
		ctrls = []string{"unified"} // v2: its one line, 0::/path
	}
	for _, c := range ctrls {
		if got[c] != rt {
			t.Errorf("the process's %s cgroup is %q, want %q", c, got[c], rt)
		}
	}
	// Placing it again (a restarted agent adopting its containerd) is a no-op.
	if err := m.Place(rt, cmd.Process.Pid); err != nil {
		t.Errorf("Place again: %v", err)
	}
}
