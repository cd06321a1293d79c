package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// TestSetUpDataDirsRefuseOtherUsers: on a root directory an older
// nodekeeper left 0755 (with pods/ 0755 and a pod's emptyDir 0777 holding a
// file), setUpDataDirs leaves the root and pods directories 0750, and a
// local user other than root (uid 65534, no supplementary group) can
// neither list them nor read or write in the emptyDir below (issue 26,
// item 5). A new root directory is made 0750.
func TestSetUpDataDirsRefuseOtherUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "running a command as another user needs root")
	}
	// The test's temporary directories are 0700: open them, so that only
	// the modes setUpDataDirs sets stand between the user and the files.
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(base, "root")
	emptyDir := filepath.Join(root, "pods", "uid-1", "volumes", "kubernetes.io~empty-dir", "scratch")
	if err := os.MkdirAll(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "pods"), filepath.Join(root, "pods", "uid-1")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(emptyDir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(emptyDir, "secret")
	if err := os.WriteFile(secret, []byte("DB_PASSWORD=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setUpDataDirs(root); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "pods")} {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o750 {
			t.Errorf("%s mode %v, want 0750", d, info.Mode().Perm())
		}
	}
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"list the root directory", []string{"ls", root}},
		{"list a pod's directory", []string{"ls", filepath.Join(root, "pods", "uid-1")}},
		{"read a file in an emptyDir", []string{"cat", secret}},
		{"write a file in an emptyDir", []string{"touch", filepath.Join(emptyDir, "planted")}},
	} {
		cmd := exec.Command(tc.cmd[0], tc.cmd[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("%s as uid 65534 (%s): %v %q, want Permission denied", tc.name, strings.Join(tc.cmd, " "), err, out)
		}
	}

	fresh := filepath.Join(base, "fresh")
	if err := setUpDataDirs(fresh); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{fresh, filepath.Join(fresh, "pods")} {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o750 {
			t.Errorf("new %s mode %v, want 0750", d, info.Mode().Perm())
		}
	}
}
