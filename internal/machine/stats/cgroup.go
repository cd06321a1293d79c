package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// v1Unlimited is where a cgroup v1 memory limit means "none": the kernel
// reports its page-counter maximum, just under 2^63.
const v1Unlimited = 1 << 62

// memStats are a cgroup's memory figures, in bytes, as cadvisor derives them.
type memStats struct {
	usage, workingSet, rss, pageFaults, majorPageFaults uint64
	limit                                               uint64 // 0: none
}

// cgroupReader reads cgroup stats files under a detected layout.
type cgroupReader struct {
	layout cgroups.Layout
}

// cpuUsage returns the cgroup's cumulative cpu time in nanoseconds.
func (r cgroupReader) cpuUsage(cgPath string) (uint64, error) {
	t, err := r.cpuTimes(cgPath, false)
	return t.Usage, err
}

// cpuTimes reads the cgroup's cumulative cpu time, in nanoseconds, and with
// modes its user and system parts and its CFS throttling too: v1
// cpuacct.usage (and cpuacct.stat, in USER_HZ ticks, and the cpu
// hierarchy's cpu.stat nr_periods, nr_throttled, throttled_time, nr_bursts,
// burst_time, read only with modes; optional); v2 cpu.stat usage_usec
// (user_usec, system_usec, nr_periods, nr_throttled, throttled_usec,
// nr_bursts, burst_usec) × 1000 for the times.
func (r cgroupReader) cpuTimes(cgPath string, modes bool) (CPUSample, error) {
	if r.layout.Version == cgroups.V2 {
		p := filepath.Join(r.layout.Dir("", cgPath), "cpu.stat")
		st, err := readKeyed(p, "usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled", "throttled_usec", "nr_bursts", "burst_usec")
		if err != nil {
			return CPUSample{}, err
		}
		if _, ok := st["usage_usec"]; !ok {
			return CPUSample{}, fmt.Errorf("%s: no usage_usec field", p)
		}
		const us = 1000
		return CPUSample{Usage: st["usage_usec"] * us, User: st["user_usec"] * us, System: st["system_usec"] * us,
			Periods: st["nr_periods"], ThrottledPeriods: st["nr_throttled"], ThrottledTime: st["throttled_usec"] * us,
			BurstPeriods: st["nr_bursts"], BurstTime: st["burst_usec"] * us}, nil
	}
	dir := r.layout.Dir("cpuacct", cgPath)
	if dir == "" {
		return CPUSample{}, errors.New("the cpuacct hierarchy is not mounted")
	}
	usage, err := readUint(filepath.Join(dir, "cpuacct.usage"))
	if err != nil || !modes {
		return CPUSample{Usage: usage}, err
	}
	st, err := optional(readKeyed(filepath.Join(dir, "cpuacct.stat"), "user", "system"))
	if err != nil {
		return CPUSample{}, err
	}
	const tick = 1e9 / userHZ
	out := CPUSample{Usage: usage, User: st["user"] * tick, System: st["system"] * tick}
	if cpu := r.layout.Dir("cpu", cgPath); cpu != "" {
		cfs, err := optional(readKeyed(filepath.Join(cpu, "cpu.stat"), "nr_periods", "nr_throttled", "throttled_time", "nr_bursts", "burst_time"))
		if err != nil {
			return CPUSample{}, err
		}
		out.Periods, out.ThrottledPeriods, out.ThrottledTime = cfs["nr_periods"], cfs["nr_throttled"], cfs["throttled_time"]
		out.BurstPeriods, out.BurstTime = cfs["nr_bursts"], cfs["burst_time"]
	}
	return out, nil
}

// psi reads the cgroup's pressure stall figures from its cpu.pressure,
// memory.pressure and io.pressure (cgroup v2; the root cgroup has them
// too, the same figures as <proc>/pressure). Every field is nil on v1,
// whose cgroups keep none, and a file that is missing (a kernel without
// PSI, or booted with psi=0, where reading fails with EOPNOTSUPP) or
// unreadable leaves its field nil: PSI is optional in the Summary.
func (r cgroupReader) psi(cgPath string) Pressure {
	if r.layout.Version != cgroups.V2 {
		return Pressure{}
	}
	dir := r.layout.Dir("", cgPath)
	read := func(name string) *statsapi.PSIStats {
		p, err := readPSI(filepath.Join(dir, name))
		if err != nil {
			return nil
		}
		return p
	}
	return Pressure{CPU: read("cpu.pressure"), Memory: read("memory.pressure"), IO: read("io.pressure")}
}

// memory returns the cgroup's memory stats. isRoot selects the root
// cgroup's files where they differ (v2 has no memory.current there; usage is
// anon + file of memory.stat, as runc's cgroup library computes it for
// cadvisor).
//
//	v1: usage = memory.usage_in_bytes; memory.stat total_inactive_file,
//	    total_rss, pgfault, pgmajfault; limit = memory.limit_in_bytes
//	v2: usage = memory.current; memory.stat inactive_file, anon, pgfault,
//	    pgmajfault; limit = memory.max
//
// workingSet = usage − inactive file, at least 0.
func (r cgroupReader) memory(cgPath string, isRoot bool) (memStats, error) {
	var m memStats
	if r.layout.Version == cgroups.V2 {
		dir := r.layout.Dir("", cgPath)
		st, err := readKeyed(filepath.Join(dir, "memory.stat"), "anon", "file", "inactive_file", "pgfault", "pgmajfault")
		if err != nil {
			return m, err
		}
		if isRoot {
			m.usage = st["anon"] + st["file"]
		} else {
			if m.usage, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
				return m, err
			}
			limit, err := readUint(filepath.Join(dir, "memory.max"))
			if err != nil {
				return m, err
			}
			if limit != ^uint64(0) {
				m.limit = limit
			}
		}
		m.workingSet = sub(m.usage, st["inactive_file"])
		m.rss, m.pageFaults, m.majorPageFaults = st["anon"], st["pgfault"], st["pgmajfault"]
		return m, nil
	}
	dir := r.layout.Dir("memory", cgPath)
	st, err := readKeyed(filepath.Join(dir, "memory.stat"), "total_inactive_file", "total_rss", "pgfault", "pgmajfault")
	if err != nil {
		return m, err
	}
	if m.usage, err = readUint(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return m, err
	}
	if !isRoot {
		limit, err := readUint(filepath.Join(dir, "memory.limit_in_bytes"))
		if err != nil {
			return m, err
		}
		if limit < v1Unlimited {
			m.limit = limit
		}
	}
	m.workingSet = sub(m.usage, st["total_inactive_file"])
	m.rss, m.pageFaults, m.majorPageFaults = st["total_rss"], st["pgfault"], st["pgmajfault"]
	return m, nil
}

// processes counts the processes of a pod's containers as the kubelet does
// (the sum over its containers of the pids in each container cgroup's
// cgroup.procs): the lines of cgroup.procs in the pod cgroup and its
// descendants, leaving out the sandbox's own cgroup, the directory named
// sandboxDir (its ID under the cgroupfs driver, cri-containerd-<ID>.scope
// under systemd: cgroups.Names.Container). It reads the pids hierarchy on v1
// (memory when pids is not mounted).
func (r cgroupReader) processes(cgPath, sandboxDir string) (uint64, error) {
	dir := r.layout.Dir("pids", cgPath)
	if dir == "" {
		dir = r.layout.Dir("memory", cgPath)
	}
	var n uint64
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // a container cgroup removed during the walk
		}
		if !e.IsDir() {
			return nil
		}
		if p != dir && e.Name() == sandboxDir {
			return filepath.SkipDir
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		n += uint64(bytes.Count(b, []byte("\n")))
		return nil
	})
	return n, err
}

// exists reports whether the cgroup is there (in the memory hierarchy on v1).
func (r cgroupReader) exists(cgPath string) bool {
	_, err := readUint(filepath.Join(r.layout.Dir("memory", cgPath), memoryUsageFile(r.layout.Version)))
	return err == nil
}

func memoryUsageFile(v cgroups.Version) string {
	if v == cgroups.V2 {
		return "memory.current"
	}
	return "memory.usage_in_bytes"
}

// sub is a − b, at least 0.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
