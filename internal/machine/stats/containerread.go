package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
)

// The files read for one container (paths relative to its cgroup directory
// in the hierarchy named, or to <proc>):
//
//	cpu        v1 cpuacct: cpuacct.usage (ns); cpuacct.stat user, system (USER_HZ ticks);
//	           cpu: cpu.stat nr_periods, nr_throttled, throttled_time (ns),
//	           nr_bursts, burst_time (ns)
//	           v2 cpu.stat usage_usec, user_usec, system_usec, nr_periods,
//	           nr_throttled, throttled_usec, nr_bursts, burst_usec
//	psi        v2 only: cpu.pressure, memory.pressure, io.pressure (some and
//	           full: avg10, avg60, avg300, total in µs); none on v1
//	memory     v1 memory: memory.usage_in_bytes, memory.max_usage_in_bytes, memory.failcnt;
//	           memory.stat total_cache, total_rss, total_mapped_file, total_swap,
//	           total_inactive_file (working set = usage − it), pgfault, pgmajfault
//	           (the cgroup's own), total_pgfault, total_pgmajfault (with
//	           descendants); memory.oom_control oom_kill
//	           v2 memory.current, memory.peak; memory.stat file, anon, file_mapped,
//	           inactive_file, pgfault, pgmajfault (both scopes); memory.swap.current;
//	           memory.events max (failcnt), oom_kill
//	spec       v1 cpu: cpu.cfs_period_us, cpu.cfs_quota_us (-1: none), cpu.shares;
//	           memory: memory.limit_in_bytes, memory.soft_limit_in_bytes (reservation),
//	           memory.memsw.limit_in_bytes (swap limit, with swap accounting)
//	           v2 cpu.max, cpu.weight (as shares: 2 + (weight − 1) × 262142 / 9999),
//	           memory.max, memory.min (reservation), memory.swap.max
//	           A memory limit of 2^62 or more (the kernel's "none") reads as 0.
//	processes  cgroup.procs (v1: in pids, else memory); pids.current (threads),
//	           pids.max (0: none); for each process <proc>/<pid>/fd (entries, and
//	           those linking to socket:[...]); the first process's
//	           <proc>/<pid>/limits "Max open files" soft limit. The first process is
//	           the one whose parent (<proc>/<pid>/stat) is outside the cgroup.
//	blkio      v1 blkio: blkio.throttle.io_service_bytes, blkio.throttle.io_serviced
//	           v2 io.stat rbytes, wbytes, rios, wios (Read and Write);
//	           device names from <proc>/partitions
//	network    sandboxes only: <proc>/<pid>/net/dev of the first process, unless
//	           <proc>/<pid>/ns/net is the node's (<proc>/self/ns/net); interfaces
//	           named lo*, veth*, docker* or nerdctl* are left out, as cadvisor does
//
// Missing optional files (no swap accounting, no pids or blkio hierarchy,
// older kernels) read as 0; the cgroup's cpu and memory usage and its
// process list are required.

// userHZ is the unit of cpuacct.stat: the kernel's USER_HZ, 100 on Linux.
const userHZ = 100

// devNum is a block device's major and minor number.
type devNum struct{ major, minor uint64 }

// sampleEnv is what one Containers call shares between its containers: the
// proc root, the partition table (read once, when first needed) and the
// node's network namespace.
type sampleEnv struct {
	proc      string
	partsOnce sync.Once
	parts     map[devNum]string
	hostNet   string // the link of <proc>/self/ns/net; "" if unreadable
}

// sampleEnv starts the state of one Containers call.
func (p *Provider) sampleEnv() *sampleEnv {
	e := &sampleEnv{proc: p.cfg.ProcRoot}
	e.hostNet, _ = os.Readlink(filepath.Join(e.proc, "self", "ns", "net"))
	return e
}

// partitions returns the device nodes by number, from <proc>/partitions
// (empty when unreadable).
func (e *sampleEnv) partitions() map[devNum]string {
	e.partsOnce.Do(func() {
		e.parts = map[devNum]string{}
		b, err := os.ReadFile(filepath.Join(e.proc, "partitions"))
		if err != nil {
			return
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) != 4 {
				continue
			}
			maj, err1 := strconv.ParseUint(f[0], 10, 64)
			mnr, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 == nil && err2 == nil {
				e.parts[devNum{maj, mnr}] = "/dev/" + f[3]
			}
		}
	})
	return e.parts
}

// read fills s's figures from its cgroup (s.Cgroup) and processes; with
// network, also its network namespace's interfaces.
func (e *sampleEnv) read(r cgroupReader, s *ContainerSample, network bool) error {
	var err error
	if s.CPU, err = r.cpuTimes(s.Cgroup, true); err != nil {
		return err
	}
	if s.Memory, err = r.containerMemory(s.Cgroup); err != nil {
		return err
	}
	s.PSI = r.psi(s.Cgroup)
	if s.Spec, err = r.containerSpec(s.Cgroup); err != nil {
		return err
	}
	pids, err := r.procs(s.Cgroup)
	if err != nil {
		return err
	}
	first := e.firstProcess(pids)
	if s.Procs, err = e.processes(r, s.Cgroup, pids, first); err != nil {
		return err
	}
	if s.Blkio, err = r.blkio(s.Cgroup, e.partitions); err != nil {
		return err
	}
	if network && first > 0 {
		if s.Network, err = e.network(first); err != nil {
			return err
		}
	}
	return nil
}

// containerMemory reads the cgroup's memory figures.
func (r cgroupReader) containerMemory(cg string) (MemorySample, error) {
	var m MemorySample
	if r.layout.Version == cgroups.V2 {
		dir := r.layout.Dir("", cg)
		var err error
		if m.Usage, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
			return m, err
		}
		st, err := readKeyed(filepath.Join(dir, "memory.stat"), "file", "anon", "file_mapped", "inactive_file", "pgfault", "pgmajfault")
		if err != nil {
			return m, err
		}
		ev, err := optional(readKeyed(filepath.Join(dir, "memory.events"), "max", "oom_kill"))
		if err != nil {
			return m, err
		}
		if m.MaxUsage, err = optional(readUint(filepath.Join(dir, "memory.peak"))); err != nil {
			return m, err
		}
		if m.Swap, err = optional(readUint(filepath.Join(dir, "memory.swap.current"))); err != nil {
			return m, err
		}
		m.Cache, m.RSS, m.MappedFile = st["file"], st["anon"], st["file_mapped"]
		m.WorkingSet = sub(m.Usage, st["inactive_file"])
		m.PgFault, m.PgMajFault = st["pgfault"], st["pgmajfault"]
		m.HierPgFault, m.HierPgMajFault = m.PgFault, m.PgMajFault
		m.Failcnt, m.OOMKills = ev["max"], ev["oom_kill"]
		return m, nil
	}
	dir := r.layout.Dir("memory", cg)
	var err error
	if m.Usage, err = readUint(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return m, err
	}
	st, err := readKeyed(filepath.Join(dir, "memory.stat"), "total_cache", "total_rss", "total_mapped_file", "total_swap",
		"total_inactive_file", "pgfault", "pgmajfault", "total_pgfault", "total_pgmajfault")
	if err != nil {
		return m, err
	}
	if m.MaxUsage, err = optional(readUint(filepath.Join(dir, "memory.max_usage_in_bytes"))); err != nil {
		return m, err
	}
	if m.Failcnt, err = optional(readUint(filepath.Join(dir, "memory.failcnt"))); err != nil {
		return m, err
	}
	oom, err := optional(readKeyed(filepath.Join(dir, "memory.oom_control"), "oom_kill"))
	if err != nil {
		return m, err
	}
	m.Cache, m.RSS, m.MappedFile, m.Swap = st["total_cache"], st["total_rss"], st["total_mapped_file"], st["total_swap"]
	m.WorkingSet = sub(m.Usage, st["total_inactive_file"])
	m.PgFault, m.PgMajFault = st["pgfault"], st["pgmajfault"]
	m.HierPgFault, m.HierPgMajFault = st["total_pgfault"], st["total_pgmajfault"]
	m.OOMKills = oom["oom_kill"]
	return m, nil
}

// containerSpec reads the cgroup's cpu and memory limits.
func (r cgroupReader) containerSpec(cg string) (SpecSample, error) {
	var s SpecSample
	var errs []error
	get := func(dir, file string) uint64 {
		v, err := optional(readUint(filepath.Join(dir, file)))
		errs = append(errs, err)
		return v
	}
	if r.layout.Version == cgroups.V2 {
		dir := r.layout.Dir("", cg)
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		switch {
		case err == nil:
			if s.CPUQuota, s.CPUPeriod, err = parseCPUMax(string(b)); err != nil {
				return s, fmt.Errorf("%s: %w", filepath.Join(dir, "cpu.max"), err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return s, err
		}
		if w := get(dir, "cpu.weight"); w > 0 {
			s.CPUShares = 2 + (w-1)*262142/9999
		}
		s.MemoryLimit = memoryLimit(get(dir, "memory.max"))
		s.MemoryReservation = memoryLimit(get(dir, "memory.min"))
		s.MemorySwapLimit = memoryLimit(get(dir, "memory.swap.max"))
		return s, errors.Join(errs...)
	}
	if dir := r.layout.Dir("cpu", cg); dir != "" {
		s.CPUPeriod = get(dir, "cpu.cfs_period_us")
		s.CPUShares = get(dir, "cpu.shares")
		b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		switch {
		case err == nil:
			q, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
			if err != nil {
				return s, fmt.Errorf("%s: value %q is not a number", filepath.Join(dir, "cpu.cfs_quota_us"), bytes.TrimSpace(b))
			}
			s.CPUQuota = uint64(max(q, 0))
		case !errors.Is(err, fs.ErrNotExist):
			return s, err
		}
	}
	dir := r.layout.Dir("memory", cg)
	s.MemoryLimit = memoryLimit(get(dir, "memory.limit_in_bytes"))
	s.MemoryReservation = memoryLimit(get(dir, "memory.soft_limit_in_bytes"))
	s.MemorySwapLimit = memoryLimit(get(dir, "memory.memsw.limit_in_bytes"))
	return s, errors.Join(errs...)
}

// parseCPUMax parses a v2 cpu.max ("max 100000", "50000 100000"): quota 0
// when unlimited.
func parseCPUMax(s string) (quota, period uint64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("value %q: want quota and period", strings.TrimSpace(s))
	}
	if period, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("value %q: period is not a number", strings.TrimSpace(s))
	}
	if f[0] == "max" {
		return 0, period, nil
	}
	if quota, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("value %q: quota is not a number", strings.TrimSpace(s))
	}
	return quota, period, nil
}

// memoryLimit is v, or 0 for the kernel's "no limit" (2^62 and above, "max").
func memoryLimit(v uint64) uint64 {
	if v >= v1Unlimited {
		return 0
	}
	return v
}

// procs returns the pids of the cgroup's processes (cgroup.procs; on v1 in
// the pids hierarchy, else the memory one).
func (r cgroupReader) procs(cg string) ([]int, error) {
	dir := r.layout.Dir("pids", cg)
	if dir == "" {
		dir = r.layout.Dir("memory", cg)
	}
	p := filepath.Join(dir, "cgroup.procs")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: %q is not a pid", p, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// firstProcess returns the cgroup's first process: the one whose parent is
// not in pids (the container's init, which the runtime started), the
// lowest such pid when several are; 0 when pids is empty.
func (e *sampleEnv) firstProcess(pids []int) int {
	first := 0
	for _, pid := range pids {
		ppid, err := readPPID(filepath.Join(e.proc, strconv.Itoa(pid), "stat"))
		if err != nil || slices.Contains(pids, ppid) {
			continue
		}
		if first == 0 || pid < first {
			first = pid
		}
	}
	if first == 0 && len(pids) > 0 {
		first = slices.Min(pids)
	}
	return first
}

// readPPID reads the parent pid from a /proc/<pid>/stat ("pid (comm) state
// ppid ..."; comm may hold spaces and parentheses).
func readPPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no ppid field", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("%s: no ppid field", path)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("%s: ppid %q is not a number", path, f[1])
	}
	return ppid, nil
}

// processes counts the cgroup's processes, threads, descriptors and sockets,
// and reads the first process's soft limits. A process that exits during
// the count is skipped.
func (e *sampleEnv) processes(r cgroupReader, cg string, pids []int, first int) (ProcessSample, error) {
	ps := ProcessSample{Processes: uint64(len(pids))}
	if dir := r.layout.Dir("pids", cg); dir != "" {
		var err error
		if ps.Threads, err = optional(readUint(filepath.Join(dir, "pids.current"))); err != nil {
			return ps, err
		}
		limit, err := optional(readUint(filepath.Join(dir, "pids.max")))
		if err != nil {
			return ps, err
		}
		if limit != math.MaxUint64 {
			ps.ThreadsMax = limit
		}
	}
	for _, pid := range pids {
		fdDir := filepath.Join(e.proc, strconv.Itoa(pid), "fd")
		es, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, de := range es {
			ps.FDs++
			if l, err := os.Readlink(filepath.Join(fdDir, de.Name())); err == nil && strings.HasPrefix(l, "socket:") {
				ps.Sockets++
			}
		}
	}
	if first > 0 {
		soft, ok, err := readSoftLimit(filepath.Join(e.proc, strconv.Itoa(first), "limits"), "Max open files")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ps, err
		}
		if ok {
			ps.Ulimits = []Ulimit{{Name: "max_open_files", Soft: soft}}
		}
	}
	return ps, nil
}

// readSoftLimit reads the soft limit named name from a /proc/<pid>/limits
// ("Max open files            1024                 1048576              files");
// "unlimited" is -1. ok is false when the file has no such limit.
func readSoftLimit(path, name string) (soft int64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	for line := range strings.Lines(string(b)) {
		rest, found := strings.CutPrefix(line, name+" ")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("%s: %s: no soft limit", path, name)
		}
		if f[0] == "unlimited" {
			return -1, true, nil
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %s: soft limit %q is not a number", path, name, f[0])
		}
		return v, true, nil
	}
	return 0, false, nil
}

// blkio reads the cgroup's block I/O per device; nil without the blkio
// hierarchy (v1) or io.stat (v2).
func (r cgroupReader) blkio(cg string, names func() map[devNum]string) ([]BlkioDevice, error) {
	var devs []BlkioDevice
	index := map[devNum]int{}
	dev := func(n devNum) *BlkioDevice {
		i, ok := index[n]
		if !ok {
			i = len(devs)
			index[n] = i
			devs = append(devs, BlkioDevice{Major: n.major, Minor: n.minor, Device: names()[n], Bytes: map[string]uint64{}, Serviced: map[string]uint64{}})
		}
		return &devs[i]
	}
	if r.layout.Version == cgroups.V2 {
		p := filepath.Join(r.layout.Dir("", cg), "io.stat")
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			n, err := parseDevNum(f[0])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			d := dev(n)
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				var m map[string]uint64
				var op string
				switch k {
				case "rbytes":
					m, op = d.Bytes, "Read"
				case "wbytes":
					m, op = d.Bytes, "Write"
				case "rios":
					m, op = d.Serviced, "Read"
				case "wios":
					m, op = d.Serviced, "Write"
				default:
					continue
				}
				if m[op], err = strconv.ParseUint(v, 10, 64); err != nil {
					return nil, fmt.Errorf("%s: %s: value %q is not a number", p, k, v)
				}
			}
		}
		return devs, nil
	}
	dir := r.v1Dir("blkio", cg)
	if dir == "" {
		return nil, nil
	}
	for _, f := range []struct {
		file string
		into func(*BlkioDevice) map[string]uint64
	}{
		{"blkio.throttle.io_service_bytes", func(d *BlkioDevice) map[string]uint64 { return d.Bytes }},
		{"blkio.throttle.io_serviced", func(d *BlkioDevice) map[string]uint64 { return d.Serviced }},
	} {
		p := filepath.Join(dir, f.file)
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(b)) {
			cols := strings.Fields(line)
			if len(cols) != 3 { // "Total N" closes the file
				continue
			}
			n, err := parseDevNum(cols[0])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			v, err := strconv.ParseUint(cols[2], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %s: value %q is not a number", p, cols[0], cols[1], cols[2])
			}
			f.into(dev(n))[cols[1]] = v
		}
	}
	return devs, nil
}

// v1Dir is Layout.Dir for any v1 controller, those pod cgroups get no limits
// in (blkio) included: their hierarchies are among Layout.Others, named by
// their controllers.
func (r cgroupReader) v1Dir(controller, cg string) string {
	if d := r.layout.Dir(controller, cg); d != "" {
		return d
	}
	for _, h := range r.layout.Others {
		if slices.Contains(strings.Split(filepath.Base(h), ","), controller) {
			return filepath.Join(h, cg)
		}
	}
	return ""
}

// parseDevNum parses "major:minor".
func parseDevNum(s string) (devNum, error) {
	a, b, ok := strings.Cut(s, ":")
	maj, err1 := strconv.ParseUint(a, 10, 64)
	mnr, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return devNum{}, fmt.Errorf("device %q is not major:minor", s)
	}
	return devNum{maj, mnr}, nil
}

// network reads the interfaces of pid's network namespace; nil when it is
// the node's.
func (e *sampleEnv) network(pid int) ([]InterfaceSample, error) {
	dir := filepath.Join(e.proc, strconv.Itoa(pid))
	if ns, err := os.Readlink(filepath.Join(dir, "ns", "net")); err != nil {
		return nil, err
	} else if ns == e.hostNet {
		return nil, nil
	}
	return readNetDev(filepath.Join(dir, "net", "dev"))
}

// readNetDev parses a /proc/<pid>/net/dev: after two header lines, one line
// per interface, "name: rx bytes packets errs drop fifo frame compressed
// multicast, tx bytes packets errs drop fifo colls carrier compressed".
// Interfaces cadvisor ignores (lo*, veth*, docker*, nerdctl*) are left out;
// the others are sorted by name.
func readNetDev(path string) ([]InterfaceSample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []InterfaceSample
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue // the headers
		}
		name = strings.TrimSpace(name)
		if ignoredInterface(name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 16 {
			return nil, fmt.Errorf("%s: interface %s: %d fields, want 16", path, name, len(f))
		}
		var v [16]uint64
		for i, s := range f {
			if v[i], err = strconv.ParseUint(s, 10, 64); err != nil {
				return nil, fmt.Errorf("%s: interface %s: field %d: value %q is not a number", path, name, i+1, s)
			}
		}
		out = append(out, InterfaceSample{Name: name,
			RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11]})
	}
	slices.SortFunc(out, func(a, b InterfaceSample) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ignoredInterface reports whether cadvisor leaves the interface out of a
// container's network figures: loopback and the host ends of container
// links.
func ignoredInterface(name string) bool {
	n := strings.ToLower(name)
	for _, p := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// optional turns a missing file's error into the zero value.
func optional[T any](v T, err error) (T, error) {
	if errors.Is(err, fs.ErrNotExist) {
		var zero T
		return zero, nil
	}
	return v, err
}
