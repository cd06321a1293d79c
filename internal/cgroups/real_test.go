package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/integration"
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

// TestRealCgroup makes a Guaranteed pod's cgroup on this machine's cgroup
// filesystem under a root of its own, moves a process in, and checks that the
// kernel enforces the memory limit and that RemovePod refuses while the
// process lives and succeeds after.
func TestRealCgroup(t *testing.T) {
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

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := bufio.NewReader(out)
	if l, err := lines.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("child said %q, %v; want ready", l, err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
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
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	rest, _ := lines.ReadString('\n')
	err = cmd.Wait()
	waited = true
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v after saying %q; want it killed (SIGKILL) by the memory limit", err, rest)
	}

	if err := m.RemovePod(p.UID); err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Layout().hierarchies() {
		if _, err := os.Stat(filepath.Join(h.dir, parent)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after RemovePod: %v", filepath.Join(h.dir, parent), err)
		}
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
// own on this machine: it is there in every hierarchy.
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
	for _, c := range []string{"memory", "cpu", "pids"} {
		if got[c] != rt {
			t.Errorf("the process's %s cgroup is %q, want %q", c, got[c], rt)
		}
	}
}
