package stats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// nodefsProvider is a provider over the nodefs fixture's /proc whose statfs
// knows the mount points in figures.
func nodefsProvider(t *testing.T, proc string, figures map[string]unix.Statfs_t) *Provider {
	t.Helper()
	p, err := New(Config{ProcRoot: proc, CgroupFSRoot: "testdata/containers/v1/cgroup", RootDir: t.TempDir()},
		Deps{Statfs: func(path string, st *unix.Statfs_t) error {
			f, ok := figures[path]
			if !ok {
				return errors.New("no such mount")
			}
			*st = f
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNodeFilesystems reads the fixture's mountinfo and diskstats: the two
// block devices, each once (vda1's bind mount, tmpfs, overlay and the loop
// device's squashfs are left out), with statfs's figures and the device's
// counters.
func TestNodeFilesystems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := nodefsProvider(t, "testdata/nodefs/proc", map[string]unix.Statfs_t{
			"/":     {Bsize: 4096, Blocks: 1000, Bfree: 400, Bavail: 350, Files: 5000, Ffree: 4000},
			"/data": {Bsize: 1024, Blocks: 200, Bfree: 200, Bavail: 200, Files: 64, Ffree: 61},
		})
		got, err := p.NodeFilesystems()
		if err != nil {
			t.Fatal(err)
		}
		want := []NodeFilesystem{
			{Device: "/dev/vda1", Mountpoint: "/", Time: t0, Capacity: 4096000, Usage: 2457600, Available: 1433600, Inodes: 5000, InodesFree: 4000,
				IO: DiskIO{ReadsCompleted: 8990, ReadsMerged: 298, SectorsRead: 719000, ReadTime: 4990 * time.Millisecond,
					WritesCompleted: 6990, WritesMerged: 1990, SectorsWrite: 559000, WriteTime: 8990 * time.Millisecond,
					InProgress: 2, IOTime: 11990 * time.Millisecond, WeightedIOTime: 13990 * time.Millisecond}},
			{Device: "/dev/vdb", Mountpoint: "/data", Time: t0, Capacity: 204800, Usage: 0, Available: 204800, Inodes: 64, InodesFree: 61,
				IO: DiskIO{ReadsCompleted: 120, ReadsMerged: 4, SectorsRead: 1920, ReadTime: 150 * time.Millisecond,
					WritesCompleted: 60, WritesMerged: 1, SectorsWrite: 480, WriteTime: 90 * time.Millisecond,
					IOTime: 200 * time.Millisecond, WeightedIOTime: 240 * time.Millisecond}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("NodeFilesystems (-want +got):\n%s", diff)
		}
	})
}

// TestNodeFilesystemsBadDiskstats: a malformed /proc/diskstats is an error
// naming the file, line and field.
func TestNodeFilesystemsBadDiskstats(t *testing.T) {
	proc := t.TempDir()
	if err := os.CopyFS(proc, os.DirFS("testdata/nodefs/proc")); err != nil {
		t.Fatal(err)
	}
	bad := " 254 1 vda1 8990 x 719000 4990 6990 1990 559000 8990 2 11990 13990\n"
	if err := os.WriteFile(filepath.Join(proc, "diskstats"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := nodefsProvider(t, proc, nil).NodeFilesystems()
	if err == nil || !strings.Contains(err.Error(), "diskstats line 1 field 5: \"x\": not a count") {
		t.Errorf("err = %v, want one naming diskstats line 1 field 5", err)
	}
}
