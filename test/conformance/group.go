package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runGroup runs cmd (ginkgo) as the leader of a process group of its own
// and, once it has exited for whatever reason (done, interrupted, killed),
// ends what is left of its group: the suite's processes, its API services,
// the supervisor and the agent all stay in it (none of them starts a group of
// its own), so nothing of the run outlives it or holds its ports. A terminal's
// Ctrl-C reaches only the driver, which interrupts ginkgo (cmd.Cancel).
// What is left gets SIGTERM, and SIGKILL after grace.
func runGroup(cmd *exec.Cmd, grace time.Duration) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid := cmd.Process.Pid
	err := cmd.Wait()
	// The group outlives its leader while a member lives, and Linux does not
	// give a live group's id to a new process: the id still names this group.
	if kerr := endGroup(pgid, grace, 30*time.Second); kerr != nil {
		return errors.Join(err, kerr)
	}
	return err
}

// endGroup sends SIGTERM to the members of process group pgid, SIGKILL to
// those left after grace, and waits up to wait more for them to be gone.
func endGroup(pgid int, grace, wait time.Duration) error {
	if len(groupMembers(pgid)) == 0 {
		return nil
	}
	unix.Kill(-pgid, unix.SIGTERM) // ESRCH: gone meanwhile
	if waitGroupGone(pgid, grace) {
		return nil
	}
	unix.Kill(-pgid, unix.SIGKILL)
	if waitGroupGone(pgid, wait) {
		return nil
	}
	return fmt.Errorf("processes %v of the run's group %d are left after SIGKILL", groupMembers(pgid), pgid)
}

// waitGroupGone polls until group pgid has no live member, up to d.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if len(groupMembers(pgid)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond) // other processes: nothing to wait on
	}
}

// groupMembers lists the live processes (zombies left out: they hold no
// files or ports) whose process group is pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}
