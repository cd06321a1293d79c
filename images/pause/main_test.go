package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// build compiles pause as images/mkimage does and returns the binary's path.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command(toolbuild.GoTool(), "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// wait waits for cmd to exit, failing t after a deadline.
func wait(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause did not exit")
		return nil
	}
}

// start starts cmd and waits until pause handles signals: it closes its
// stdout then.
func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, stdout)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause never closed its stdout")
	}
}

func TestExitsZeroOnSignal(t *testing.T) {
	t.Parallel()
	bin := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin)
			start(t, cmd)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, cmd); err != nil {
				t.Errorf("pause after %v: %v, want exit 0", sig, err)
			}
		})
	}
}

func TestRejectsArguments(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(build(t), "x").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("pause x: %v, want exit 2", err)
	}
	if got := string(out); got != "usage: pause (takes no arguments)\n" {
		t.Errorf("output %q", got)
	}
}

// As PID 1 of a PID namespace, pause reaps an orphan that exits: it does not
// stay a zombie.
func TestReapsOrphans(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		integration.Require(t, "a PID namespace needs root")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		integration.Require(t, "nsenter not found (Debian package util-linux)")
	}
	cmd := exec.Command(build(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	start(t, cmd)
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := wait(t, cmd); err != nil {
			t.Errorf("pause: %v", err)
		}
	}()
	pid := cmd.Process.Pid
	// sh leaves a child behind and exits: the child is reparented to pause,
	// the namespace's init, and exits shortly after.
	out, err := exec.Command(nsenter, "--target", strconv.Itoa(pid), "--pid", "--", "sh", "-c", "sleep 1 </dev/null >/dev/null 2>&1 & exit 0").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	children := func() []string {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}
	deadline := time.Now().Add(20 * time.Second)
	seen := false
	for time.Now().Before(deadline) {
		c := children()
		if len(c) > 0 {
			seen = true
		} else if seen {
			return // adopted, exited and reaped
		}
		<-time.After(10 * time.Millisecond) // polling another process, not waiting for a goroutine
	}
	t.Fatalf("pause's children: seen %t, still %v (a zombie not reaped)", seen, children())
}
