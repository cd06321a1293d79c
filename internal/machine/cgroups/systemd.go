package cgroups

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekeeper/nodekeeper/qos"
)

// SystemdBootedDir exists when systemd is the init system (sd_booted(3)).
const SystemdBootedDir = "/run/systemd/system"

// systemdJobTimeout bounds the wait for a start or stop job of a slice.
const systemdJobTimeout = 30 * time.Second

// systemdConn is the part of systemd's manager API (org.freedesktop.systemd1)
// the systemd driver calls. go-systemd's *dbus.Conn satisfies it. A job's
// result ("done", "failed", "canceled", "timeout", "dependency", "skipped")
// is sent on ch when the job ends; ch must have room for it.
type systemdConn interface {
	StartTransientUnit(name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
	SetUnitProperties(name string, runtime bool, props ...sddbus.Property) error
	StopUnit(name, mode string, ch chan<- string) (int, error)
}

var _ systemdConn = (*sddbus.Conn)(nil)

// dialSystemd connects to systemd over the system bus, or, for root, over
// systemd's private socket when no bus daemon runs (go-systemd's
// dbus.New).
func dialSystemd() (systemdConn, error) { return sddbus.New() }

// systemdDriver makes the pod cgroups as systemd slices, as the kubelet's
// systemd cgroup driver does (through runc's libcontainer): each cgroup is a
// transient slice started over D-Bus with its limits as unit properties,
// then the same cgroup files as the cgroupfs driver's are written (runc's
// systemd managers write them too, after the properties), which also covers
// what systemd has no property for (hugetlb) and, on v1, the hierarchies
// systemd does not manage (cpuset...). A connection that closed is dialled
// again at the next call. Its methods are safe for concurrent use.
type systemdDriver struct {
	dial       func() (systemdConn, error)
	jobTimeout time.Duration

	mu   sync.Mutex  // guards conn
	conn systemdConn // nil after the connection closed, until the next call dials
}

// newSystemdDriver checks that systemd is the init system (booted, the
// directory SystemdBootedDir, is that check's path; "" is SystemdBootedDir)
// and that root is a cgroupRoot the driver can name, and connects through
// dial (nil: dialSystemd).
func newSystemdDriver(root, booted string, dial func() (systemdConn, error)) (*systemdDriver, error) {
	if booted == "" {
		booted = SystemdBootedDir
	}
	if dial == nil {
		dial = dialSystemd
	}
	if _, err := os.Stat(booted); err != nil {
		return nil, fmt.Errorf(`cgroupDriver "systemd": systemd is not the init system of this host (no %s); use "cgroupfs"`, booted)
	}
	for _, e := range strings.Split(strings.Trim(root, "/"), "/") {
		if strings.HasSuffix(e, ".slice") {
			return nil, fmt.Errorf(`cgroupRoot %q: with cgroupDriver "systemd" name the cgroup without .slice, as the kubelet does (/%s is the slice %s)`,
				root, strings.TrimSuffix(e, ".slice"), e)
		}
	}
	conn, err := dial()
	if err != nil {
		return nil, fmt.Errorf(`cgroupDriver "systemd": connect to systemd over D-Bus: %w`, err)
	}
	return &systemdDriver{dial: dial, conn: conn, jobTimeout: systemdJobTimeout}, nil
}

// call runs op on the connection to systemd. When the connection has closed
// (systemd re-executed, the bus restarted), it dials again and runs op once
// more, as runc does.
func (d *systemdDriver) call(op func(systemdConn) error) error {
	for try := 0; ; try++ {
		d.mu.Lock()
		conn := d.conn
		var err error
		if conn == nil {
			if conn, err = d.dial(); err == nil {
				d.conn = conn
			}
		}
		d.mu.Unlock()
		if err != nil {
			return fmt.Errorf("connect to systemd over D-Bus: %w", err)
		}
		err = op(conn)
		if !errors.Is(err, godbus.ErrClosed) || try > 0 {
			return err
		}
		d.mu.Lock()
		if d.conn == conn {
			d.conn = nil
		}
		d.mu.Unlock()
	}
}

// systemdSlice returns the slice unit of the kubelet cgroup name parts (the
// components of cgroupRoot, then "kubepods", the tier, "pod<UID>"): the parts
// with "-" escaped to "_", joined by "-", with ".slice" appended, as the
// kubelet's CgroupName.ToSystemd names it. No parts is the root slice,
// "-.slice".
func systemdSlice(parts []string) string {
	if len(parts) == 0 {
		return "-.slice"
	}
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = strings.ReplaceAll(p, "-", "_")
	}
	return strings.Join(esc, "-") + ".slice"
}

// expandSlice returns the cgroup path of the slice unit name, as systemd
// nests it: "a-b-c.slice" is /a.slice/a-b.slice/a-b-c.slice, "-.slice" is /.
func expandSlice(name string) string {
	base := strings.TrimSuffix(name, ".slice")
	if base == "-" {
		return "/"
	}
	var p, prefix string
	for _, c := range strings.Split(base, "-") {
		p += "/" + prefix + c + ".slice"
		prefix += c + "-"
	}
	return p
}

// systemdParts returns the kubelet cgroup name of the cgroupfs-style path
// elems under cgroupRoot (e.g. "kubepods", "burstable", "pod<UID>").
func systemdParts(cgroupRoot string, elems ...string) []string {
	var parts []string
	for _, e := range strings.Split(strings.Trim(cgroupRoot, "/"), "/") {
		if e != "" {
			parts = append(parts, e)
		}
	}
	return append(parts, elems...)
}

// tierParts returns the cgroup name elements of the tier of class below
// cgroupRoot: kubepods, then burstable or besteffort.
func tierParts(class v1.PodQOSClass) []string {
	switch class {
	case v1.PodQOSBurstable:
		return []string{kubepods, burstable}
	case v1.PodQOSBestEffort:
		return []string{kubepods, besteffort}
	}
	return []string{kubepods}
}

// SystemdKubepodsPath returns the cgroup path of the node's pods under the
// systemd driver: /kubepods.slice for cgroupRoot "/", and
// /nk.slice/nk-kubepods.slice for "/nk".
func SystemdKubepodsPath(cgroupRoot string) string {
	return expandSlice(systemdSlice(systemdParts(cgroupRoot, kubepods)))
}

// SystemdPodPath returns the cgroup path of a pod of class with uid under
// the systemd driver, which is also the cgroupParent the kubelet gives the
// runtime: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID
// with - as _>.slice, and /kubepods.slice/kubepods-pod<UID>.slice for
// Guaranteed pods. The runtime names the slice from its last element.
func SystemdPodPath(cgroupRoot string, class v1.PodQOSClass, uid types.UID) string {
	return expandSlice(systemdSlice(systemdParts(cgroupRoot, append(tierParts(class), "pod"+string(uid))...)))
}

// SystemdPodPaths is PodPaths under the systemd driver: the places a pod's
// cgroup may be, Guaranteed, Burstable, BestEffort.
func SystemdPodPaths(cgroupRoot string, uid types.UID) []string {
	return []string{
		SystemdPodPath(cgroupRoot, v1.PodQOSGuaranteed, uid),
		SystemdPodPath(cgroupRoot, v1.PodQOSBurstable, uid),
		SystemdPodPath(cgroupRoot, v1.PodQOSBestEffort, uid),
	}
}

// systemdTierPath is tierPath under the systemd driver.
func systemdTierPath(cgroupRoot string, class v1.PodQOSClass) string {
	return expandSlice(systemdSlice(systemdParts(cgroupRoot, tierParts(class)...)))
}

// sliceOf returns the unit name of the slice at cgroup path p (its last
// element).
func sliceOf(p string) string { return path.Base(p) }

// parentSlice returns the unit name of the slice holding the one at cgroup
// path p ("-.slice" at the top).
func parentSlice(p string) string {
	if d := path.Dir(p); d != "/" {
		return path.Base(d)
	}
	return "-.slice"
}

// properties returns the unit properties of a new slice at cgroupPath: what
// runc's systemd manager sets when the kubelet creates a cgroup (Description,
// Wants= its parent slice, the accounting switches, DefaultDependencies=no),
// then the resource properties res. Slices get no Delegate= (systemd takes
// it for services and scopes only; runc sets it on the containers' scopes).
func properties(cgroupPath, desc string, res []sddbus.Property) []sddbus.Property {
	props := []sddbus.Property{
		sddbus.PropDescription(desc),
		sddbus.PropWants(parentSlice(cgroupPath)),
		prop("MemoryAccounting", true),
		prop("CPUAccounting", true),
		prop("IOAccounting", true),
		prop("TasksAccounting", true),
		prop("DefaultDependencies", false),
	}
	return append(props, res...)
}

// resourceProperties returns r as the systemd resource properties runc sets
// for the kubelet: on v2 CPUWeight and MemoryMax, on v1 CPUShares and
// MemoryLimit; on both CPUQuotaPerSecUSec with CPUQuotaPeriodUSec, and
// TasksMax (infinity without a pids limit, as runc writes the kubelet's -1).
// A memory or cpu quota without a limit is left out, as runc leaves it.
func resourceProperties(l Layout, r resources) []sddbus.Property {
	props := []sddbus.Property{cpuProperty(l, r.shares)}
	if r.quota > 0 {
		props = append(props, prop("CPUQuotaPerSecUSec", quotaPerSec(r.quota, quotaPeriod)),
			prop("CPUQuotaPeriodUSec", uint64(quotaPeriod)))
	}
	if r.memory > 0 {
		name := "MemoryMax"
		if l.Version == V1 {
			name = "MemoryLimit"
		}
		props = append(props, prop(name, uint64(r.memory)))
	}
	tasks := uint64(math.MaxUint64)
	if r.pids > 0 {
		tasks = uint64(r.pids)
	}
	return append(props, prop("TasksMax", tasks))
}

// cpuProperty returns shares as a unit property: CPUWeight on v2, CPUShares
// on v1.
func cpuProperty(l Layout, shares uint64) sddbus.Property {
	if l.Version == V2 {
		return prop("CPUWeight", sharesToWeight(shares))
	}
	return prop("CPUShares", shares)
}

// quotaPerSec converts a CFS quota per period (µs) to systemd's
// CPUQuotaPerSecUSec, rounded up to a whole percent (10 ms) as runc does:
// systemd keeps the quota as a percentage, and a child cgroup's quota must
// fit in its parent's.
func quotaPerSec(quota, period int64) uint64 {
	perSec := uint64(quota) * 1000000 / uint64(period)
	if perSec%10000 != 0 {
		perSec = (perSec/10000 + 1) * 10000
	}
	return perSec
}

func prop(name string, v any) sddbus.Property {
	return sddbus.Property{Name: name, Value: godbus.MakeVariant(v)}
}

// dbusErrorIs reports whether err is the D-Bus error name.
func dbusErrorIs(err error, name string) bool {
	var e godbus.Error
	return errors.As(err, &e) && e.Name == name
}

// ensureSlice starts the transient slice at cgroupPath with props, or, when
// it exists, sets the resource properties res on it; it waits for the start
// job.
func (d *systemdDriver) ensureSlice(cgroupPath string, props, res []sddbus.Property) error {
	name := sliceOf(cgroupPath)
	ch := make(chan string, 1)
	err := d.call(func(c systemdConn) error {
		_, err := c.StartTransientUnit(name, "replace", props, ch)
		return err
	})
	if dbusErrorIs(err, "org.freedesktop.systemd1.UnitExists") {
		if len(res) == 0 {
			return nil
		}
		if err := d.call(func(c systemdConn) error { return c.SetUnitProperties(name, true, res...) }); err != nil {
			return fmt.Errorf("set properties of slice %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("start slice %s: %w", name, err)
	}
	return d.wait(ch, "start slice "+name)
}

// stopSlice stops the slice at cgroupPath and waits for the job; a slice
// systemd does not know is already stopped.
func (d *systemdDriver) stopSlice(cgroupPath string) error {
	name := sliceOf(cgroupPath)
	ch := make(chan string, 1)
	err := d.call(func(c systemdConn) error {
		_, err := c.StopUnit(name, "replace", ch)
		return err
	})
	if dbusErrorIs(err, "org.freedesktop.systemd1.NoSuchUnit") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop slice %s: %w", name, err)
	}
	return d.wait(ch, "stop slice "+name)
}

// wait waits for a job's result on ch.
func (d *systemdDriver) wait(ch <-chan string, what string) error {
	t := time.NewTimer(d.jobTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("%s: systemd job %s", what, res)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%s: no systemd job result after %s", what, d.jobTimeout)
	}
}

// ensureDirs makes the directories of the slice at cgroupPath that systemd
// leaves to others. On v1 those of the hierarchies systemd does not manage
// (cpuset, hugetlb...), as the cgroupfs driver makes them (cpuset gets its
// parent's cpus and mems). On v2 only a missing directory (systemd makes a
// slice's cgroup lazily), and no cgroup.subtree_control write: systemd owns
// those of its slices, enables cpu, io, memory and pids from the accounting
// properties, and takes back, asynchronously, a controller someone else
// enabled (cpuset), so a write of ours would race with it.
func (d *systemdDriver) ensureDirs(m *Manager, cgroupPath string) error {
	if m.layout.Version == V1 {
		return m.ensureTree(cgroupPath)
	}
	if err := os.MkdirAll(filepath.Join(m.layout.Root, cgroupPath), 0o755); err != nil {
		return fmt.Errorf("make cgroup %s: %w", filepath.Join(m.layout.Root, cgroupPath), err)
	}
	return nil
}

// ensureQoS is Manager.EnsureQoS under the systemd driver.
func (d *systemdDriver) ensureQoS(m *Manager) error {
	top := SystemdKubepodsPath(m.root)
	var kr *resources
	var kres []sddbus.Property
	if m.kubepods != nil {
		kr = &resources{shares: milliToShares(m.kubepods.Cpu().MilliValue()), quota: -1, memory: -1, pids: -1}
		if mem, ok := m.kubepods[v1.ResourceMemory]; ok && mem.Value() > 0 {
			kr.memory = mem.Value()
		}
		kres = resourceProperties(m.layout, *kr)
	}
	if err := d.ensureSlice(top, properties(top, "nodekeeper pods", kres), kres); err != nil {
		return err
	}
	be := resources{shares: minShares, quota: -1, memory: -1, pids: -1}
	for _, class := range []v1.PodQOSClass{v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		p := systemdTierPath(m.root, class)
		var res []sddbus.Property // burstable's shares are UpdateQoS's
		if class == v1.PodQOSBestEffort {
			res = resourceProperties(m.layout, be)
		}
		if err := d.ensureSlice(p, properties(p, "nodekeeper "+strings.ToLower(string(class))+" pods", res), res); err != nil {
			return err
		}
		if err := d.ensureDirs(m, p); err != nil {
			return err
		}
	}
	if err := m.apply(systemdTierPath(m.root, v1.PodQOSBestEffort), be); err != nil {
		return err
	}
	if kr != nil {
		return m.apply(top, *kr)
	}
	return nil
}

// updateQoS is Manager.UpdateQoS under the systemd driver.
func (d *systemdDriver) updateQoS(m *Manager, pods []*v1.Pod) error {
	var milli int64
	for _, pod := range pods {
		if qos.Class(pod) == v1.PodQOSBurstable {
			milli += podCPURequest(pod)
		}
	}
	for _, t := range []struct {
		class  v1.PodQOSClass
		shares uint64
	}{{v1.PodQOSBurstable, milliToShares(milli)}, {v1.PodQOSBestEffort, minShares}} {
		class, shares := t.class, t.shares
		p := systemdTierPath(m.root, class)
		if err := d.call(func(c systemdConn) error { return c.SetUnitProperties(sliceOf(p), true, cpuProperty(m.layout, shares)) }); err != nil {
			return fmt.Errorf("set properties of slice %s: %w", sliceOf(p), err)
		}
		if err := m.setShares(p, shares); err != nil {
			return err
		}
	}
	return nil
}

// ensurePod is Manager.EnsurePod under the systemd driver.
func (d *systemdDriver) ensurePod(m *Manager, pod *v1.Pod) (string, error) {
	p := SystemdPodPath(m.root, qos.Class(pod), pod.UID)
	r := podResources(pod, m.pidsLimit)
	res := resourceProperties(m.layout, r)
	if err := d.ensureSlice(p, properties(p, "nodekeeper pod "+string(pod.UID), res), res); err != nil {
		return "", err
	}
	if err := d.ensureDirs(m, p); err != nil {
		return "", err
	}
	if err := m.apply(p, r); err != nil {
		return "", err
	}
	return p, nil
}

// removePod is Manager.RemovePod under the systemd driver: it refuses while
// any process lives in the pod's cgroups (stopping a slice would kill them),
// then stops the pod's slice, then removes what systemd leaves (the v1
// hierarchies it does not manage).
func (d *systemdDriver) removePod(m *Manager, uid types.UID) error {
	var found []string // pod cgroup paths that exist in some hierarchy
	var tree []string  // every cgroup directory to remove, parents first
	for _, p := range SystemdPodPaths(m.root, uid) {
		for _, h := range m.layout.hierarchies() {
			dir := filepath.Join(h.dir, p)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			if !slices.Contains(found, p) {
				found = append(found, p)
			}
			sub, err := emptyTree(dir)
			if err != nil {
				return fmt.Errorf("remove pod cgroup %s: %w", uid, err)
			}
			tree = append(tree, sub...)
		}
	}
	for _, p := range found {
		if err := d.stopSlice(p); err != nil {
			return fmt.Errorf("remove pod cgroup %s: %w", uid, err)
		}
	}
	for i := len(tree) - 1; i >= 0; i-- {
		if err := m.rmdir(tree[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove pod cgroup %s: %w", tree[i], err)
		}
	}
	if len(found) > 0 {
		m.log.Info("Removed pod cgroup", "podUID", uid)
	}
	return nil
}

// pods is Manager.Pods under the systemd driver: the UIDs of the pod slices
// in the tiers' directories.
func (d *systemdDriver) pods(m *Manager) ([]types.UID, error) {
	var uids []types.UID
	for _, h := range m.layout.hierarchies() {
		for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			tier := systemdTierPath(m.root, class)
			prefix := strings.TrimSuffix(sliceOf(tier), ".slice") + "-pod"
			es, err := os.ReadDir(filepath.Join(h.dir, tier))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list pod cgroups: %w", err)
			}
			for _, e := range es {
				id, ok := strings.CutPrefix(e.Name(), prefix)
				if id, isSlice := strings.CutSuffix(id, ".slice"); e.IsDir() && ok && isSlice && id != "" && !strings.Contains(id, "-") {
					uids = append(uids, types.UID(strings.ReplaceAll(id, "_", "-")))
				}
			}
		}
	}
	slices.Sort(uids)
	return slices.Compact(uids), nil
}

// kubepodsPath returns the cgroup path of the node's pods under m's driver.
func (m *Manager) kubepodsPath() string {
	if m.sd != nil {
		return SystemdKubepodsPath(m.root)
	}
	return KubepodsPath(m.root)
}

// Names names the kubelet's cgroups under a cgroupDriver, for the readers of
// what a Manager with that Driver and CgroupRoot makes (stats, the pressure
// notifier). It is a value.
type Names struct {
	// Driver is the cgroupDriver: "systemd", else cgroupfs.
	Driver string
	// Root is the cgroupRoot; "" is "/".
	Root string
}

// Kubepods returns the cgroup path of the node's pods: KubepodsPath, or
// SystemdKubepodsPath under systemd.
func (n Names) Kubepods() string {
	if n.Driver == "systemd" {
		return SystemdKubepodsPath(n.Root)
	}
	return KubepodsPath(n.Root)
}

// PodPaths returns the places the cgroup of the pod with uid may be:
// PodPaths, or SystemdPodPaths under systemd.
func (n Names) PodPaths(uid types.UID) []string {
	if n.Driver == "systemd" {
		return SystemdPodPaths(n.Root, uid)
	}
	return PodPaths(n.Root, uid)
}

// Container returns the cgroup path containerd's runc gives the container
// (or sandbox) id of the pod whose cgroup is podCgroup:
// <podCgroup>/<id> under cgroupfs, <podCgroup>/cri-containerd-<id>.scope
// under systemd (containerd's cgroupsPath "<pod slice>:cri-containerd:<id>",
// which runc makes a scope of the pod's slice).
func (n Names) Container(podCgroup, id string) string {
	if n.Driver == "systemd" {
		return path.Join(podCgroup, "cri-containerd-"+id+".scope")
	}
	return path.Join(podCgroup, id)
}
