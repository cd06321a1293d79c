package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// runRefused runs `nodekeeper run` with the configuration body in a temp
// dir (the agent's oom_score_adj left as this process has it) and fails t
// unless it exits 2 with an error line holding every want.
func runRefused(t *testing.T, body string, want ...string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"run", "--root-dir", filepath.Join(dir, "root"), "--config", cfg,
		"--oom-score-adj", strings.TrimSpace(string(own))}, &stdout, &stderr)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	// The agent logs its start on stderr too; the error is the last line.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	msg := lines[len(lines)-1]
	if !strings.HasPrefix(msg, "nodekeeper: ") {
		t.Errorf("stderr does not end with the error line:\n%s", stderr.String())
	}
	for _, w := range append([]string{"config.yaml"}, want...) {
		if !strings.Contains(msg, w) {
			t.Errorf("stderr %q does not name %s", msg, w)
		}
	}
}

// TestRunCgroupRootHoldsProcesses (cgroup v2): a cgroupRoot under a cgroup
// that holds a process and enables no controller for its children (so it
// may not: v2's no-internal-process rule) is refused at start with exit 2,
// naming cgroupRoot, the cgroup, what it enables and the pid. The v1
// counterpart is TestRunSingleProcessOOMKillOffOnV1.
func TestRunCgroupRootHoldsProcesses(t *testing.T) {
	integration.OnCgroup(t, 2)
	if os.Geteuid() != 0 {
		integration.Require(t, "run needs root")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	parent := "/nk-test-" + hex.EncodeToString(rnd[:])
	dir := filepath.Join("/sys/fs/cgroup", parent)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleep.Process.Kill()
		_ = sleep.Wait()
		if err := syscall.Rmdir(dir); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	pid := strconv.Itoa(sleep.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
		t.Fatal(err)
	}
	runRefused(t, "cgroupRoot: "+parent+"/pods\n",
		`cgroupRoot "`+parent+`/pods"`, dir+"/cgroup.subtree_control does not enable cpu, memory, pids", "holds processes ("+pid+")")
	if _, err := os.Stat(filepath.Join(dir, "pods")); !os.IsNotExist(err) {
		t.Errorf("the refused agent made %s/pods: %v", dir, err)
	}
}

// TestRunSingleProcessOOMKillOffOnV1 (cgroup v1): singleProcessOOMKill:
// false is refused at start with exit 2, as the kubelet refuses it: cgroup v1
// kills single processes only. TestRunCgroupRootHoldsProcesses is the v2
// counterpart.
func TestRunSingleProcessOOMKillOffOnV1(t *testing.T) {
	integration.OnCgroup(t, 1)
	if os.Geteuid() != 0 {
		integration.Require(t, "run needs root")
	}
	runRefused(t, "failCgroupV1: false\nsingleProcessOOMKill: false\n", `singleProcessOOMKill: "false"`, "cgroup v1")
}
