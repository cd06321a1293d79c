package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunBadInput: configuration and flag errors end `run` before it starts
// anything, with exit 2 and one line naming the field or flag and the value.
func TestRunBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := filepath.Join(dir, "root")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"systemd driver", []string{"--config", write("systemd.yaml", "cgroupDriver: systemd\n")}, []string{"systemd.yaml", "cgroupDriver", `"systemd"`}},
		{"bad podCIDR", []string{"--config", write("cidr.yaml", "podCIDR: 10.1.2.3/40\n")}, []string{"cidr.yaml", "podCIDR", `"10.1.2.3/40"`}},
		{"unknown field", []string{"--config", write("unknown.yaml", "evictionHardd: {}\n")}, []string{"unknown.yaml", "evictionHardd"}},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml"}},
		{"unknown flag", []string{"--no-such-flag"}, []string{"--no-such-flag"}},
		{"bad verbosity", []string{"--v", "x"}, []string{"--v", `"x"`}},
		{"bad node IP", []string{"--node-ip", "10.1.2"}, []string{"--node-ip", `"10.1.2"`}},
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "kc")}, []string{"--kubeconfig", filepath.Join(dir, "kc")}},
		{"malformed kubeconfig", []string{"--kubeconfig", write("kubeconfig", "clusters: [\n")}, []string{"--kubeconfig", "kubeconfig"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), append([]string{"run", "--root-dir", root}, tc.args...), &stdout, &stderr)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Errorf("stderr is not one line:\n%s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q does not name %s", msg, w)
				}
			}
		})
	}
}

// TestRunRootDirLocked: a second agent on a root directory in use is refused
// with exit 2, naming the directory, and touches nothing.
func TestRunRootDirLocked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f, err := os.OpenFile(filepath.Join(root, "nodekeeper.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"run", "--root-dir", root}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "another nodekeeper is running") || !strings.Contains(stderr.String(), root) {
		t.Fatalf("exit %d, stderr %q: want exit 2 saying another nodekeeper runs on %s", code, stderr.String(), root)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("the refused agent left %d entries in the root dir, want only the lock", len(entries))
	}
}
