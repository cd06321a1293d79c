package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/qos"
)

// ErrLiveProcesses is the class of RemovePod's error for a pod cgroup that
// still holds processes.
var ErrLiveProcesses = errors.New("pod cgroup has live processes")

// Config configures a Manager.
type Config struct {
	// FSRoot is where the cgroup filesystems are mounted; "" is /sys/fs/cgroup.
	FSRoot string
	// CgroupRoot is the KubeletConfiguration cgroupRoot, the cgroup the
	// kubepods tree is made under; "" is "/".
	CgroupRoot string
	// Driver is the cgroupDriver: "" or "cgroupfs", or "systemd" (pod
	// cgroups are slices systemd makes; New fails unless systemd runs and
	// answers on D-Bus).
	Driver string
	// PodPidsLimit is the podPidsLimit; zero or negative (-1) means none.
	PodPidsLimit int64
	// KubepodsLimits, when not nil, are written on the kubepods cgroup by
	// EnsureQoS (its cpu as shares, its memory as the memory limit): the
	// enforcement of node allocatable for pods. Nil leaves kubepods unlimited.
	KubepodsLimits v1.ResourceList
	// Logger receives the cgroups made and removed; nil discards.
	Logger *slog.Logger

	// systemdBooted and dialSystemd replace SystemdBootedDir and
	// dialSystemd in tests.
	systemdBooted string
	dialSystemd   func() (systemdConn, error)
}

// Manager makes and removes pod cgroups. Its methods may be called from
// several goroutines; concurrent calls for the same pod are the caller's to
// avoid (the pod's worker owns its pod).
type Manager struct {
	layout    Layout
	root      string // clean absolute CgroupRoot
	pidsLimit int64
	kubepods  v1.ResourceList
	log       *slog.Logger
	rmdir     func(string) error // unix.Rmdir; fixture tests remove plain directories
	sd        *systemdDriver     // the systemd driver; nil under cgroupfs
}

// New checks cfg, detects the cgroup version and hierarchies, and checks
// that they can hold the pod cgroups under cfg.CgroupRoot: each hierarchy is
// a cgroup mount of its version and the existing part of CgroupRoot is in
// it; the cpu, memory and pids controllers are there (v1: their hierarchies
// are mounted; v2: the root offers them and every existing cgroup down to
// CgroupRoot enables them for its children, or may: it holds no process).
// Its errors name the field (cgroupDriver, cgroupRoot) and what the machine
// has. It reads only; EnsureQoS makes the cgroups.
func New(cfg Config) (*Manager, error) { return newManager(cfg, statfsType) }

// newManager is New with the filesystem types of paths from fsType
// (fixture trees are on the test machine's disk).
func newManager(cfg Config, fsType fsTypeFunc) (*Manager, error) {
	switch cfg.Driver {
	case "", "cgroupfs", "systemd":
	default:
		return nil, fmt.Errorf(`cgroupDriver %q: want "cgroupfs" or "systemd"`, cfg.Driver)
	}
	root, err := cleanRoot(cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	l, err := Detect(cfg.FSRoot)
	if err != nil {
		return nil, err
	}
	if err := checkMachine(l, root, fsType); err != nil {
		return nil, err
	}
	var sd *systemdDriver
	if cfg.Driver == "systemd" {
		if sd, err = newSystemdDriver(root, cfg.systemdBooted, cfg.dialSystemd); err != nil {
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		layout:    l,
		root:      root,
		pidsLimit: cfg.PodPidsLimit,
		kubepods:  cfg.KubepodsLimits,
		log:       log.With("subsystem", "cgroups"),
		rmdir:     unix.Rmdir,
		sd:        sd,
	}, nil
}

// cleanRoot checks a cgroupRoot value and returns it cleaned.
func cleanRoot(root string) (string, error) {
	if root == "" {
		return "/", nil
	}
	if !strings.HasPrefix(root, "/") {
		return "", fmt.Errorf("cgroupRoot %q: want an absolute cgroup path such as /", root)
	}
	for _, e := range strings.Split(root, "/") {
		if e == ".." {
			return "", fmt.Errorf("cgroupRoot %q: must not contain ..", root)
		}
	}
	return path.Clean(root), nil
}

// Layout returns the detected cgroup layout.
func (m *Manager) Layout() Layout { return m.layout }

// EnsureQoS makes the kubepods cgroup and its burstable and besteffort tiers
// (and CgroupRoot, when missing) in every hierarchy, sets the besteffort
// tier's cpu shares to 2 as the kubelet does, and writes Config.KubepodsLimits
// on kubepods when set. Idempotent.
func (m *Manager) EnsureQoS() error {
	if m.sd != nil {
		return m.sd.ensureQoS(m)
	}
	for _, class := range []v1.PodQOSClass{v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		if err := m.ensureTree(tierPath(m.root, class)); err != nil {
			return err
		}
	}
	if err := m.apply(tierPath(m.root, v1.PodQOSBestEffort), resources{shares: minShares, quota: -1, memory: -1, pids: -1}); err != nil {
		return err
	}
	if m.kubepods != nil {
		r := resources{shares: milliToShares(m.kubepods.Cpu().MilliValue()), quota: -1, memory: -1, pids: -1}
		if mem, ok := m.kubepods[v1.ResourceMemory]; ok && mem.Value() > 0 {
			r.memory = mem.Value()
		}
		if err := m.apply(KubepodsPath(m.root), r); err != nil {
			return err
		}
	}
	return nil
}

// UpdateQoS sets the QoS tiers' cpu shares from pods, the pods the node
// runs, as the kubelet's QoS manager does on each pod change: burstable gets
// the shares of the sum of its pods' cpu requests (2 with none), besteffort 2.
// Call it after EnsureQoS, with every admitted pod; it is cheap enough to call
// on each pod add and remove.
func (m *Manager) UpdateQoS(pods []*v1.Pod) error {
	if m.sd != nil {
		return m.sd.updateQoS(m, pods)
	}
	var milli int64
	for _, pod := range pods {
		if qos.Class(pod) != v1.PodQOSBurstable {
			continue
		}
		milli += podCPURequest(pod)
	}
	for class, shares := range map[v1.PodQOSClass]uint64{v1.PodQOSBurstable: milliToShares(milli), v1.PodQOSBestEffort: minShares} {
		if err := m.setShares(tierPath(m.root, class), shares); err != nil {
			return err
		}
	}
	return nil
}

// setShares writes only the cpu shares (v2: weight) of the cgroup at cgroupPath.
func (m *Manager) setShares(cgroupPath string, shares uint64) error {
	if m.layout.Version == V2 {
		if !slices.Contains(m.layout.Controllers, "cpu") {
			return nil
		}
		return write(filepath.Join(m.layout.Root, cgroupPath), "cpu.weight", strconv.FormatUint(sharesToWeight(shares), 10))
	}
	return write(m.layout.Dir("cpu", cgroupPath), "cpu.shares", strconv.FormatUint(shares, 10))
}

// EnsurePod makes (or updates) the cgroup of pod in every hierarchy, with the
// limits the package doc lists, and returns the cgroupParent to give the
// runtime for the pod's sandbox and containers
// ("/<root>/kubepods/burstable/pod<UID>"; under systemd the path of the pod's
// slice, SystemdPodPath). Missing QoS cgroups are made too.
// Idempotent; a pod whose QoS class changed is the caller's to remove first.
func (m *Manager) EnsurePod(pod *v1.Pod) (string, error) {
	if pod == nil || pod.UID == "" {
		return "", errors.New("ensure pod cgroup: pod has no UID")
	}
	if m.sd != nil {
		return m.sd.ensurePod(m, pod)
	}
	p := PodPath(m.root, qos.Class(pod), pod.UID)
	if err := m.ensureTree(p); err != nil {
		return "", err
	}
	if err := m.apply(p, podResources(pod, m.pidsLimit)); err != nil {
		return "", err
	}
	return p, nil
}

// RemovePod removes the cgroup of the pod with uid, from whichever QoS tier it
// is in, with its (empty) child cgroups, in every hierarchy. It kills nothing:
// when any of them holds processes it removes nothing and returns an error
// wrapping ErrLiveProcesses that names the cgroup and the pids. Removing an
// absent pod cgroup succeeds.
func (m *Manager) RemovePod(uid types.UID) error {
	if uid == "" {
		return errors.New("remove pod cgroup: empty UID")
	}
	if m.sd != nil {
		return m.sd.removePod(m, uid)
	}
	var dirs []string
	for _, h := range m.layout.hierarchies() {
		for _, p := range PodPaths(m.root, uid) {
			d := filepath.Join(h.dir, p)
			if _, err := os.Stat(d); err == nil {
				dirs = append(dirs, d)
			}
		}
	}
	var tree []string // every cgroup to remove, parents before children
	for _, d := range dirs {
		sub, err := emptyTree(d)
		if err != nil {
			return fmt.Errorf("remove pod cgroup %s: %w", uid, err)
		}
		tree = append(tree, sub...)
	}
	for i := len(tree) - 1; i >= 0; i-- {
		if err := m.rmdir(tree[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove pod cgroup %s: %w", tree[i], err)
		}
	}
	if len(dirs) > 0 {
		m.log.Info("Removed pod cgroup", "podUID", uid)
	}
	return nil
}

// emptyTree returns the cgroup directories under dir, dir first, parents
// before children, or an error wrapping ErrLiveProcesses when one holds
// processes. A cgroup that goes while it is walked (systemd removes an empty
// scope on its own) is left out.
func emptyTree(dir string) ([]string, error) {
	var tree []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !e.IsDir() {
			return nil
		}
		pids, err := procs(p)
		if err != nil {
			return err
		}
		if len(pids) > 0 {
			return fmt.Errorf("%w: %s holds pids %s; not removing it", ErrLiveProcesses, p, strings.Join(pids, ","))
		}
		tree = append(tree, p)
		return nil
	})
	return tree, err
}

// procs returns the pids listed in dir's cgroup.procs; a missing file lists
// none.
func procs(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// Pods returns the UIDs of the pod cgroups found under the QoS cgroups in any
// hierarchy, sorted.
func (m *Manager) Pods() ([]types.UID, error) {
	if m.sd != nil {
		return m.sd.pods(m)
	}
	var uids []types.UID
	for _, h := range m.layout.hierarchies() {
		for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			es, err := os.ReadDir(filepath.Join(h.dir, tierPath(m.root, class)))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list pod cgroups: %w", err)
			}
			for _, e := range es {
				if e.IsDir() && strings.HasPrefix(e.Name(), "pod") && len(e.Name()) > 3 {
					uids = append(uids, types.UID(strings.TrimPrefix(e.Name(), "pod")))
				}
			}
		}
	}
	slices.Sort(uids)
	return slices.Compact(uids), nil
}

// ensureTree makes the cgroup at cgroupPath and its missing ancestors in
// every hierarchy. On v1 a new cpuset cgroup gets its parent's cpus and mems
// (a cpuset cgroup without them cannot hold tasks); on v2 the controllers are
// enabled in each ancestor's cgroup.subtree_control.
func (m *Manager) ensureTree(cgroupPath string) error { return m.makeTree(cgroupPath, true) }

// makeTree is ensureTree; without leafControllers, on v2, the controllers are
// not enabled in the leaf's own cgroup.subtree_control, so that it may hold
// processes (a cgroup with controllers enabled for children may not).
func (m *Manager) makeTree(cgroupPath string, leafControllers bool) error {
	elems := strings.Split(strings.Trim(cgroupPath, "/"), "/")
	for _, h := range m.layout.hierarchies() {
		dir := h.dir
		for _, e := range elems {
			if m.layout.Version == V2 {
				if err := m.enableControllers(dir); err != nil {
					return err
				}
			}
			parent := dir
			dir = filepath.Join(dir, e)
			err := os.Mkdir(dir, 0o755)
			if errors.Is(err, os.ErrExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("make cgroup %s: %w", dir, err)
			}
			m.log.Debug("Made cgroup", "path", dir)
			if h.has("cpuset") {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					b, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return fmt.Errorf("make cgroup %s: %w", dir, err)
					}
					if err := write(dir, f, strings.TrimSpace(string(b))); err != nil {
						return err
					}
				}
			}
		}
		if m.layout.Version == V2 && leafControllers {
			if err := m.enableControllers(dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// Place makes the cgroup at cgroupPath (absolute, as "/nodekeeper-containerd";
// not "/" and not under kubepods) in every hierarchy, with no limits, and
// moves the process pid (all its threads) into it (on v2 it must be a leaf:
// Place refuses one that enables controllers for children): the agent puts the
// containerd it runs there, apart from itself and the pods, as the kubelet's
// --runtime-cgroups does. Processes pid starts later inherit the cgroup.
// Idempotent; the cgroup is left in place (Place never removes one).
func (m *Manager) Place(cgroupPath string, pid int) error {
	p, err := cleanRoot(cgroupPath)
	if err != nil || cgroupPath == "" {
		return fmt.Errorf("cgroup %q: want an absolute cgroup path without ..", cgroupPath)
	}
	if k := KubepodsPath(m.root); p == "/" || p == k || strings.HasPrefix(p, k+"/") {
		return fmt.Errorf("cgroup %q: want a cgroup of its own, not / or under %s", cgroupPath, k)
	}
	if err := m.makeTree(p, false); err != nil {
		return err
	}
	if m.layout.Version == V2 {
		// v2's no-internal-process rule: a cgroup that enables controllers
		// for its children may hold no process (the write fails EBUSY).
		on, err := readFields(filepath.Join(m.layout.Root, p, "cgroup.subtree_control"))
		if err != nil {
			return err
		}
		if len(on) > 0 {
			return fmt.Errorf("cgroup %q: it enables %s for child cgroups (cgroup.subtree_control), so cgroup v2 lets it hold no process; want a leaf cgroup", cgroupPath, strings.Join(on, " "))
		}
	}
	for _, h := range m.layout.hierarchies() {
		if err := write(filepath.Join(h.dir, p), "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// enableControllers enables, in dir's cgroup.subtree_control, the
// controllers pods use that the root offers and dir does not enable yet.
func (m *Manager) enableControllers(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.subtree_control"), err)
	}
	on := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		on[strings.TrimPrefix(c, "+")] = true
	}
	var want []string
	missing := false
	for _, c := range v2Controllers {
		if slices.Contains(m.layout.Controllers, c) {
			want = append(want, "+"+c)
			missing = missing || !on[c]
		}
	}
	if !missing {
		return nil
	}
	// Enabling an enabled controller is a no-op, so write them all.
	return write(dir, "cgroup.subtree_control", strings.Join(want, " "))
}

// apply writes r on the cgroup at cgroupPath in every hierarchy that has the
// controller of each value. A negative quota, memory or pids means no limit.
func (m *Manager) apply(cgroupPath string, r resources) error {
	if m.layout.Version == V2 {
		dir := filepath.Join(m.layout.Root, cgroupPath)
		var ws [][2]string
		if slices.Contains(m.layout.Controllers, "cpu") {
			ws = append(ws, [2]string{"cpu.weight", strconv.FormatUint(sharesToWeight(r.shares), 10)},
				[2]string{"cpu.max", maxValue(r.quota) + " " + strconv.Itoa(quotaPeriod)})
		}
		if slices.Contains(m.layout.Controllers, "memory") {
			ws = append(ws, [2]string{"memory.max", maxValue(r.memory)})
		}
		if slices.Contains(m.layout.Controllers, "pids") {
			ws = append(ws, [2]string{"pids.max", maxValue(r.pids)})
		}
		for _, w := range ws {
			if err := write(dir, w[0], w[1]); err != nil {
				return err
			}
		}
		if r.hugepages != nil && slices.Contains(m.layout.Controllers, "hugetlb") {
			return writeHugepages(filepath.Join(m.layout.Root, m.kubepodsPath()), dir, ".max", r.hugepages)
		}
		return nil
	}
	var ws [][3]string // controller, file, value
	ws = append(ws, [3]string{"cpu", "cpu.shares", strconv.FormatUint(r.shares, 10)})
	if r.quota > 0 {
		ws = append(ws, [3]string{"cpu", "cpu.cfs_period_us", strconv.Itoa(quotaPeriod)})
	}
	ws = append(ws, [3]string{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(max(r.quota, -1), 10)},
		[3]string{"memory", "memory.limit_in_bytes", strconv.FormatInt(max(r.memory, -1), 10)},
		[3]string{"pids", "pids.max", maxValue(r.pids)})
	for _, w := range ws {
		dir := m.layout.Dir(w[0], cgroupPath)
		if dir == "" {
			continue
		}
		if err := write(dir, w[1], w[2]); err != nil {
			return err
		}
	}
	if h := m.layout.Dirs["hugetlb"]; h != "" && r.hugepages != nil {
		return writeHugepages(h, filepath.Join(h, cgroupPath), ".limit_in_bytes", r.hugepages)
	}
	return nil
}

// writeHugepages writes, in dir, the hugetlb limit of every page size the
// machine supports (the hugetlb.<size><suffix> files of sizesDir): the
// pod's limit for that size, 0 for the others, as the kubelet does so that a
// pod uses only the hugepages it requested.
func writeHugepages(sizesDir, dir, suffix string, limits map[int64]int64) error {
	es, err := os.ReadDir(sizesDir)
	if err != nil {
		return fmt.Errorf("hugepage sizes: %w", err)
	}
	for _, e := range es {
		mid, ok := strings.CutPrefix(e.Name(), "hugetlb.")
		if !ok {
			continue
		}
		size, ok := strings.CutSuffix(mid, suffix)
		if !ok {
			continue
		}
		bytes, ok := pageSize(size)
		if !ok {
			continue // hugetlb.2MB.rsvd.max and the like
		}
		if err := write(dir, e.Name(), strconv.FormatInt(limits[bytes], 10)); err != nil {
			return err
		}
	}
	return nil
}

// pageSize parses a cgroup hugetlb page size ("2MB", "1GB", "64KB": binary
// units) into bytes.
func pageSize(s string) (int64, bool) {
	for unit, mult := range map[string]int64{"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * mult, err == nil && v > 0
		}
	}
	return 0, false
}

// maxValue is v, or "max" when v is negative (no limit).
func maxValue(v int64) string {
	if v < 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// write writes value to the cgroup file dir/name.
func write(dir, name, value string) error {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}
