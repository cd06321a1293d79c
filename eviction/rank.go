package eviction

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekeeper/nodekeeper/qos"
)

// StatsFunc returns a pod's stats; ok is false when the Summary has none for it.
type StatsFunc func(pod *v1.Pod) (stats *statsapi.PodStats, ok bool)

// PodStatsFunc indexes a Summary's pod stats by UID, falling back to
// namespace/name for stats whose podRef carries no UID.
func PodStatsFunc(pods []statsapi.PodStats) StatsFunc {
	byUID := make(map[string]*statsapi.PodStats, len(pods))
	byName := make(map[[2]string]*statsapi.PodStats, len(pods))
	for i := range pods {
		p := &pods[i]
		if p.PodRef.UID != "" {
			byUID[p.PodRef.UID] = p
		}
		byName[[2]string{p.PodRef.Namespace, p.PodRef.Name}] = p
	}
	return func(pod *v1.Pod) (*statsapi.PodStats, bool) {
		if uid := string(pod.UID); uid != "" {
			if s, ok := byUID[uid]; ok {
				return s, true
			}
		}
		s, ok := byName[[2]string{pod.Namespace, pod.Name}]
		return s, ok
	}
}

// fsStats names the filesystem usage that counts towards a disk signal.
type fsStats struct {
	rootfs, logs, localVolumes bool
	// hostPath counts hostPath volumes among the local volumes, as the kubelet's
	// ranking does; its pod ephemeral-storage accounting leaves them out.
	hostPath bool
}

// fsStatsFor returns which usage counts for signal s on a node with layout l
// (the kubelet's table; image layers are not attributed to pods).
func fsStatsFor(s Signal, l DiskLayout) fsStats {
	all := fsStats{rootfs: true, logs: true, localVolumes: true, hostPath: true}
	switch l {
	case DedicatedImageFs:
		switch s {
		case SignalNodeFsAvailable, SignalNodeFsInodesFree:
			return fsStats{logs: true, localVolumes: true, hostPath: true}
		case SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree:
			return fsStats{rootfs: true}
		}
	case SplitImageFs:
		switch s {
		case SignalImageFsAvailable, SignalImageFsInodesFree:
			return fsStats{}
		}
	}
	return all
}

// Usage is what the ranking saw of one pod for one signal.
type Usage struct {
	// HasStats is false when the Summary has no stats for the pod; such pods rank first.
	HasStats bool
	// Usage is the pod's working set (memory), disk bytes, inodes or process count.
	Usage resource.Quantity
	// Request is the pod's memory or ephemeral-storage request; zero for inodes and PIDs.
	Request resource.Quantity
	// ExceedsRequest reports Usage > Request.
	ExceedsRequest bool
	// Priority is the pod's spec.priority (0 when unset).
	Priority int32
}

// PodUsage measures pod for signal s on layout l.
func PodUsage(s Signal, l DiskLayout, pod *v1.Pod, stats StatsFunc) Usage {
	u := Usage{Priority: qos.Priority(pod)}
	ps, ok := stats(pod)
	if !ok || ps == nil {
		return u
	}
	u.HasStats = true
	r, _ := s.Resource()
	switch r {
	case v1.ResourceMemory:
		u.Usage = *resource.NewQuantity(int64(workingSet(ps.Memory)), resource.BinarySI)
		u.Request = podRequest(pod, v1.ResourceMemory)
	case v1.ResourceEphemeralStorage:
		b, _ := podDiskUsage(ps, pod, fsStatsFor(s, l))
		u.Usage = *resource.NewQuantity(int64(b), resource.BinarySI)
		u.Request = podRequest(pod, v1.ResourceEphemeralStorage)
	case ResourceInodes:
		_, n := podDiskUsage(ps, pod, fsStatsFor(s, l))
		u.Usage = *resource.NewQuantity(int64(n), resource.DecimalSI)
	case ResourcePIDs:
		var n uint64
		if ps.ProcessStats != nil && ps.ProcessStats.ProcessCount != nil {
			n = *ps.ProcessStats.ProcessCount
		}
		u.Usage = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	u.ExceedsRequest = u.Usage.Cmp(u.Request) > 0
	return u
}

func workingSet(m *statsapi.MemoryStats) uint64 {
	if m == nil || m.WorkingSetBytes == nil {
		return 0
	}
	return *m.WorkingSetBytes
}

// podRequest is the pod's request of r as the kubelet's eviction code computes it:
// the larger of the sum over regular containers and the largest init container.
func podRequest(pod *v1.Pod, r v1.ResourceName) resource.Quantity {
	var sum, initMax resource.Quantity
	for i := range pod.Spec.Containers {
		if q, ok := pod.Spec.Containers[i].Resources.Requests[r]; ok {
			sum.Add(q)
		}
	}
	for i := range pod.Spec.InitContainers {
		if q, ok := pod.Spec.InitContainers[i].Resources.Requests[r]; ok && q.Cmp(initMax) > 0 {
			initMax = q
		}
	}
	if sum.Cmp(initMax) >= 0 {
		return *resource.NewQuantity(sum.Value(), resource.BinarySI)
	}
	return *resource.NewQuantity(initMax.Value(), resource.BinarySI)
}

// podDiskUsage sums the pod's bytes and inodes on the measured filesystems.
func podDiskUsage(ps *statsapi.PodStats, pod *v1.Pod, m fsStats) (bytes, inodes uint64) {
	add := func(fs *statsapi.FsStats) {
		if fs == nil {
			return
		}
		if fs.UsedBytes != nil {
			bytes += *fs.UsedBytes
		}
		if fs.InodesUsed != nil {
			inodes += *fs.InodesUsed
		}
	}
	for i := range ps.Containers {
		c := &ps.Containers[i]
		if m.rootfs {
			add(c.Rootfs)
		}
		if m.logs {
			add(c.Logs)
		}
	}
	if m.localVolumes {
		for _, name := range localVolumeNames(pod, m.hostPath) {
			for i := range ps.VolumeStats {
				if ps.VolumeStats[i].Name == name {
					add(&ps.VolumeStats[i].FsStats)
				}
			}
		}
	}
	return bytes, inodes
}

// localVolumeNames lists the pod's local ephemeral volumes as the kubelet's
// volumeutil.IsLocalEphemeralVolume defines them: gitRepo, configMap and emptyDir
// with the default medium (not Memory, not HugePages). With hostPath, hostPath
// volumes are added, as in the kubelet's eviction ranking (localVolumeNames).
func localVolumeNames(pod *v1.Pod, hostPath bool) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if (hostPath && v.HostPath != nil) || v.GitRepo != nil || v.ConfigMap != nil ||
			(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault) {
			out = append(out, v.Name)
		}
	}
	return out
}

// Ranked is one pod in a ranking with what the ranking saw of it.
type Ranked struct {
	Pod   *v1.Pod
	Usage Usage
}

// Rank orders pods for eviction under signal s on layout l, first to evict first:
//
//   - memory: pods without stats; usage above request before usage within it;
//     lower priority first; larger (working set − request) first.
//   - disk (bytes and inodes): the same with the layout's filesystem usage and the
//     ephemeral-storage request (zero for inodes).
//   - pid: lower priority first; pods without stats; more processes first.
//
// The sort is stable, so pods that tie keep their input order. pods is not modified.
func Rank(s Signal, l DiskLayout, pods []*v1.Pod, stats StatsFunc) []Ranked {
	out := make([]Ranked, len(pods))
	keys := make([]rankKey, len(pods))
	for i, p := range pods {
		u := PodUsage(s, l, p, stats)
		out[i] = Ranked{Pod: p, Usage: u}
		k := rankKey{i: i, noStats: !u.HasStats, exceeds: u.ExceedsRequest, priority: u.Priority}
		if u.HasStats {
			d := u.Usage.DeepCopy()
			d.Sub(u.Request)
			k.over = d.Value()
		}
		keys[i] = k
	}
	cmp := cmpRequestsFirst
	if s == SignalPIDAvailable {
		cmp = cmpPriorityFirst
	}
	slices.SortStableFunc(keys, cmp)
	sorted := make([]Ranked, len(out))
	for i, k := range keys {
		sorted[i] = out[k.i]
	}
	return sorted
}

type rankKey struct {
	i        int
	noStats  bool
	exceeds  bool
	priority int32
	over     int64 // usage − request, or process count
}

func cmpBoolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func cmpRequestsFirst(a, b rankKey) int {
	if c := cmpBoolFirst(a.noStats, b.noStats); c != 0 {
		return c
	}
	if c := cmpBoolFirst(a.exceeds, b.exceeds); c != 0 {
		return c
	}
	if a.priority != b.priority {
		if a.priority < b.priority {
			return -1
		}
		return 1
	}
	switch {
	case a.over > b.over:
		return -1
	case a.over < b.over:
		return 1
	}
	return 0
}

func cmpPriorityFirst(a, b rankKey) int {
	if a.priority != b.priority {
		if a.priority < b.priority {
			return -1
		}
		return 1
	}
	if c := cmpBoolFirst(a.noStats, b.noStats); c != 0 {
		return c
	}
	switch {
	case a.over > b.over:
		return -1
	case a.over < b.over:
		return 1
	}
	return 0
}
