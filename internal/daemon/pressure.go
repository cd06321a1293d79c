package daemon

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekeeper/nodekeeper/eviction"
	"github.com/nodekeeper/nodekeeper/internal/core/admission"
	"github.com/nodekeeper/nodekeeper/internal/machine/pressure"
)

// kubepodsLimits are the pods' cgroup's limits under the kubelet's
// node-allocatable enforcement ("pods" in enforceNodeAllocatable): capacity
// less the kube and system reservations. The hard eviction thresholds are
// not taken off, as the kubelet does not: they reserve room for the eviction
// manager to act before the kernel's OOM killer would in the pods' cgroup.
func kubepodsLimits(capacity, kubeReserved, systemReserved v1.ResourceList) v1.ResourceList {
	return admission.NodeAllocatable(capacity, kubeReserved, systemReserved, nil)
}

// pressureWatches returns what the pressure notifier watches for the hard
// eviction thresholds: the root memory cgroup at capacity less the
// memory.available threshold; the kubepods cgroup (at kubepodsCgroup) at its limit less the
// allocatableMemory.available threshold (when it has a limit); the root
// directory's filesystem below the nodefs.available threshold and the
// managed containerd's state directory's below imagefs.available (left out
// when it does not exist). statfs measures the filesystems for percentage
// thresholds.
func pressureWatches(thresholds []eviction.Threshold, memory int64, kubepodsCgroup string, kubepods v1.ResourceList,
	rootDir string, statfs func(string, *unix.Statfs_t) error) (pressure.Config, error) {
	cfg := pressure.Config{PSITrigger: pressure.DefaultPSITrigger}
	for _, t := range thresholds {
		if !t.Hard() {
			continue
		}
		switch t.Signal {
		case eviction.SignalMemoryAvailable:
			capacity := resource.NewQuantity(memory, resource.BinarySI)
			if mark := memory - t.Value.Of(capacity).Value(); mark > 0 {
				cfg.Memory = append(cfg.Memory, pressure.MemoryWatch{Cgroup: "/", Usage: uint64(mark)})
			}
		case eviction.SignalAllocatableMemoryAvailable:
			limit, ok := kubepods[v1.ResourceMemory]
			if !ok {
				continue
			}
			if mark := limit.Value() - t.Value.Of(&limit).Value(); mark > 0 {
				cfg.Memory = append(cfg.Memory, pressure.MemoryWatch{Cgroup: kubepodsCgroup, Usage: uint64(mark)})
			}
		case eviction.SignalNodeFsAvailable, eviction.SignalImageFsAvailable:
			path := rootDir
			if t.Signal == eviction.SignalImageFsAvailable {
				path = filepath.Join(rootDir, "containerd")
			}
			var st unix.Statfs_t
			if err := statfs(path, &st); err != nil {
				if t.Signal == eviction.SignalImageFsAvailable {
					continue // a runtime nodekeeper does not manage: its image filesystem is elsewhere
				}
				return pressure.Config{}, fmt.Errorf("statfs %s: %w", path, err)
			}
			capacity := resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI)
			cfg.Disk = append(cfg.Disk, pressure.DiskWatch{Path: path, Available: uint64(t.Value.Of(capacity).Value())})
		}
	}
	return cfg, nil
}
