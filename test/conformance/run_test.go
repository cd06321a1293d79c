package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestCleanKubeletRoot: a directory someone else made is refused and left
// as it was; ours is emptied, a mount beneath it (a pod volume) unmounted
// first, and the marker kept.
func TestCleanKubeletRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kubelet")
	if err := os.MkdirAll(filepath.Join(dir, "pods", "u1", "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := cleanKubeletRoot(dir)
	if err == nil || !strings.Contains(err.Error(), "not made by this program") {
		t.Fatalf("someone else's directory: err %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pods", "u1")); err != nil {
		t.Fatalf("the refused directory was changed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, rootMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mounted := false
	if os.Geteuid() == 0 {
		vol := filepath.Join(dir, "pods", "u1", "volumes")
		if err := unix.Mount("tmpfs", vol, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(vol, unix.MNT_DETACH) })
		mounted = true
	} else {
		integration.Require(t, "root, to mount a volume beneath the directory")
	}
	if err := cleanKubeletRoot(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != rootMarker {
		t.Errorf("after cleaning: %v, want only %s", entries, rootMarker)
	}
	if mounted {
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mi), dir+"/") {
			t.Errorf("a mount beneath %s is left", dir)
		}
	}
	fresh := filepath.Join(t.TempDir(), "new")
	if err := cleanKubeletRoot(fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fresh, rootMarker)); err != nil {
		t.Errorf("a directory it made lacks the marker: %v", err)
	}
}
