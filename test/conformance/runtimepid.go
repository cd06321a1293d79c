package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The suite finds "the container runtime" through --container-runtime-pid-file
// (a file holding a pid in decimal, nothing else), falling back to
// `pidof --container-runtime-process-name`, and SIGKILLs what it finds
// (Restart ... should recover from ip leak) or reads its oom_score_adj
// (Container Manager Misc). The driver points it at a pid file that holds the
// run's own containerd while it runs, and at a process name no process has,
// so that the fallback finds nothing: the suite can reach no other process.

// runtimeProcessName is the suite's --container-runtime-process-name: no
// process is called that, so that `pidof` finds nothing.
const runtimeProcessName = "nkconf-runtime-is-in-the-pid-file"

// runtimePidFile is the suite's --container-runtime-pid-file of the
// containerd on stateDir.
func runtimePidFile(stateDir string) string { return filepath.Join(stateDir, "runtime.pid") }

// recordRuntime writes pid, the containerd the driver just started, to path,
// and removes the file once that process has exited (unless a later call
// wrote another pid), so that the file never names a pid the kernel may
// have given to another process; gone is closed then. It is
// containerd.Config.Place's work.
func recordRuntime(path string, pid int) (gone <-chan struct{}, err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of containerd %d: %w", pid, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		unix.Close(fd)
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			// A pidfd polls readable when its process exits.
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if b, err := os.ReadFile(path); err == nil && string(b) == strconv.Itoa(pid) {
			_ = os.Remove(path)
		}
	}()
	return done, nil
}
