package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/daemon"
	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// stopRuntime runs `nodekeeper stop-runtime` on the agent's root directory
// and returns its exit code, stdout and stderr.
func stopRuntime(t *testing.T, a *Agent) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), a.art.bin, "stop-runtime", "--root-dir", a.Root)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestStopRuntime: stop-runtime refuses while the agent runs (its containerd
// keeps running); after the agent is SIGKILLed it stops the containerd the
// agent left, and only it (the pod's process keeps running); a second call
// finds none; the next agent starts a containerd and adopts the pod.
func TestStopRuntime(t *testing.T) {
	a := StartAgent(t, Options{})
	a.WriteManifest("web.yaml", webManifest("web", "stop-runtime"))
	before := a.WaitPod("web-e2e", "running", running)
	ctr := before.Status.ContainerStatuses[0].ContainerID
	pid := a.ContainerPID(ctr)
	cpid := containerdPID(t, a)
	// containerd and its shims run in the runtime cgroup, not the agent's.
	want := daemon.RuntimeCgroup(a.CgroupRoot, a.Root)
	for _, p := range append([]int{cpid}, containerdtest.ShimPIDs(a.socket())...) {
		if got := pidsCgroup(t, p); got != want {
			t.Errorf("pid %d (%s) is in cgroup %q, want %q", p, cmdName(p), got, want)
		}
	}

	code, out, errOut := stopRuntime(t, a)
	if code != 1 || !strings.Contains(errOut, "another nodekeeper is running") || !strings.Contains(errOut, a.Root) {
		t.Errorf("stop-runtime under a running agent: exit %d, stdout %q, stderr %q; want exit 1 saying an agent runs on %s", code, out, errOut, a.Root)
	}
	if containerdPIDOrZero(a) != cpid {
		t.Fatalf("containerd %d gone after a refused stop-runtime", cpid)
	}

	a.Stop(syscall.SIGKILL)
	code, out, errOut = stopRuntime(t, a)
	if code != 0 || !strings.Contains(out, "containerd (pid "+strconv.Itoa(cpid)+") of "+a.Root+" stopped") {
		t.Errorf("stop-runtime after the agent died: exit %d, stdout %q, stderr %q; want exit 0 and containerd %d stopped", code, out, errOut, cpid)
	}
	if p := containerdPIDOrZero(a); p != 0 {
		t.Errorf("containerd pid %d runs after stop-runtime", p)
	}
	if _, err := os.Stat(filepath.Join(a.Root, "containerd", "containerd.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file after stop-runtime: %v, want none", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the pod's process %d died with stop-runtime: %v", pid, err)
	}
	if code, out, _ := stopRuntime(t, a); code != 0 || !strings.Contains(out, "no containerd of "+a.Root+" is running") {
		t.Errorf("second stop-runtime: exit %d, stdout %q; want 0 and none running", code, out)
	}

	a.Start()
	after := a.WaitPod("web-e2e", "running after the restart", running)
	if c := after.Status.ContainerStatuses[0]; c.ContainerID != ctr || c.RestartCount != 0 {
		t.Errorf("after stop-runtime and a restart: container %s restarts %d; want %s and 0", c.ContainerID, c.RestartCount, ctr)
	}
	if p := containerdPIDOrZero(a); p == 0 || p == cpid {
		t.Errorf("containerd pid %d after the restart, want a new one", p)
	}
}

// pidsCgroup returns pid's cgroup in the pids hierarchy (v1) or the unified
// tree (v2).
func pidsCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		switch {
		case len(f) != 3:
		case f[1] == "pids":
			return f[2]
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		}
	}
	return v2
}

func cmdName(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
