package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekeeper/nodekeeper/internal/config"
	"github.com/nodekeeper/nodekeeper/internal/core/podruntime"
	"github.com/nodekeeper/nodekeeper/internal/machine/cgroups"
	"github.com/nodekeeper/nodekeeper/nodeapi"
)

// The kubelet's warning event on a node that runs on cgroup v1 with
// failCgroupV1: false (pkg/kubelet: cgroupVersionCheck, events.CgroupV1,
// cm.CgroupV1MaintenanceModeWarning).
const (
	ReasonCgroupV1   = "CgroupV1"
	cgroupV1Warning  = "cgroup v1 support is in maintenance mode, please migrate to cgroup v2"
	defaultSwapsFile = "/proc/swaps"
)

// readHost reads what config.Agent.HostErr checks: the cgroup version of
// the hierarchy at fsRoot ("" is /sys/fs/cgroup) and swapsFile
// (/proc/swaps; a missing file is no swap).
func readHost(fsRoot, swapsFile string) (config.Host, cgroups.Layout, error) {
	l, err := cgroups.Detect(fsRoot)
	if err != nil {
		return config.Host{}, l, err
	}
	b, err := os.ReadFile(swapsFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return config.Host{}, l, fmt.Errorf("swap: %w", err)
	}
	return config.Host{CgroupV2: l.Version == cgroups.V2, Swaps: string(b)}, l, nil
}

// swapSettings is the pod runtime's swap setting for the node: the swap
// behavior, the swap capacity, and whether the kernel limits swap per
// cgroup, seen on the kubepods cgroup (made by EnsureQoS) on v2, where the
// kubelet looks at its own cgroup, which may be the root that has no swap
// files, and on the memory root on v1.
func swapSettings(l cgroups.Layout, cgroupRoot, behavior string, swapCapacity int64) podruntime.Swap {
	s := podruntime.Swap{CgroupV2: l.Version == cgroups.V2, Limited: behavior == config.SwapLimited, Capacity: swapCapacity}
	file := filepath.Join(l.Dir("memory", "/"), "memory.memsw.limit_in_bytes")
	if s.CgroupV2 {
		file = filepath.Join(l.Dir("memory", cgroups.KubepodsPath(cgroupRoot)), "memory.swap.max")
	}
	if l.Dir("memory", "/") != "" {
		_, err := os.Stat(file)
		s.Controller = err == nil
	}
	return s
}

// warnCgroupV1 posts the kubelet's CgroupV1 warning event on the node when
// it runs on cgroup v1 (failCgroupV1: false let it start); the recorder logs
// it once.
func warnCgroupV1(rec nodeapi.Recorder, nodeName string, v cgroups.Version) {
	if v == cgroups.V1 {
		rec.Event(nodeapi.NodeRef(nodeName), v1.EventTypeWarning, ReasonCgroupV1, cgroupV1Warning)
	}
}
