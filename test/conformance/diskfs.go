package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"
)

// The DiskPressure specs fill the node's filesystem (4 GiB, or 100000
// inodes, and SystemNodeCriticalPod's hog writes up to 10 GiB that is never
// evicted). Each runs as a unit of its own on a small filesystem made for it:
// a sparse file of bounded size, formatted ext4 and loop-mounted, holding the
// agent's root directory (kubeletRoot, nodefs to the agents) and the root and
// state of a containerd of the unit's (imagefs and the containers' writable
// layers: the specs whose hogs write into the container measure them as
// nodefs, one filesystem as on this machine). The host's disk grows by at
// most the file's size, and the file is removed after the unit.

// GiB is 2^30 bytes.
const GiB = 1 << 30

// diskFSPlan is the filesystem a DiskPressure spec runs on.
type diskFSPlan struct {
	// size is the sparse file's, and the filesystem's, size in bytes.
	size int64
	// inodes is mkfs.ext4's -N, 0 for its default (one per 16 KiB).
	inodes int64
	// why says how size and inodes were chosen, for the driver's log.
	why string
}

// reservedPercent is mkfs.ext4's -m: blocks only root with CAP_SYS_RESOURCE
// may use. The agents and containerd have it; the specs' containers do
// not, so a hog that fills the filesystem (ENOSPC) leaves the agent and
// containerd room to write their state, and statfs's available (nodefs
// available to the agents) excludes them.
const reservedPercent = 5

// Plans, from the specs (eviction_test.go, system_node_critical_test.go of
// v1.36.3). Each spec sets its threshold from the available space or inodes
// it reads when it starts, so the filesystem needs only enough above what
// the spec consumes, plus the unit's images (a few hundred MiB unpacked),
// the ext4 journal and inode tables, and the reserve.
var (
	// bytesPlan: LocalStorage(Soft)Eviction, ...NotOverwrite... and
	// PriorityLocalStorageEvictionOrdering consume 4 GiB past the threshold
	// (and skip with less than 4 GiB available). Their hogs write 1 MiB per
	// 0.1 s (two hogs at once in the priority spec) until evicted, 10 GiB at
	// most: after the threshold, soft eviction waits its 1 min grace period
	// and the pod's 30 s, about 1 GiB more at 10 MiB/s.
	bytesPlan = diskFSPlan{size: 7 * GiB,
		why: "4 GiB consumed past the threshold, about 1 GiB written until a soft eviction kills the hog, the images, journal, inode tables and the 5% reserve"}
	// inodesPlan: InodeEviction (100000 inodes past the threshold, its hog
	// would make 10^9), ImageGCNoEviction (110000 files, threshold 100000)
	// and ImageGCTerminatedPodsContainersCleanup (2 x 30000, threshold
	// 50000). Empty files need inodes, hardly any blocks.
	inodesPlan = diskFSPlan{size: 2 * GiB, inodes: 400000,
		why: "inodes: 110000 files past the threshold at most, the images' files and room for the hog's overshoot; the bytes hold the images"}
	// criticalPlan: SystemNodeCriticalPod sets its threshold 200 MiB below
	// the available space and its static pod, never evicted, writes 10 MiB
	// per 0.1 s up to 10 GiB: the filesystem bounds it (its container gets
	// ENOSPC once the unreserved blocks are gone).
	criticalPlan = diskFSPlan{size: 2 * GiB,
		why: "200 MiB past the threshold; the critical pod's hog (up to 10 GiB, never evicted) fills it and gets ENOSPC, the 5% reserve keeps the agent and containerd writing"}
)

// diskSpecs are the DiskPressure specs, each with its filesystem.
var diskSpecs = []struct {
	re   *regexp.Regexp
	plan diskFSPlan
}{
	{regexp.MustCompile(`^\[sig-node\] (LocalStorageEviction|LocalStorageSoftEviction|LocalStorageSoftEvictionNotOverwriteTerminationGracePeriodSeconds|PriorityLocalStorageEvictionOrdering) .*DiskPressure`), bytesPlan},
	{regexp.MustCompile(`^\[sig-node\] (InodeEviction|ImageGCNoEviction|ImageGCTerminatedPodsContainersCleanup) .*DiskPressure`), inodesPlan},
	{regexp.MustCompile(`^\[sig-node\] SystemNodeCriticalPod .*DiskPressure`), criticalPlan},
}

// diskSpecRegexp matches every spec of diskSpecs: no other run (one on the
// host's filesystem) may run them.
const diskSpecRegexp = `(LocalStorage(Soft)?Eviction|LocalStorageSoftEvictionNotOverwriteTerminationGracePeriodSeconds|InodeEviction|ImageGCNoEviction|ImageGCTerminatedPodsContainersCleanup|PriorityLocalStorageEvictionOrdering|SystemNodeCriticalPod) .*DiskPressure`

// diskPlan returns the filesystem spec runs on; ok is false for a spec that
// runs on the host's.
func diskPlan(spec string) (diskFSPlan, bool) {
	for _, d := range diskSpecs {
		if d.re.MatchString(spec) {
			return d.plan, true
		}
	}
	return diskFSPlan{}, false
}

// diskUnit is a unit of specs that runs on a filesystem of its own.
type diskUnit struct {
	focus string // the unit's ginkgo focus
	plan  diskFSPlan
}

// splitDiskUnits splits focus, the units of a run (durationChunk's), into
// those that run on the host's filesystem and the disk units: a unit is one
// when a spec of names it focuses on is in diskSpecs. A disk unit whose
// specs want different plans takes the largest.
func splitDiskUnits(focus, names []string) (host []string, disk []diskUnit, err error) {
	for _, f := range focus {
		re, err := regexp.Compile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("focus %q: %w", f, err)
		}
		var u *diskUnit
		for _, n := range names {
			p, ok := diskPlan(n)
			if !ok || !re.MatchString(n) {
				continue
			}
			if u == nil {
				u = &diskUnit{focus: f, plan: p}
			} else if p.size > u.plan.size || p.size == u.plan.size && p.inodes > u.plan.inodes {
				u.plan = p
			}
		}
		if u != nil {
			disk = append(disk, *u)
		} else {
			host = append(host, f)
		}
	}
	return host, disk, nil
}

// diskFS is a made, mounted filesystem of a file's own.
type diskFS struct {
	file string // the sparse file
	loop string // its loop device, /dev/loopN
	dir  string // where it is mounted
}

// mkfsArgs is mkfs.ext4's command line for plan on dev.
func mkfsArgs(plan diskFSPlan, dev string) []string {
	args := []string{"-q", "-F", "-m", fmt.Sprint(reservedPercent)}
	if plan.inodes > 0 {
		args = append(args, "-N", fmt.Sprint(plan.inodes))
	}
	return append(args, dev)
}

// makeDiskFS creates file (sparse, plan.size bytes), attaches it to a loop
// device, formats it ext4 and mounts it on dir (made if missing). On error
// it undoes what it did. The caller removes it with remove, whatever
// happens after.
func makeDiskFS(ctx context.Context, file, dir string, plan diskFSPlan) (*diskFS, error) {
	if plan.size <= 0 {
		return nil, fmt.Errorf("filesystem %s: size %d: want more than 0", file, plan.size)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(plan.size) // sparse: nothing written yet
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	d := &diskFS{file: file, dir: dir}
	if err != nil {
		return nil, errors.Join(err, d.remove())
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("losetup --find --show %s: %w: %s", file, err, out), d.remove())
	}
	d.loop = strings.TrimSpace(string(out))
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", mkfsArgs(plan, d.loop)...).CombinedOutput(); err != nil {
		return nil, errors.Join(fmt.Errorf("mkfs.ext4 %s (%s): %w: %s", d.loop, file, err, out), d.remove())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Join(err, d.remove())
	}
	if err := unix.Mount(d.loop, dir, "ext4", 0, ""); err != nil {
		return nil, errors.Join(fmt.Errorf("mount %s (%s) on %s: %w", d.loop, file, dir, err), d.remove())
	}
	return d, nil
}

// remove unmounts everything under d.dir and d.dir itself, detaches the
// loop device and deletes the file. It does what it can and returns every
// error; it is safe to call again.
func (d *diskFS) remove() error {
	var errs []error
	if d.dir != "" {
		errs = append(errs, unmountAll(d.dir))
	}
	if d.loop != "" {
		if out, err := exec.Command("losetup", "--detach", d.loop).CombinedOutput(); err != nil && loopBacking(d.loop) == d.file {
			errs = append(errs, fmt.Errorf("losetup --detach %s: %w: %s", d.loop, err, out))
		}
	}
	errs = append(errs, removeStaleDiskFS(d.file))
	return errors.Join(errs...)
}

// removeStaleDiskFS detaches every loop device backed by file (a killed
// run's) and removes file; a missing file is no error. Nothing may be
// mounted from those devices any more (unmountAll the directory first).
func removeStaleDiskFS(file string) error {
	var errs []error
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, dev := range loopsOf(file) {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup --detach %s: %w: %s", dev, err, out))
		}
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loopsOf returns the loop devices backed by file, read from
// /sys/block/loopN/loop/backing_file.
func loopsOf(file string) []string {
	devs, _ := filepath.Glob("/sys/block/loop*")
	var out []string
	for _, d := range devs {
		dev := "/dev/" + filepath.Base(d)
		if loopBacking(dev) == file {
			out = append(out, dev)
		}
	}
	return out
}

// loopBacking is the file behind loop device dev, "" when none.
func loopBacking(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// describe is what the driver logs of the filesystem: its size, inodes,
// and what statfs says is free.
func (d *diskFS) describe() []any {
	var st unix.Statfs_t
	if err := unix.Statfs(d.dir, &st); err != nil {
		return []any{"file", d.file, "statfsError", err}
	}
	return []any{"file", d.file, "device", d.loop, "dir", d.dir,
		"sizeBytes", int64(st.Blocks) * st.Bsize, "availableBytes", int64(st.Bavail) * st.Bsize,
		"inodes", st.Files, "inodesFree", st.Ffree}
}

// sameFS reports whether paths a and b are on one filesystem (st_dev).
func sameFS(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// mountDiskUnit makes a disk unit's filesystem, base/disk.img mounted on
// base/mnt, and binds its kubelet directory on kubeletDir (the agent's root
// directory, which cleanKubeletRoot has checked is this program's), with
// the marker of a directory of this program's in it. It first removes what
// a killed run left (binds, mount, loop device, file). unmount undoes it
// all, kubeletDir's bind and what the agent mounted beneath it first, and
// may be called once whatever happened.
func mountDiskUnit(ctx context.Context, base, kubeletDir string, plan diskFSPlan) (_ *diskFS, unmount func() error, err error) {
	file, dir := filepath.Join(base, "disk.img"), filepath.Join(base, "mnt")
	if err := errors.Join(unmountAll(kubeletDir), unmountAll(dir), removeStaleDiskFS(file)); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, nil, err
	}
	d, err := makeDiskFS(ctx, file, dir, plan)
	if err != nil {
		return nil, nil, err
	}
	unmount = func() error { return errors.Join(unmountAll(kubeletDir), d.remove()) }
	defer func() {
		if err != nil {
			err = errors.Join(err, unmount())
		}
	}()
	kdir := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(kubeletDir, 0o755); err != nil {
		return nil, nil, err
	}
	if err := unix.Mount(kdir, kubeletDir, "", unix.MS_BIND, ""); err != nil {
		return nil, nil, fmt.Errorf("bind %s on %s: %w", kdir, kubeletDir, err)
	}
	// The bound directory is this program's too: a killed run's next
	// cleanKubeletRoot finds the marker and unmounts it.
	if err := os.WriteFile(filepath.Join(kubeletDir, rootMarker), []byte("made by nodekeeper's test/conformance: a DiskPressure unit's filesystem\n"), 0o644); err != nil {
		return nil, nil, err
	}
	if !sameFS(kubeletDir, dir) {
		return nil, nil, fmt.Errorf("%s is not on the unit's filesystem (%s) after the bind", kubeletDir, d.loop)
	}
	return d, unmount, nil
}
