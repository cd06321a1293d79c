package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// runOnce runs `nodekeeper run ARGS` with root as its root directory and
// returns its exit code and stderr.
func runOnce(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append([]string{"run", "--root-dir", root}, args...), &stdout, &stderr)
	return code, stderr.String()
}

// writeConfig writes a KubeletConfiguration with body into dir.
func writeConfig(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunRefusesCgroupV1: on a cgroup v1 machine `run` refuses to start, as
// the kubelet does since 1.35, with failCgroupV1 true by default or set, and
// with LimitedSwap: exit 2, one line naming the file, the field, its value
// and cgroup v1, and the root directory is never made.
func TestRunRefusesCgroupV1(t *testing.T) {
	integration.OnCgroup(t, 1)
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"defaults", nil, []string{"(defaults)", `failCgroupV1: "true"`, "cgroup v1", "failCgroupV1: false"}},
		{"set true", []string{"--config", writeConfig(t, dir, "v1.yaml", "failCgroupV1: true\n")},
			[]string{"v1.yaml", `failCgroupV1: "true"`, "cgroup v1"}},
		{"LimitedSwap", []string{"--config", writeConfig(t, dir, "swap.yaml", "failCgroupV1: false\nfailSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n")},
			[]string{"swap.yaml", `memorySwap.swapBehavior: "LimitedSwap"`, "cgroup v1", "cgroup v2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(t.TempDir(), "root")
			code, msg := runOnce(t, root, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, msg)
			}
			if strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Errorf("stderr is not one line:\n%s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q does not name %s", msg, w)
				}
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the refused agent made its root directory (%v)", err)
			}
		})
	}
}

// TestRunHostChecksCgroupV2 is TestRunRefusesCgroupV1's counterpart: on
// cgroup v2, failCgroupV1 (the default) and LimitedSwap pass the start
// checks, and the run goes on to its root directory, which the test made
// impossible (a path under a file): exit 1 naming it. With swap on, the
// default failSwapOn refuses as the kubelet does: exit 2 naming failSwapOn
// and the swap device.
func TestRunHostChecksCgroupV2(t *testing.T) {
	integration.OnCgroup(t, 2)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(file, "root") // MkdirAll fails: not a directory
	for _, body := range []string{"failSwapOn: false\n", "failSwapOn: false\nmemorySwap: {swapBehavior: LimitedSwap}\n"} {
		code, msg := runOnce(t, blocked, "--config", writeConfig(t, dir, "ok.yaml", body))
		if code != 1 || !strings.Contains(msg, "root directory") || strings.Contains(msg, "failCgroupV1") || strings.Contains(msg, "swapBehavior") {
			t.Errorf("config %q: exit %d, stderr %q; want exit 1 on the root directory", body, code, msg)
		}
	}
	integration.SwapOn(t, 16<<20)
	root := filepath.Join(t.TempDir(), "root")
	code, msg := runOnce(t, root)
	if code != exitUsage || !strings.Contains(msg, `failSwapOn: "true"`) || !strings.Contains(msg, "/proc/swaps lists /dev/") {
		t.Errorf("defaults with swap on: exit %d, stderr %q; want exit 2 naming failSwapOn and the swap device", code, msg)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the refused agent made its root directory (%v)", err)
	}
}
