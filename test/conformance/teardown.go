package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// An interrupted run must stop everything it started: containerd and its
// shims die with the driver, but the containers' processes (each sandbox's
// /pause, the specs' containers) outlive them in the pods' cgroups, and the
// CNI bridge stays. runEnd is what the driver removes at the end of each
// containerd's use, interrupted or not.

// runCgroup is the cgroup the agents make their pods' cgroups in: the
// cgroupRoot of baseKubeletConfig ("/") and the kubelet's kubepods.
const runCgroup = "kubepods"

// runEnd names what one containerd's run made, to be removed at its end.
type runEnd struct {
	// endpoint is the containerd's CRI endpoint: its sandboxes are stopped
	// and removed.
	endpoint string
	// stopRuntime stops that containerd (and waits for it); nil: the
	// caller does.
	stopRuntime func()
	// cgroupFS is the cgroup filesystem's mount (/sys/fs/cgroup); cgroup
	// the run's cgroup beneath it in each hierarchy, "" for none. The
	// processes left in it and beneath are killed and the cgroups removed.
	cgroupFS, cgroup string
	// bridge is the CNI bridge to delete, "" for none.
	bridge string
}

// ended is what end removed.
type ended struct {
	Sandboxes int      // stopped and removed through CRI
	Killed    []int    // processes left in the run's cgroups, killed
	Cgroups   []string // cgroup directories removed
	Bridge    string   // the bridge deleted, "" if none
}

// end stops and removes the sandboxes of e's containerd through CRI, stops
// it, kills what is left in e's cgroups (found through their cgroup.procs
// only, never by name), removes those cgroups, deepest first, and deletes
// e's bridge. It does all it can and returns every error with what it
// removed. Callers pass a context that an interrupt does not cancel.
func (e runEnd) end(ctx context.Context) (ended, error) {
	var done ended
	var errs []error
	if e.endpoint != "" {
		n, err := clearPods(ctx, e.endpoint)
		done.Sandboxes = n
		if err != nil {
			errs = append(errs, fmt.Errorf("stop the pods: %w", err))
		}
	}
	if e.stopRuntime != nil {
		e.stopRuntime()
	}
	if e.cgroup != "" {
		killed, removed, err := removeCgroups(ctx, e.cgroupFS, e.cgroup)
		done.Killed, done.Cgroups = killed, removed
		errs = append(errs, err)
	}
	if e.bridge != "" && linkExists(e.bridge) {
		if out, err := exec.CommandContext(ctx, "ip", "link", "delete", e.bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", e.bridge, err, out))
		} else {
			done.Bridge = e.bridge
		}
	}
	return done, errors.Join(errs...)
}

// log writes what end removed.
func (d ended) log(log *slog.Logger, what string) {
	log.Info("stopped what the run started", "what", what, "sandboxes", d.Sandboxes,
		"killed", d.Killed, "cgroupsRemoved", len(d.Cgroups), "bridge", d.Bridge)
}

// linkExists reports whether the network interface name exists.
func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// cgroupHierarchies are the directories of cgroupFS holding a hierarchy:
// cgroupFS itself on cgroup v2, its subdirectories (not the links such as
// cpu -> cpu,cpuacct) on v1.
func cgroupHierarchies(cgroupFS string) []string {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		return []string{cgroupFS}
	}
	entries, _ := os.ReadDir(cgroupFS)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return out
}

// cgroupExists reports whether cgroup is in any hierarchy of cgroupFS.
func cgroupExists(cgroupFS, cgroup string) bool {
	for _, h := range cgroupHierarchies(cgroupFS) {
		if _, err := os.Stat(filepath.Join(h, cgroup)); err == nil {
			return true
		}
	}
	return false
}

// cgroupDirs lists cgroup and every cgroup beneath it in every hierarchy,
// deepest first.
func cgroupDirs(cgroupFS, cgroup string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies(cgroupFS) {
		filepath.WalkDir(filepath.Join(h, cgroup), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortStableFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// cgroupProcs reads the pids in dir's cgroup.procs.
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeCgroups SIGKILLs the processes in cgroup and beneath it, in every
// hierarchy of cgroupFS (never this process), waits up to a minute for
// them to leave and removes the cgroups, deepest first. It returns the pids
// killed and the directories removed.
func removeCgroups(ctx context.Context, cgroupFS, cgroup string) (killed []int, removed []string, err error) {
	if cgroup == "" || cgroup == "/" || strings.Contains(cgroup, "..") {
		return nil, nil, fmt.Errorf("cgroup %q: want a cgroup below the root", cgroup)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		dirs := cgroupDirs(cgroupFS, cgroup)
		var left []string
		for _, d := range dirs {
			for _, pid := range cgroupProcs(d) {
				if pid == os.Getpid() {
					continue
				}
				if !slices.Contains(killed, pid) {
					killed = append(killed, pid)
				}
				syscall.Kill(pid, syscall.SIGKILL) // ESRCH: gone meanwhile
			}
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				removed = append(removed, d)
			} else {
				left = append(left, d)
			}
		}
		if len(left) == 0 {
			return killed, removed, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return killed, removed, fmt.Errorf("cgroups %v of the run are left: their processes did not exit", left)
		}
		time.Sleep(50 * time.Millisecond) // other processes' exit: nothing to wait on
	}
}
