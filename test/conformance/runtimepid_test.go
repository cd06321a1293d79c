package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRecordRuntime: the pid file holds the process's pid as the suite
// parses it (strconv.Atoi of the whole file) while it runs, and is removed
// once it has exited, so it never names a pid the kernel may reuse.
func TestRecordRuntime(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	path := runtimePidFile(t.TempDir())
	gone, err := recordRuntime(path, cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(string(b)); err != nil || pid != cmd.Process.Pid {
		t.Errorf("pid file %q: %d, %v; want %d as the suite reads it", b, pid, err, cmd.Process.Pid)
	}
	select {
	case <-gone:
		t.Fatal("the watch ended while the process runs")
	default:
	}
	_ = cmd.Process.Kill() // the test's own child
	_ = cmd.Wait()
	<-gone
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the pid file outlived its process: %v", err)
	}
}

// TestRecordRuntimeKeepsNewerPid: the watch of an exited containerd does
// not remove a file a later start rewrote with its own pid.
func TestRecordRuntimeKeepsNewerPid(t *testing.T) {
	t.Parallel()
	first, second := exec.Command("sleep", "300"), exec.Command("sleep", "300")
	for _, c := range []*exec.Cmd{first, second} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	path := runtimePidFile(t.TempDir())
	gone, err := recordRuntime(path, first.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recordRuntime(path, second.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	<-gone
	if b, err := os.ReadFile(path); err != nil || string(b) != strconv.Itoa(second.Process.Pid) {
		t.Errorf("pid file %q, %v; want the second pid %d", b, err, second.Process.Pid)
	}
}

// TestRuntimeProcessNameFindsNothing: the suite's fallback, pidof of
// --container-runtime-process-name, finds no process on this machine.
func TestRuntimeProcessNameFindsNothing(t *testing.T) {
	t.Parallel()
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	if len(comms) == 0 {
		t.Fatal("no /proc/*/comm: /proc is needed")
	}
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if err != nil {
			continue // exited meanwhile
		}
		// comm is at most 15 bytes: compare the name's prefix too.
		if name := strings.TrimSpace(string(b)); name == runtimeProcessName || strings.HasPrefix(runtimeProcessName, name) && len(name) == 15 {
			t.Errorf("%s is %q: the suite's pidof would find it", c, name)
		}
	}
}
