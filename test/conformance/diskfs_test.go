package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
)

// The DiskPressure specs of v1.36.3, as the suite names them.
const (
	specLocalStorage     = "[sig-node] LocalStorageEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specSoft             = "[sig-node] LocalStorageSoftEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specSoftNotOverwrite = "[sig-node] LocalStorageSoftEvictionNotOverwriteTerminationGracePeriodSeconds [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specPriority         = "[sig-node] PriorityLocalStorageEvictionOrdering [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specInode            = "[sig-node] InodeEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specImageGC          = "[sig-node] ImageGCNoEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specImageGCCleanup   = "[sig-node] ImageGCTerminatedPodsContainersCleanup [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause DiskPressure  should eventually evict all of the correct pods"
	specCritical         = "[sig-node] SystemNodeCriticalPod [Slow] [Serial] [Disruptive] [Feature:SystemNodeCriticalPod] [Feature:Eviction] when create a system-node-critical pod  should not be evicted upon DiskPressure"
	specMemory           = "[sig-node] MemoryAllocatableEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should cause MemoryPressure  should eventually evict all of the correct pods"
	specCapacity         = "[sig-node] LocalStorageCapacityIsolationEviction [Slow] [Serial] [Disruptive] [Feature:LocalStorageCapacityIsolationQuota] [Feature:Eviction] when we run containers that should cause evictions due to pod local storage violations  should eventually evict all of the correct pods"
)

// TestDiskPlan: each DiskPressure spec gets the filesystem its consumption
// needs, every other spec the host's; the skip of every other run matches
// exactly the DiskPressure specs.
func TestDiskPlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want diskFSPlan
		ok   bool
	}{
		{specLocalStorage, bytesPlan, true},
		{specSoft, bytesPlan, true},
		{specSoftNotOverwrite, bytesPlan, true},
		{specPriority, bytesPlan, true},
		{specInode, inodesPlan, true},
		{specImageGC, inodesPlan, true},
		{specImageGCCleanup, inodesPlan, true},
		{specCritical, criticalPlan, true},
		{specMemory, diskFSPlan{}, false},
		{specCapacity, diskFSPlan{}, false},
	} {
		got, ok := diskPlan(tc.spec)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: plan %+v, %v; want %+v, %v", tc.spec, got, ok, tc.want, tc.ok)
		}
		if skip := regexp.MustCompile(diskSpecRegexp).MatchString(tc.spec); skip != tc.ok {
			t.Errorf("%s: the host runs' skip matches %v, want %v", tc.spec, skip, tc.ok)
		}
		if _, skipped := subsystemSkipped(tc.spec); skipped {
			t.Errorf("%s: still a skip of the set", tc.spec)
		}
	}
}

// TestDiskPlanSizes: the sizes hold what the specs consume past their
// thresholds (eviction_test.go: 4 GiB, 110000 inodes at most) with room for
// the images and the overshoot, and stay bounded.
func TestDiskPlanSizes(t *testing.T) {
	t.Parallel()
	const consumed, overshoot, images = 4 * GiB, GiB, GiB / 2
	reserve := bytesPlan.size * reservedPercent / 100
	if bytesPlan.size-reserve < consumed+overshoot+images {
		t.Errorf("bytes plan %d: less than %d consumed + %d overshoot + %d images + %d reserved", bytesPlan.size, consumed, overshoot, images, reserve)
	}
	if inodesPlan.inodes < 110000+100000 {
		t.Errorf("inodes plan: %d inodes, want room for 110000 files past a threshold 100000 below the free inodes", inodesPlan.inodes)
	}
	if criticalPlan.size-criticalPlan.size*reservedPercent/100 < 200<<20+images {
		t.Errorf("critical plan %d: no room for the images and the 200 MiB past the threshold", criticalPlan.size)
	}
	for _, p := range []diskFSPlan{bytesPlan, inodesPlan, criticalPlan} {
		if p.size > 8*GiB || p.why == "" {
			t.Errorf("plan %+v: more than 8 GiB of the host's disk, or no reason", p)
		}
	}
}

// TestSplitDiskUnits: the units whose specs are DiskPressure ones run
// apart, each with its plan; the others on the host's filesystem.
func TestSplitDiskUnits(t *testing.T) {
	t.Parallel()
	names := []string{specMemory, specInode, specLocalStorage, specCritical, specCapacity}
	focus := []string{specFocus(specMemory), specFocus(specInode), specFocus(specLocalStorage), specFocus(specCapacity), specFocus(specCritical)}
	host, disk, err := splitDiskUnits(focus, names)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{specFocus(specMemory), specFocus(specCapacity)}; !slices.Equal(host, want) {
		t.Errorf("host units %q, want %q", host, want)
	}
	want := []diskUnit{{specFocus(specInode), inodesPlan}, {specFocus(specLocalStorage), bytesPlan}, {specFocus(specCritical), criticalPlan}}
	if !slices.Equal(disk, want) {
		t.Errorf("disk units %+v, want %+v", disk, want)
	}
	if _, _, err := splitDiskUnits([]string{"("}, names); err == nil {
		t.Error("a bad focus: no error")
	}
}

// TestMkfsArgs: the inode count reaches mkfs only when the plan sets it.
func TestMkfsArgs(t *testing.T) {
	t.Parallel()
	if got := strings.Join(mkfsArgs(inodesPlan, "/dev/loop9"), " "); got != "-q -F -m 5 -N 400000 /dev/loop9" {
		t.Errorf("inodes plan: %q", got)
	}
	if got := strings.Join(mkfsArgs(bytesPlan, "/dev/loop9"), " "); got != "-q -F -m 5 /dev/loop9" {
		t.Errorf("bytes plan: %q", got)
	}
}

// diskFSAvailable says why a loop-mounted filesystem cannot be made here.
func diskFSAvailable() string {
	if os.Geteuid() != 0 {
		return "root, to attach a loop device and mount"
	}
	for _, p := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " not found (Debian packages mount, e2fsprogs)"
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "no /dev/loop-control: no loop devices"
	}
	return ""
}

// TestDiskFS makes a small filesystem in the test's own directory, writes
// to it until it is full and removes it: the file is sparse and never grows
// past its size, the inodes are the plan's, a full filesystem stops the
// writer, and nothing (mount, loop device, file) is left. A killed run's
// leftovers (mounted, attached) are removed the way the driver's next run
// does.
func TestDiskFS(t *testing.T) {
	integration.Require(t, diskFSAvailable())
	base := t.TempDir()
	file, dir := filepath.Join(base, "disk.img"), filepath.Join(base, "mnt")
	plan := diskFSPlan{size: 64 << 20, inodes: 3000, why: "test"}
	d, err := makeDiskFS(t.Context(), file, dir, plan)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.remove() })
	if loopBacking(d.loop) != file {
		t.Fatalf("loop device %s: backed by %q, want %s", d.loop, loopBacking(d.loop), file)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if size := int64(st.Blocks) * st.Bsize; size > plan.size || size < plan.size/2 {
		t.Errorf("filesystem size %d, want about %d", size, plan.size)
	}
	if st.Files < 3000 || st.Files > 4096 {
		t.Errorf("inodes %d, want about 3000", st.Files)
	}
	// Fill it, as a hog does, until ENOSPC.
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	f, err := os.Create(filepath.Join(dir, "hog"))
	if err != nil {
		t.Fatal(err)
	}
	var wrote int64
	for {
		n, err := f.Write(chunk)
		wrote += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write: %v, want ENOSPC once full", err)
			}
			break
		}
		if wrote > 2*plan.size {
			t.Fatalf("wrote %d bytes to a %d-byte filesystem", wrote, plan.size)
		}
	}
	f.Close()
	var fst unix.Stat_t
	if err := unix.Stat(file, &fst); err != nil {
		t.Fatal(err)
	}
	if used := fst.Blocks * 512; used > plan.size {
		t.Errorf("the file takes %d bytes of the host's disk, more than its size %d", used, plan.size)
	}
	t.Logf("wrote %d bytes before ENOSPC; the file takes %d bytes of the host's disk", wrote, fst.Blocks*512)
	if err := d.remove(); err != nil {
		t.Fatal(err)
	}
	assertDiskFSGone(t, file, dir)

	// A killed run's: still mounted and attached; the next run removes it.
	if _, err := makeDiskFS(t.Context(), file, dir, plan); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(unmountAll(dir), removeStaleDiskFS(file)); err != nil {
		t.Fatal(err)
	}
	assertDiskFSGone(t, file, dir)
}

func assertDiskFSGone(t *testing.T, file, dir string) {
	t.Helper()
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file %s is left: %v", file, err)
	}
	if devs := loopsOf(file); len(devs) > 0 {
		t.Errorf("loop devices %v are left", devs)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mi)) {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			t.Errorf("a mount is left: %s", strings.TrimSpace(line))
		}
	}
}

// TestMountDiskUnit: a disk unit's filesystem holds the agent's root
// directory (bound on the test's stand-in for /var/lib/kubelet): what the
// agent writes there lands on it, a volume the agent mounts beneath it is
// unmounted with it, and afterwards the directory is the host's again, as
// it was, with no mount, loop device or file left. A killed run's unit is
// removed by the next one's start.
func TestMountDiskUnit(t *testing.T) {
	integration.Require(t, diskFSAvailable())
	base, kubelet := filepath.Join(t.TempDir(), "diskfs"), filepath.Join(t.TempDir(), "kubelet")
	if err := os.MkdirAll(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kubelet, "host-file"), []byte("the host's"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := diskFSPlan{size: 32 << 20, why: "test"}
	d, unmount, err := mountDiskUnit(t.Context(), base, kubelet, plan)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount() })
	if !sameFS(kubelet, d.dir) || sameFS(kubelet, base) {
		t.Fatalf("%s is not on the unit's filesystem", kubelet)
	}
	if _, err := os.Stat(filepath.Join(kubelet, "host-file")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host's directory shows through the bind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(kubelet, rootMarker)); err != nil {
		t.Errorf("the bound directory has no marker: %v", err)
	}
	vol := filepath.Join(kubelet, "pods", "u1", "volumes", "v")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kubelet, "pods", "u1", "data"), bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "kubelet", "pods", "u1", "data")); err != nil {
		t.Errorf("what the agent wrote is not on the unit's filesystem: %v", err)
	}
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	assertDiskFSGone(t, d.file, base)
	assertDiskFSGone(t, d.file, kubelet)
	if b, err := os.ReadFile(filepath.Join(kubelet, "host-file")); err != nil || string(b) != "the host's" {
		t.Errorf("the host's directory after the unit: %q, %v", b, err)
	}

	// A killed run's unit, still mounted and bound: the next start removes it.
	if _, _, err := mountDiskUnit(t.Context(), base, kubelet, plan); err != nil {
		t.Fatal(err)
	}
	d, unmount, err = mountDiskUnit(t.Context(), base, kubelet, plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	assertDiskFSGone(t, d.file, base)
	assertDiskFSGone(t, d.file, kubelet)
}
