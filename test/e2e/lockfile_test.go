package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLockFileContention: the kubelet's --lock-file and
// --exit-on-lock-contention, as the node e2e spec "Lock contention" drives
// them: another process opening the lock file stops the agent (exit 0, its
// pods left running, as on SIGTERM); a new agent waits while the lock is
// held, not healthy, and starts once it is released, adopting the pod.
func TestLockFileContention(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "kubelet.lock")
	a := StartAgent(t, Options{Args: []string{"--lock-file", lock, "--exit-on-lock-contention"}})
	a.WriteManifest("web.yaml", webManifest("web", "lock"))
	before := a.WaitPod("web-e2e", "running", running)
	ctr := before.Status.ContainerStatuses[0].ContainerID
	pid := a.ContainerPID(ctr)

	// The contender: it opens the file, as the spec (and a second kubelet) does.
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(slow(t, 30*time.Second)):
		t.Fatalf("the agent still runs %v after another process opened its lock file:\n%s", slow(t, 30*time.Second), a.Log())
	}
	a.mu.Lock()
	a.cmd = nil
	a.mu.Unlock()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the agent exited %d on lock contention, want 0:\n%s", code, a.Log())
	}
	if !strings.Contains(a.Log(), "another process opened the lock file") {
		t.Errorf("the log does not say why the agent stopped:\n%s", a.Log())
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the container process %d died with the agent: %v", pid, err)
	}

	// The contender takes the lock: the next agent waits for it.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the lock is still held after the agent exited: %v", err)
	}
	released := make(chan struct{})
	go func() {
		// Not a.Eventually: this is not the test's goroutine. It polls the
		// agent's log, an outside process's output.
		defer close(released)
		defer func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }()
		for deadline := time.Now().Add(slow(t, 60*time.Second)); !strings.Contains(a.Log(), "waiting for the lock file"); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the new agent never said it waits for the lock file:\n%s", a.Log())
				return
			}
		}
		if resp, err := a.Client().Get("http://localhost/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("the agent answers /healthz (%s) while another process holds its lock file", resp.Status)
		}
	}()
	a.Start() // returns once /healthz answers ok: after the release
	<-released
	after := a.WaitPod("web-e2e", "running after the lock was released", running)
	if c := after.Status.ContainerStatuses[0]; c.ContainerID != ctr || c.RestartCount != 0 {
		t.Errorf("after the lock was released: container %s restarts %d; want %s and 0", c.ContainerID, c.RestartCount, ctr)
	}
}
