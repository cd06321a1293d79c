package podruntime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// asNobody runs name with args as uid and gid 65534 with no supplementary
// group (root's group would open what is 0750), and returns its output and
// error.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPodDirsRefuseOtherUsers: a sync makes PodsDir, PodsDir/<uid> and its
// volumes directory 0750, and takes the others' permissions away from ones
// an older version made 0755, so that a local user other than root can
// neither list them nor read or write a file a container put in an
// emptyDir (0777 itself, for containers of any user) nor read the pod's
// hosts file, nor list the pod logs directory, which a sync makes 0750
// (issue 26, item 5).
func TestPodDirsRefuseOtherUsers(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "running a command as another user needs root")
	}
	f := newFixture(t)
	// The test's own temporary directories are 0700: open them, so that
	// only the modes the pod runtime sets stand between the user and the
	// pod's files.
	for _, d := range []string{filepath.Dir(f.dir), f.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod := testPod(func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	})
	podsDir := filepath.Join(f.dir, "pods")
	podDir := filepath.Join(podsDir, string(pod.UID))
	// What an older nodekeeper left: the pods and pod directories 0755.
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{podsDir, podDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if res := f.sync(t, pod); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, d := range []string{podsDir, podDir, filepath.Join(podDir, "volumes")} {
		if _, mode := ownerOf(t, d); mode.Perm() != 0o750 {
			t.Errorf("%s mode %v, want 0750", d, mode.Perm())
		}
	}
	emptyDir := emptyDirPath(podsDir, string(pod.UID), "scratch")
	if _, mode := ownerOf(t, emptyDir); mode.Perm() != 0o777 {
		t.Errorf("emptyDir mode %v, want 0777 (containers of any user write in it)", mode.Perm())
	}
	secret := filepath.Join(emptyDir, "secret")
	if err := os.WriteFile(secret, []byte("DB_PASSWORD=x\n"), 0o644); err != nil { // as a container would
		t.Fatal(err)
	}
	hosts := etcHostsPath(podsDir, string(pod.UID))
	if _, err := os.Stat(hosts); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"list the pods directory", []string{"ls", podsDir}},
		{"list the pod directory", []string{"ls", podDir}},
		{"list the emptyDir", []string{"ls", emptyDir}},
		{"read a file in the emptyDir", []string{"cat", secret}},
		{"write a file in the emptyDir", []string{"touch", filepath.Join(emptyDir, "planted")}},
		{"read the hosts file", []string{"cat", hosts}},
		{"list the pod logs directory", []string{"ls", filepath.Join(f.dir, "logs")}},
	} {
		out, err := asNobody(t, tc.cmd[0], tc.cmd[1:]...)
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("%s as uid 65534 (%s): %v %q, want Permission denied", tc.name, strings.Join(tc.cmd, " "), err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(emptyDir, "planted")); err == nil {
		t.Errorf("uid 65534 made a file in the pod's emptyDir")
	}
}
