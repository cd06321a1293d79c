package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPodFilesRefuseOtherUsers: with the agent's defaults, a local user
// other than root (uid 65534, no supplementary group) can neither list the
// root directory, the pods directory, a pod's directory or the pod logs
// directory, nor read or write a file a pod wrote in its emptyDir, nor read
// the pod's log (issue 26, item 5: the root directory was 0755, the
// emptyDir 0777 below it). The root directory an older nodekeeper left 0755
// is 0750 after the start; the container's log file is 0640; a container
// running as uid 65534 still writes in the emptyDir.
func TestPodFilesRefuseOtherUsers(t *testing.T) {
	a := StartAgent(t, Options{Prepare: func(a *Agent) {
		// The test's directory is 0700: open it, so that only the modes
		// the agent sets stand between the user and the pod's files; and
		// leave the root directory as an older nodekeeper made it.
		if err := os.Chmod(a.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(a.Root, "pods"), 0o755); err != nil {
			t.Fatal(err)
		}
	}})
	a.apply("writer.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: writer
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: main
    image: %s
    args: ["fill", "/scratch/secret", "1Ki"]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
  - name: nobody
    image: %s
    args: ["fill", "/scratch/by-nobody", "1Ki"]
    securityContext: {runAsUser: 65534, runAsGroup: 65534}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
  volumes:
  - {name: scratch, emptyDir: {}}
`, testbox, testbox))
	pod := a.WaitPod("writer", "running", running)
	podDir := filepath.Join(a.Root, "pods", string(pod.UID))
	secret := filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "scratch", "secret")
	logDir := filepath.Join(a.Logs, "default_writer_"+string(pod.UID), "main")
	logFile := filepath.Join(logDir, "0.log")
	byNobody := filepath.Join(filepath.Dir(secret), "by-nobody")
	a.Eventually("the pod wrote its files and its log", 30*time.Second, func() (bool, string) {
		for _, p := range []string{secret, byNobody, logFile} {
			if info, err := os.Stat(p); err != nil || info.Size() == 0 {
				return false, fmt.Sprintf("%s: %v", p, err)
			}
		}
		return true, ""
	})
	// A container of any user still writes in the emptyDir (0777): the
	// closed directories are above its bind mount.
	if info, err := os.Stat(byNobody); err != nil || info.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("%s: %v, want a file of uid 65534", byNobody, err)
	}
	for _, d := range []string{a.Root, filepath.Join(a.Root, "pods"), podDir, a.Logs} {
		if info, err := os.Stat(d); err != nil {
			t.Error(err)
		} else if info.Mode().Perm() != 0o750 {
			t.Errorf("%s: %v, want mode 0750", d, info.Mode())
		}
	}
	if info, err := os.Stat(logFile); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o640 {
		t.Errorf("%s: %v, want mode 0640", logFile, info.Mode())
	}
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"list the root directory", []string{"ls", a.Root}},
		{"list the pods directory", []string{"ls", filepath.Join(a.Root, "pods")}},
		{"list the pod directory", []string{"ls", podDir}},
		{"read the pod's emptyDir file", []string{"cat", secret}},
		{"write in the pod's emptyDir", []string{"touch", filepath.Join(filepath.Dir(secret), "planted")}},
		{"list the pod logs directory", []string{"ls", a.Logs}},
		{"read the pod's log", []string{"cat", logFile}},
	} {
		cmd := exec.Command(tc.cmd[0], tc.cmd[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("%s as uid 65534 (%s): %v %q, want Permission denied", tc.name, strings.Join(tc.cmd, " "), err, out)
		}
	}
}
