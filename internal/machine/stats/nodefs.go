package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// NodeFilesystem is one of the node's block-device filesystems, as the
// kubelet's cadvisor reports it for the root container ("/"): its size and
// inodes from statfs, its device's I/O counters from /proc/diskstats.
type NodeFilesystem struct {
	// Device is the mount source ("/dev/vda1"); Mountpoint the first place
	// it is mounted.
	Device, Mountpoint string
	// Time is when the figures were read.
	Time time.Time
	// Capacity, Usage (capacity less free blocks) and Available (to
	// unprivileged users), in bytes.
	Capacity, Usage, Available uint64
	Inodes, InodesFree         uint64
	// IO is zero when /proc/diskstats does not list the device.
	IO DiskIO
}

// DiskIO is a block device's cumulative I/O counters (the fields of
// /proc/diskstats): operations, merges and sectors by direction, the time
// spent on them, the operations in flight now, the time the device was
// busy and the busy time weighted by the operations in flight.
type DiskIO struct {
	ReadsCompleted, ReadsMerged, SectorsRead    uint64
	WritesCompleted, WritesMerged, SectorsWrite uint64
	ReadTime, WriteTime                         time.Duration
	InProgress                                  uint64
	IOTime, WeightedIOTime                      time.Duration
}

// NodeFilesystems lists the node's filesystems on block devices (mount
// sources under /dev with a real device number), each device once at its
// first mount, in mount order.
func (p *Provider) NodeFilesystems() ([]NodeFilesystem, error) {
	mountsPath := filepath.Join(p.cfg.ProcRoot, "self", "mountinfo")
	f, err := os.Open(mountsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mountsPath, err)
	}
	io, err := readDiskstats(filepath.Join(p.cfg.ProcRoot, "diskstats"))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []NodeFilesystem
	seen := map[devNum]bool{}
	for _, m := range mounts {
		n := devNum{uint64(m.Major), uint64(m.Minor)}
		if m.Major == 0 || !strings.HasPrefix(m.Source, "/dev/") || seen[n] {
			continue
		}
		seen[n] = true
		var st unix.Statfs_t
		if err := p.statfs(m.Mountpoint, &st); err != nil {
			continue // unmounted since, or not ours to read
		}
		bs := uint64(st.Bsize)
		out = append(out, NodeFilesystem{
			Device: m.Source, Mountpoint: m.Mountpoint, Time: now,
			Capacity: st.Blocks * bs, Usage: (st.Blocks - st.Bfree) * bs, Available: st.Bavail * bs,
			Inodes: st.Files, InodesFree: st.Ffree,
			IO: io[n],
		})
	}
	return out, nil
}

// readDiskstats reads /proc/diskstats by device number.
func readDiskstats(path string) (map[devNum]DiskIO, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[devNum]DiskIO{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 14 {
			return nil, fmt.Errorf("%s line %d: %d fields, want at least 14", path, line, len(f))
		}
		v := make([]uint64, 14)
		for i := 0; i < 14; i++ {
			if i == 2 {
				continue // the device's name
			}
			if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
				return nil, fmt.Errorf("%s line %d field %d: %q: not a count", path, line, i+1, f[i])
			}
		}
		ms := func(x uint64) time.Duration { return time.Duration(x) * time.Millisecond }
		out[devNum{v[0], v[1]}] = DiskIO{
			ReadsCompleted: v[3], ReadsMerged: v[4], SectorsRead: v[5], ReadTime: ms(v[6]),
			WritesCompleted: v[7], WritesMerged: v[8], SectorsWrite: v[9], WriteTime: ms(v[10]),
			InProgress: v[11], IOTime: ms(v[12]), WeightedIOTime: ms(v[13]),
		}
	}
	return out, nil
}
