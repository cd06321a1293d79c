package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultFSRoot is where the cgroup filesystems are mounted.
const DefaultFSRoot = "/sys/fs/cgroup"

// Version is a cgroup version.
type Version int

// The cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// v1Controllers are the v1 hierarchies pod cgroups are made in, in order.
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb"}

// v2Controllers are the controllers enabled for pod cgroups on v2, where the
// kernel offers them.
var v2Controllers = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}

// Layout says where the cgroup hierarchies are mounted. It is a value; it does
// not change after Detect.
type Layout struct {
	// Version is V1 or V2.
	Version Version
	// Root is the mount point of the cgroup filesystems (FSRoot).
	Root string
	// Dirs maps a v1 controller (cpu, cpuacct, cpuset, memory, pids, hugetlb)
	// to the mount directory of its hierarchy, for those that are mounted.
	// Nil on v2.
	Dirs map[string]string
	// Others are the directories of the other mounted v1 hierarchies (blkio,
	// devices, freezer, name=systemd...) and, on a hybrid machine, of the
	// unified (v2) tree, sorted. The runtime makes a container's cgroup in
	// every hierarchy, so pod cgroups are made and removed in these too,
	// without limits. Nil on v2.
	Others []string
	// Controllers lists the controllers the v2 root offers (its
	// cgroup.controllers). Nil on v1.
	Controllers []string
}

// Detect reads the layout of the cgroup filesystems mounted at fsRoot ("" is
// DefaultFSRoot): v2 when fsRoot holds cgroup.controllers, else v1, where a
// hierarchy is mounted when its directory under fsRoot holds cgroup.procs (a
// co-mounted "cpu,cpuacct", reached directly or through symlinks, counts for
// both). v1 needs at least the cpu and memory hierarchies.
func Detect(fsRoot string) (Layout, error) {
	if fsRoot == "" {
		fsRoot = DefaultFSRoot
	}
	if b, err := os.ReadFile(filepath.Join(fsRoot, "cgroup.controllers")); err == nil {
		return Layout{Version: V2, Root: fsRoot, Controllers: strings.Fields(string(b))}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return Layout{}, fmt.Errorf("cgroup v2 at %s: %w", fsRoot, err)
	}
	es, err := os.ReadDir(fsRoot)
	if err != nil {
		return Layout{}, fmt.Errorf("cgroup v1 at %s: %w", fsRoot, err)
	}
	l := Layout{Version: V1, Root: fsRoot, Dirs: map[string]string{}}
	mounted := map[string]bool{} // real directories of the hierarchies
	for _, e := range es {
		dir := filepath.Join(fsRoot, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		mounted[dir] = true
		for _, c := range strings.Split(e.Name(), ",") {
			if slices.Contains(v1Controllers, c) && l.Dirs[c] == "" {
				l.Dirs[c] = dir
			}
		}
	}
	for dir := range mounted {
		if !slices.ContainsFunc(v1Controllers, func(c string) bool { return l.Dirs[c] == dir }) {
			l.Others = append(l.Others, dir)
		}
	}
	slices.Sort(l.Others)
	for _, c := range []string{"cpu", "memory"} {
		if l.Dirs[c] == "" {
			return Layout{}, fmt.Errorf("cgroup v1 at %s: the %s hierarchy is not mounted (no %s)", fsRoot, c, filepath.Join(fsRoot, c, "cgroup.procs"))
		}
	}
	return l, nil
}

// Hierarchies returns the mount directory of every hierarchy pod cgroups are
// made in: the one unified tree on v2; on v1 those of Dirs, then Others.
func (l Layout) Hierarchies() []string {
	var out []string
	for _, h := range l.hierarchies() {
		out = append(out, h.dir)
	}
	return out
}

// Dir returns the directory of the cgroup at cgroupPath (absolute, as
// "/kubepods/pod<UID>") in the hierarchy of controller: on v2 the one unified
// tree; on v1 that controller's hierarchy, or "" when it is not mounted.
func (l Layout) Dir(controller, cgroupPath string) string {
	if l.Version == V2 {
		return filepath.Join(l.Root, cgroupPath)
	}
	d := l.Dirs[controller]
	if d == "" {
		return ""
	}
	return filepath.Join(d, cgroupPath)
}

// hierarchies returns the distinct hierarchy mount directories, in a fixed
// order, with the controllers each is reached by.
func (l Layout) hierarchies() []hierarchy {
	if l.Version == V2 {
		return []hierarchy{{dir: l.Root}}
	}
	var hs []hierarchy
	seen := map[string]int{}
	for _, c := range v1Controllers {
		d := l.Dirs[c]
		if d == "" {
			continue
		}
		if i, ok := seen[d]; ok {
			hs[i].controllers = append(hs[i].controllers, c)
			continue
		}
		seen[d] = len(hs)
		hs = append(hs, hierarchy{dir: d, controllers: []string{c}})
	}
	for _, d := range l.Others {
		hs = append(hs, hierarchy{dir: d})
	}
	return hs
}

// hierarchy is one mounted tree with the controllers the package writes
// through it (none for the v2 tree and the other v1 hierarchies).
type hierarchy struct {
	dir         string
	controllers []string
}

func (h hierarchy) has(controller string) bool {
	for _, c := range h.controllers {
		if c == controller {
			return true
		}
	}
	return false
}

// Names of the kubelet's QoS cgroups (cgroupfs driver).
const (
	kubepods   = "kubepods"
	burstable  = "burstable"
	besteffort = "besteffort"
)

// PodPath returns the cgroup path of a pod of class with uid under
// cgroupRoot ("" is "/"): /<root>/kubepods/pod<UID> for Guaranteed pods,
// /<root>/kubepods/{burstable,besteffort}/pod<UID> otherwise. It is the
// cgroupParent the cgroupfs driver wants.
func PodPath(cgroupRoot string, class v1.PodQOSClass, uid types.UID) string {
	return path.Join(tierPath(cgroupRoot, class), "pod"+string(uid))
}

// PodPaths returns the three places a pod's cgroup may be, for readers that
// do not know its class: Guaranteed, Burstable, BestEffort.
func PodPaths(cgroupRoot string, uid types.UID) []string {
	return []string{
		PodPath(cgroupRoot, v1.PodQOSGuaranteed, uid),
		PodPath(cgroupRoot, v1.PodQOSBurstable, uid),
		PodPath(cgroupRoot, v1.PodQOSBestEffort, uid),
	}
}

// KubepodsPath returns the cgroup path of the node's pods, /<root>/kubepods.
func KubepodsPath(cgroupRoot string) string {
	return path.Join("/", cgroupRoot, kubepods)
}

// tierPath returns the cgroup path holding the pods of class.
func tierPath(cgroupRoot string, class v1.PodQOSClass) string {
	switch class {
	case v1.PodQOSBurstable:
		return path.Join(KubepodsPath(cgroupRoot), burstable)
	case v1.PodQOSBestEffort:
		return path.Join(KubepodsPath(cgroupRoot), besteffort)
	}
	return KubepodsPath(cgroupRoot)
}
