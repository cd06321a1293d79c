package stats

import (
	"io/fs"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsStats turns a statfs result into FsStats: capacity = blocks × bsize,
// available = bavail × bsize (what an unprivileged writer may use),
// used = (blocks − bfree) × bsize; inodes = files, inodesFree = ffree,
// inodesUsed = files − ffree.
func fsStats(st *unix.Statfs_t, t metav1.Time) *statsapi.FsStats {
	bsize := uint64(st.Bsize)
	capacity, avail, used := st.Blocks*bsize, st.Bavail*bsize, sub(st.Blocks, st.Bfree)*bsize
	inodes, free, iused := st.Files, st.Ffree, sub(st.Files, st.Ffree)
	return &statsapi.FsStats{
		Time:           t,
		CapacityBytes:  &capacity,
		AvailableBytes: &avail,
		UsedBytes:      &used,
		Inodes:         &inodes,
		InodesFree:     &free,
		InodesUsed:     &iused,
	}
}

// capacityOf returns FsStats holding only the capacity, availability and
// inode totals of st (nil st: none), for usage measured elsewhere.
func capacityOf(st *unix.Statfs_t, t metav1.Time) *statsapi.FsStats {
	out := &statsapi.FsStats{Time: t}
	if st != nil {
		f := fsStats(st, t)
		out.CapacityBytes, out.AvailableBytes, out.Inodes, out.InodesFree = f.CapacityBytes, f.AvailableBytes, f.Inodes, f.InodesFree
	}
	return out
}

// du returns the disk usage of the tree at dir as du counts it: the blocks
// allocated to every file and directory (st_blocks × 512) and the number of
// inodes (entries, dir included). Entries that vanish during the walk are
// skipped. A missing dir is an error.
func du(dir string) (bytes, inodes uint64, err error) {
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		inodes++
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			bytes += uint64(st.Blocks) * 512
		}
		return nil
	})
	return bytes, inodes, err
}
