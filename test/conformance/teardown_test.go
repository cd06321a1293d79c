package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/containerdtest"
)

// TestRunEnd: at a run's end the driver stops and removes its containerd's
// sandboxes through CRI, kills what is left in the run's cgroups (a process
// that outlived its containerd, here one the test placed there) found only
// through their cgroup.procs, removes those cgroups in every hierarchy and
// deletes the bridge the pods' network made. All of it is the test's own:
// its containerd, its cgroup parent, its bridge.
func TestRunEnd(t *testing.T) {
	c := containerdtest.Start(t)
	cgroup := fmt.Sprintf("nkt-end-%08x", rand.Uint32())
	t.Cleanup(func() { removeCgroups(t.Context(), "/sys/fs/cgroup", cgroup) })
	uid := "end-1"
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "end", Uid: uid, Namespace: "default"},
		LogDirectory: filepath.Join(c.Dir, "logs", uid),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/" + cgroup + "/pod" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				// The pod network: the bridge is made.
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD},
			},
		},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CRI.RunPodSandbox(t.Context(), cfg, ""); err != nil {
		t.Fatalf("run the pod: %v\n%s", err, c.Log())
	}
	if !linkExists(c.Bridge) {
		t.Fatalf("the pod's network made no bridge %s", c.Bridge)
	}
	// A process left in the run's cgroups, as a container's outlives its
	// killed shim.
	stray := exec.Command("sleep", "600")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stray.Process.Kill(); stray.Wait() })
	strayCgroup := filepath.Join("/sys/fs/cgroup", "pids", cgroup, "stray")
	if len(cgroupHierarchies("/sys/fs/cgroup")) == 1 { // cgroup v2
		strayCgroup = filepath.Join("/sys/fs/cgroup", cgroup, "stray")
	}
	if err := os.MkdirAll(strayCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(strayCgroup, "cgroup.procs"), []byte(strconv.Itoa(stray.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- stray.Wait() }()

	done, err := runEnd{endpoint: c.Endpoint, cgroupFS: "/sys/fs/cgroup", cgroup: cgroup, bridge: c.Bridge}.end(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %+v", done)
	if done.Sandboxes != 1 {
		t.Errorf("sandboxes removed %d, want 1", done.Sandboxes)
	}
	if pods, err := c.CRI.ListPodSandbox(t.Context(), nil); err != nil || len(pods) != 0 {
		t.Errorf("sandboxes left: %v (%v)", pods, err)
	}
	if !slices.Contains(done.Killed, stray.Process.Pid) {
		t.Errorf("killed %v, want the stray process %d", done.Killed, stray.Process.Pid)
	}
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.ProcessState.String() != "signal: killed" {
		t.Errorf("the stray process ended with %v, want killed", err)
	}
	if cgroupExists("/sys/fs/cgroup", cgroup) {
		t.Errorf("the run's cgroup %s is left", cgroup)
	}
	if done.Bridge != c.Bridge || linkExists(c.Bridge) {
		t.Errorf("bridge deleted %q, exists %v; want %s deleted", done.Bridge, linkExists(c.Bridge), c.Bridge)
	}
}

// TestRemoveCgroupsRefusesTheRoot: no cgroup root, nor a path out of it,
// is ever emptied.
func TestRemoveCgroupsRefusesTheRoot(t *testing.T) {
	t.Parallel()
	for _, cg := range []string{"", "/", "../x", "a/../../b"} {
		if _, _, err := removeCgroups(t.Context(), t.TempDir(), cg); err == nil {
			t.Errorf("cgroup %q: no error", cg)
		}
	}
}
